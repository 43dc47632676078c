"""The batch loops behind the compiled entry points (entries.py): chunks of rows, each on its own scratch."""
from __future__ import annotations

import numpy as np
from numba import njit

from .backward import backward_row
from .configuration import difference
from .dynamics import energy_terms_row, terms_scratch
from .forward import forward_kinematics
from .guard import check_rows
from .jit import ROW_LOOP_OPTIONS, jitable
from .lm import carry_poses, next_trust, step_row
from .scratch import alloc_scratch


@jitable
def step_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, HV, HT, MF, MD, MM, MV, QB2, H2, IT, GN, CONV, want, QD, out_R,
              out_t, out_w, out_v, out_force, r0, r1):
    """IT.shape[0] = n steps (substeps under the same torques tau) of trajectories r0 … r1−1, :func:`step_row` each,
    on one scratch set. Nothing is copied between substeps: Q (n + 3, B, nq) holds q_{k−2}, q_prev and q in Q[0],
    Q[1], Q[2], and substep s steps from Q[s+1] (q_prev) and Q[s+2] (q) to Q[s+3], warm-started with Q[s] (so
    every substep's configuration is kept for the divergence guard, which checks each); Q[0] is read where HV (B,)
    is set (the rows whose q_{k−2} is known). The contact memory rotates from slot s % 2 of CP, CACT, CNORM, CANC
    to slot (s+1) % 2. The Newton memory (integrators/newton.py) of each row comes in, and goes out, in MF
    (B, nv, nv) (its Cholesky factor, lower triangle), MD (B, nv), MM (B,) (the D and μ it was solved with),
    MV (B,) bool (valid) and HT (B,) bool (its trust in the higher-order start: lm.next_trust), and carries from
    substep to substep in the scratch; q_{k−3} of the first substep comes from QB2 (B, nq), valid where H2 (B,)
    is set (that of substep s > 0 is Q[s − 1]). Substep s writes its iterations,
    gradient norm and convergence to IT[s], GN[s], CONV[s] and, with ``want``, its velocity to QD[s]
    (QD (n, B, nv)) and its kinematics to out_R[s], out_t[s], out_w[s], out_v[s] (each with the leading axis n:
    the guard reads every substep's; or 1, the last substep's only); force is the last substep's.

    Allocates the chunk's scratch here (with reference counting, which allocation needs), then runs its rows, each
    through all its substeps, in :func:`_run_rows` (without it). The parallel entry hands each chunk its own copy of
    the constants (entries.copy_body): without them Spider-v2 at 256 envs ran 0.93× as fast (paired,
    BENCHMARKS.md)."""
    sc = alloc_scratch(m.mass.shape[0], m.dof_link.shape[0], Q.shape[2], CP.shape[2], Q.dtype)
    _run_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, HV, HT, MF, MD, MM, MV, QB2, H2, IT, GN, CONV, want, QD, out_R,
              out_t, out_w, out_v, out_force, r0, r1, sc)


@njit(**ROW_LOOP_OPTIONS)
def _run_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, HV, HT, MF, MD, MM, MV, QB2, H2, IT, GN, CONV, want, QD, out_R,
              out_t, out_w, out_v, out_force, r0, r1, sc):
    """:func:`step_rows`' loops on its scratch ``sc``, compiled with :data:`ROW_LOOP_OPTIONS` (no reference
    counting: with it, every call of a helper that takes arrays — the BodyArrays' among them — paid atomic
    increments and decrements of their counts; BENCHMARKS.md). The arithmetic, and so every number, is the same."""
    n, nk = IT.shape[0], out_R.shape[0]
    for r in range(r0, r1):  # a row's substeps back to back: its poses and Newton memory carry from one to the next
        if MV[r]:
            load_memory(MF[r], MD[r], MM[r], sc)
        trust = HT[r]
        for s in range(n):
            ci, co = s % 2, (s + 1) % 2
            cP, cact, cnorm, canc = CP[ci], CACT[ci], CNORM[ci], CANC[ci]
            nP, nact, nnorm, nanc = CP[co], CACT[co], CNORM[co], CANC[co]
            k = min(s, nk - 1)  # (one kinematics slot: each substep overwrites it, the last one's stays)
            valid = s > 0 or HV[r]  # (Q[s] holds this substep's q_{k−2}, QB2 or Q[s − 1] its q_{k−3})
            valid2 = s > 1 or (s == 1 and HV[r]) or (s == 0 and H2[r])
            qb2 = QB2 if s == 0 else Q[s - 1]
            known, back, chord = s > 0, valid and trust, s > 0 or MV[r]  # (no control flow in a long call's list)
            cu = step_row(m, fo, qb2, Q[s], Q[s + 1], Q[s + 2], tau, cP, cact, cnorm, canc, Q[s + 3], IT[s], GN[s],
                          CONV[s], want, QD[s], out_R[k], out_t[k], out_w[k], out_v[k], nP, nact, nnorm, nanc,
                          out_force, r, sc, known, back, valid2, chord)
            trust = next_trust(m, fo, sc, cu, Q[s, r], valid)
            if s + 1 < n:
                carry_poses(sc, cu)
        store_memory(sc, r, MF, MD, MM, MV)
        HT[r] = trust


@jitable
def load_memory(F, D, mu, sc):
    """A row's Newton memory (factor F (nv, nv), D (nv,), μ) into the scratch (step_row's ``chord``)."""
    Af, Dc = sc.Af, sc.Dc
    for i in range(Dc.shape[0]):
        Dc[i] = D[i]
        for j in range(i + 1):
            Af[i, j] = F[i, j]
    sc.mc[0], sc.mc[1] = 1.0, mu


@jitable
def store_memory(sc, r, MF, MD, MM, MV):
    """Row r's Newton memory after its last substep, from the scratch: the factor's lower triangle (zeros above),
    D, μ and whether it is valid."""
    valid = sc.mc[0] != 0.0
    MV[r] = valid
    if valid:
        Af, Dc = sc.Af, sc.Dc
        nv = Dc.shape[0]
        for i in range(nv):
            MD[r, i] = Dc[i]
            for j in range(nv):
                MF[r, i, j] = Af[i, j] if j <= i else 0.0
        MM[r] = sc.mc[1]


@jitable
def vjp_rows(m, fo, q_prev, q_cur, tau, q_next, CP, CACT, CNORM, CANC, gin, abar, coords, fresh, out_lam, out_prev,
             out_cur, out_tau, out_anchor, r0, r1):
    """A step's backward (backward.backward_row) of trajectories r0 … r1−1, on one scratch set."""
    L, nv, n_s, dtype = m.mass.shape[0], m.dof_link.shape[0], CP.shape[1], q_cur.dtype
    sc = alloc_scratch(L, nv, q_cur.shape[1], n_s, dtype)
    _vjp_rows(m, fo, q_prev, q_cur, tau, q_next, CP, CACT, CNORM, CANC, gin, abar, coords, fresh, out_lam, out_prev,
              out_cur, out_tau, out_anchor, r0, r1, sc, np.empty((L, 6), dtype), np.empty(nv, dtype),
              np.empty((n_s, 3), dtype), np.empty((n_s, 3), dtype))


@njit(**ROW_LOOP_OPTIONS)
def _vjp_rows(m, fo, q_prev, q_cur, tau, q_next, CP, CACT, CNORM, CANC, gin, abar, coords, fresh, out_lam, out_prev,
              out_cur, out_tau, out_anchor, r0, r1, sc, V, gt, anc, amem):
    """:func:`vjp_rows`' row loop on its scratch (:data:`ROW_LOOP_OPTIONS`, see :func:`_run_rows`)."""
    for r in range(r0, r1):
        backward_row(m, fo, q_prev, q_cur, tau, q_next, CP, CACT, CNORM, CANC, gin, abar, coords, fresh,
                     out_lam, out_prev, out_cur, out_tau, out_anchor, r, sc, V, gt, anc, amem)


@jitable
def kinematics_rows(m, q, R, t, w, v):
    """Forward kinematics of every row of q (B, nq) into R (B, L, 3, 3), t (B, L, 3), w, v (B, nv, 3)."""
    L = m.mass.shape[0]
    Rj, R2 = np.empty((L, 3, 3), q.dtype), np.empty((L, 3, 3), q.dtype)
    for r in range(q.shape[0]):
        forward_kinematics(m, q[r], R[r], t[r], w[r], v[r], Rj, R2)


@jitable
def finish_rows(m, fo, q_prev, q, out_qd, out_R, out_t, out_w, out_v):
    """What :func:`step_rows` leaves with ``want`` for a state that did not come out of a step (a reset, a
    restore): velocity (q ⊖ q_prev)/Δt (B, nv) and the kinematics of q — the same compiled code, so a row's values
    do not depend on which of the two computed them."""
    dtype = q.dtype
    L, nv = m.mass.shape[0], m.dof_link.shape[0]
    Rj, R2 = np.empty((L, 3, 3), dtype), np.empty((L, 3, 3), dtype)
    dv = np.empty(nv, dtype)
    dt = fo.dt
    for r in range(q.shape[0]):
        difference(m, q_prev[r], q[r], dv)
        for k in range(nv):
            out_qd[r, k] = dv[k] / dt
        forward_kinematics(m, q[r], out_R[r], out_t[r], out_w[r], out_v[r], Rj, R2)


@jitable
def terms_rows(m, fo, act, gear, q, qd, out_terms, r0, r1):
    """The divergence guard's energy terms (N_TERMS,) of states r0 … r1−1 of configurations q (N, nq) and
    velocities qd (N, nv), into out_terms (N, N_TERMS) (:func:`~.dynamics.energy_terms_row`, the kinematics of
    each q computed here; DOFs ``act`` with gears ``gear``), on one scratch set: the same compiled arithmetic
    whichever chunk of rows, thread or entry computes a row."""
    act, gear = act.copy(), gear.copy()  # (each chunk its own, as step_rows)
    _terms_rows(m, fo, act, gear, q, qd, out_terms, r0, r1, *_kinematics_work(m, q.dtype), *_terms_work(m, q.dtype))


@jitable
def guard_rows(m, fo, act, gear, q, qd, R, t, w, v, out_terms, has_floor, mg_z, floor, c_gravity, safety, guard_dt,
               round_off, K_last, s_last, exceeded, K_out, s_out, r0, r1):
    """The divergence guard of trajectories r0 … r1−1 after a step of n substeps, in one pass: the energy terms
    of their n states q (n, B, nq), qd (n, B, nv) with the kinematics of q (R, t, w, v, leading axes (n, B): the
    step's own, StepInfo.substep_kin) into out_terms (n, B, N_TERMS), then :func:`~.guard.check_rows` of those
    terms against the budgets (K_last, s_last) (B,) (has_floor … round_off: the budget's constants, guard_dt its
    Δt [s] in float64), writing exceeded, K_out, s_out (B,)."""
    act, gear = act.copy(), gear.copy()
    _guard_terms(m, fo, act, gear, q, qd, R, t, w, v, out_terms, r0, r1, *_terms_work(m, q.dtype))
    check_rows(out_terms, has_floor, mg_z, floor, c_gravity, safety, guard_dt, round_off, K_last, s_last, exceeded,
               K_out, s_out, r0, r1)


@njit(**ROW_LOOP_OPTIONS)
def _guard_terms(m, fo, act, gear, q, qd, R, t, w, v, out_terms, r0, r1, K, Xk, M, A, piv, s33, s3, xv, ev, zv):
    """:func:`guard_rows`' terms loop on its scratch (:data:`ROW_LOOP_OPTIONS`, see :func:`_run_rows`)."""
    for k in range(q.shape[0]):
        for r in range(r0, r1):
            energy_terms_row(m, fo, act, gear, q[k, r], qd[k, r], R[k, r], t[k, r], w[k, r], v[k, r], K, Xk, M, A,
                             xv, ev, zv, piv, s33, s3, out_terms[k, r])


@jitable
def _kinematics_work(m, dtype):
    """Forward kinematics' work arrays and outputs for one state: Rj, R2, R, t, w, v (one set per chunk of rows)."""
    L, nv = m.mass.shape[0], m.dof_link.shape[0]
    Rj, R2 = np.empty((L, 3, 3), dtype), np.empty((L, 3, 3), dtype)
    R, t = np.empty((L, 3, 3), dtype), np.empty((L, 3), dtype)
    w, v = np.empty((nv, 3), dtype), np.empty((nv, 3), dtype)
    return Rj, R2, R, t, w, v


@jitable
def _terms_work(m, dtype):
    """:func:`~.dynamics.energy_terms_row`'s work arrays: K, Xk, M, A, piv, s33, s3, xv, ev, zv (one set per chunk
    of rows)."""
    L, nv = m.mass.shape[0], m.dof_link.shape[0]
    K, Xk = np.empty((L, 6, 6), dtype), np.empty((nv, 6), dtype)
    M, A = np.empty((nv, nv), dtype), np.empty((nv, nv), dtype)
    piv = np.empty(nv, np.int64)
    s33, s3 = np.empty((8, 3, 3), dtype), np.empty((8, 3), dtype)
    xv, ev, zv = terms_scratch(m, dtype)
    return K, Xk, M, A, piv, s33, s3, xv, ev, zv


@njit(**ROW_LOOP_OPTIONS)
def _terms_rows(m, fo, act, gear, q, qd, out_terms, r0, r1, Rj, R2, R, t, w, v, K, Xk, M, A, piv, s33, s3, xv, ev,
                zv):
    """:func:`terms_rows`' row loop on its scratch (:data:`ROW_LOOP_OPTIONS`, see :func:`_run_rows`)."""
    for r in range(r0, r1):
        forward_kinematics(m, q[r], R, t, w, v, Rj, R2)
        energy_terms_row(m, fo, act, gear, q[r], qd[r], R, t, w, v, K, Xk, M, A, xv, ev, zv, piv, s33, s3,
                         out_terms[r])
