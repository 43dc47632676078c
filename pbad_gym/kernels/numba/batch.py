"""The batch loops behind the compiled entry points (entries.py): chunks of rows, each on its own scratch."""
from __future__ import annotations

import numpy as np
from numba import njit

from .configuration import difference
from .constants import N_TERMS
from .dynamics import _finish_scratch, energy_terms_row
from .forward import forward_kinematics
from .jit import ROW_LOOP_OPTIONS, jitable
from .lm import carry_poses, step_row
from .scratch import alloc_scratch


@jitable
def step_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w,
              out_v, TERMS, out_force, r0, r1):
    """IT.shape[0] steps (substeps under the same torques tau) of trajectories r0 … r1−1, :func:`step_row` each,
    on one scratch set. The state and contact memory rotate through buffers, so nothing is copied between
    substeps: substep s steps from Q[s % 3] (q_prev) and Q[(s+1) % 3] (q) to Q[(s+2) % 3], from contact memory
    slot s % 2 of CP, CACT, CNORM, CANC to slot (s+1) % 2, and writes its iterations, gradient norm, convergence
    and energy terms to IT[s], GN[s], CONV[s] and TERMS[s]; the other finish outputs are the last substep's.

    Allocates the chunk's scratch here (with reference counting, which allocation needs), then runs its rows, each
    through all its substeps, in :func:`_run_rows` (without it). The parallel entry hands each chunk its own copy of
    the constants (entries.copy_body): without them Spider-v2 at 256 envs ran 0.93× as fast (paired,
    BENCHMARKS.md)."""
    sc = alloc_scratch(m.mass.shape[0], m.dof_link.shape[0], Q.shape[2], CP.shape[2], Q.dtype)
    act, gear = act.copy(), gear.copy()
    _run_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w, out_v,
              TERMS, out_force, r0, r1, sc)


@njit(**ROW_LOOP_OPTIONS)
def _run_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w, out_v,
              TERMS, out_force, r0, r1, sc):
    """:func:`step_rows`' loops on its scratch ``sc``, compiled with :data:`ROW_LOOP_OPTIONS` (no reference
    counting: with it, every call of a helper that takes arrays — the BodyArrays' among them — paid atomic
    increments and decrements of their counts; BENCHMARKS.md). The arithmetic, and so every number, is the same."""
    n = IT.shape[0]
    for r in range(r0, r1):  # a row's substeps back to back: its poses carry from one to the next
        for s in range(n):
            ci, co = s % 2, (s + 1) % 2
            q_prev, q_cur, q_out = Q[s % 3], Q[(s + 1) % 3], Q[(s + 2) % 3]
            cP, cact, cnorm, canc = CP[ci], CACT[ci], CNORM[ci], CANC[ci]
            nP, nact, nnorm, nanc = CP[co], CACT[co], CNORM[co], CANC[co]
            cu = step_row(m, fo, q_prev, q_cur, tau, cP, cact, cnorm, canc, q_out, IT[s], GN[s], CONV[s], act, gear,
                          want, out_qd, out_R, out_t, out_w, out_v, TERMS[s], nP, nact, nnorm, nanc, out_force, r, sc,
                          s > 0)
            if s + 1 < n:
                carry_poses(sc, cu)


@jitable
def kinematics_rows(m, q, R, t, w, v):
    """Forward kinematics of every row of q (B, nq) into R (B, L, 3, 3), t (B, L, 3), w, v (B, nv, 3)."""
    L = m.mass.shape[0]
    Rj, R2 = np.empty((L, 3, 3), q.dtype), np.empty((L, 3, 3), q.dtype)
    for r in range(q.shape[0]):
        forward_kinematics(m, q[r], R[r], t[r], w[r], v[r], Rj, R2)


@jitable
def finish_rows(m, fo, act, gear, q_prev, q, out_qd, out_R, out_t, out_w, out_v, out_terms):
    """What :func:`step_rows` leaves with ``want`` for a state that did not come out of a step (a reset, a
    restore): velocity (q ⊖ q_prev)/Δt (B, nv), kinematics of q and the energy terms (B, N_TERMS) — the same
    compiled code, so a row's values do not depend on which of the two computed them."""
    dtype = q.dtype
    L, nv = m.mass.shape[0], m.dof_link.shape[0]
    Rj, R2 = np.empty((L, 3, 3), dtype), np.empty((L, 3, 3), dtype)
    K, Xk = np.empty((L, 6, 6), dtype), np.empty((nv, 6), dtype)
    M, A = np.empty((nv, nv), dtype), np.empty((nv, nv), dtype)
    dv, piv = np.empty(nv, dtype), np.empty(nv, np.int64)
    s33, s3 = np.empty((8, 3, 3), dtype), np.empty((8, 3), dtype)
    xv, ev, zv, qdr, trow = _finish_scratch(m, dtype)
    _finish_rows(m, fo, act, gear, q_prev, q, out_qd, out_R, out_t, out_w, out_v, out_terms, Rj, R2, K, Xk, M, A, dv,
                 piv, s33, s3, xv, ev, zv, qdr, trow)


@njit(**ROW_LOOP_OPTIONS)
def _finish_rows(m, fo, act, gear, q_prev, q, out_qd, out_R, out_t, out_w, out_v, out_terms, Rj, R2, K, Xk, M, A, dv,
                 piv, s33, s3, xv, ev, zv, qdr, trow):
    """:func:`finish_rows`' row loop on its scratch (:data:`ROW_LOOP_OPTIONS`, see :func:`_run_rows`)."""
    nv = m.dof_link.shape[0]
    dt = fo.dt
    for r in range(q.shape[0]):
        difference(m, q_prev[r], q[r], dv)
        for k in range(nv):
            qdr[k] = dv[k] / dt
            out_qd[r, k] = qdr[k]
        forward_kinematics(m, q[r], out_R[r], out_t[r], out_w[r], out_v[r], Rj, R2)
        energy_terms_row(m, fo, act, gear, q[r], qdr, out_R[r], out_t[r], out_w[r], out_v[r], K, Xk, M, A, xv, ev,
                         zv, piv, s33, s3, trow)
        for k in range(N_TERMS):
            out_terms[r, k] = trow[k]
