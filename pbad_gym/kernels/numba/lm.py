"""One trajectory's order-2 PBAD step: its Levenberg-Marquardt to convergence (optim/lm.py: same accept test,
damping schedule, round-off band and convergence measure max_j |g_j|/D_j), with the friction cone's fixed point
(integrators/pbad.py solve_step_in_cone), from the third-order warm start and the chord step of the Newton memory
(integrators/newton.py)."""
from __future__ import annotations

import math

from ...integrators.bdf2 import INERTIA, REFERENCE
from ...integrators.newton import CHORD_GATE, CHORD_RATE, CHORD_STEPS, SMOOTH, TRUST
from ...optim.lm import _EPS_BAND, MU_AFTER_REJECT, MU_GROW, MU_MAX, MU_SHRINK, STEP_SHRINK
from .configuration import difference, integrate
from .contact import cone_refresh, contact_update, normal_shift
from .forward import forward_kinematics
from .hessian import hessian
from .jit import inlined_by_llvm, jitable
from .linalg import _damped_step, _length2, _measure, chord_solve
from .terms import _energy_grad


@inlined_by_llvm
def prepare_row(m, fo, qp, qc, Rp, tp, Rr, tr, A, bt, Wd, dv, qpred, cPr):
    """The step data of one row (integrators/pbad.py prepare_step) from q_prev, q_cur (qp, qc) and their poses
    (Rp, tp), (Rr, tr): the drag weights Wd = R_k C R_kᵀ (L, 3, 3), and for the order-2 step (BDF2's:
    :func:`prepare_bdf2_row`) the inertia target's poses A = 2R_k − R_{k−1}, bt = 2t_k − t_{k−1} (L, …), the
    predictor qpred = q_k ⊕ (q_k ⊖ q_{k−1}) (dv: q_k ⊖ q_{k−1} (nv,)) and, with contact, the normal penalty's
    shift in column 3 of the row's contact centres cPr (contact.normal_shift)."""
    if fo.has_drag:
        C = fo.drag
        for i in range(m.mass.shape[0]):
            for a in range(3):
                for b in range(3):
                    Wd[i, a, b] = (Rr[i, a, 0] * C[i, 0] * Rr[i, b, 0] + Rr[i, a, 1] * C[i, 1] * Rr[i, b, 1]
                                   + Rr[i, a, 2] * C[i, 2] * Rr[i, b, 2])
    if fo.bdf2 != 0:
        return
    for i in range(m.mass.shape[0]):
        for a in range(3):
            bt[i, a] = 2 * tr[i, a] - tp[i, a]
            for b in range(3):
                A[i, a, b] = 2 * Rr[i, a, b] - Rp[i, a, b]
    difference(m, qp, qc, dv)
    integrate(m, qc, dv, qpred)
    if fo.has_contact:
        normal_shift(m, fo, cPr, Rp, tp)


@inlined_by_llvm
def prepare_bdf2_row(m, fo, qb3, qb2, sc):
    """The BDF2 step's data of one row (integrators/bdf2.py prepare_bdf2_step) beside :func:`prepare_row`'s, from
    q_{k−2}, q_{k−3} (qb2, qb3 (nq,)) and sc.qp, sc.qc with their poses: the inertia target's poses A, bt (the
    combination INERTIA of the four configurations' poses), the predictor sc.qpred = q̂ (the same in joint
    space), the references sc.qe = q̃, sc.Re, sc.te ((4x_k − x_{k−1})/3) and, with contact, the sphere centres
    P̃ in sc.cPr with their anchors moved along and the normal penalty's shift of P̃. The history's poses go
    to the LM's evaluation slots sc.Rs, sc.ts (free until the LM starts)."""
    Rp, tp, Rr, tr, Rb, tb = sc.Rp, sc.tp, sc.Rr, sc.tr, sc.Rs, sc.ts
    forward_kinematics(m, qb2, Rb[0], tb[0], sc.wtmp, sc.vtmp, sc.Rj, sc.R2)
    forward_kinematics(m, qb3, Rb[1], tb[1], sc.wtmp, sc.vtmp, sc.Rj, sc.R2)
    w0, w1, w2, w3 = INERTIA
    r0, r1 = REFERENCE
    A, bt, Re, te = sc.A, sc.bt, sc.Re, sc.te
    for i in range(m.mass.shape[0]):
        for a in range(3):
            bt[i, a] = w0 * tr[i, a] + w1 * tp[i, a] + w2 * tb[0, i, a] + w3 * tb[1, i, a]
            te[i, a] = r0 * tr[i, a] + r1 * tp[i, a]
            for b in range(3):
                A[i, a, b] = w0 * Rr[i, a, b] + w1 * Rp[i, a, b] + w2 * Rb[0, i, a, b] + w3 * Rb[1, i, a, b]
                Re[i, a, b] = r0 * Rr[i, a, b] + r1 * Rp[i, a, b]
    qc, d, acc = sc.qc, sc.dv, sc.dx
    difference(m, qc, sc.qp, d)
    for k in range(d.shape[0]):
        acc[k] = r1 * d[k]
    integrate(m, qc, acc, sc.qe)
    for k in range(d.shape[0]):
        acc[k] = w1 * d[k]
    difference(m, qc, qb2, d)
    for k in range(d.shape[0]):
        acc[k] += w2 * d[k]
    difference(m, qc, qb3, d)
    for k in range(d.shape[0]):
        acc[k] += w3 * d[k]
    integrate(m, qc, acc, sc.qpred)
    if fo.has_contact:
        cP, canc, p0 = sc.cPr, sc.canr, m.contact_p0
        for s in range(m.contact_link.shape[0]):
            l = m.contact_link[s]
            for a in range(3):
                back = tp[l, a] + (Rp[l, a, 0] * p0[s, 0] + Rp[l, a, 1] * p0[s, 1] + Rp[l, a, 2] * p0[s, 2])
                ref = r0 * cP[s, a] + r1 * back
                canc[s, a] += ref - cP[s, a]  # (a stuck anchor keeps its offset from the reference: bdf2.py)
                cP[s, a] = ref
        normal_shift(m, fo, cP, Rp, tp)


@inlined_by_llvm
def warm_start(m, qb2, qb, qp, qc, back2, dv, d2, d3, tmp, out):
    """Where the motion is smooth (integrators/newton.py warm_start: max_j |Δ²q_j| ≤ SMOOTH · max_j |Δq_j|),
    out = q_k ⊕ (Δq + Δ²q + Δ³q) from qb2 = q_{k−3} (read only where ``back2``: it is known), qb = q_{k−2},
    qp = q_{k−1}, qc = q_k and dv = Δq = q_k ⊖ q_{k−1}, Δ³q only where also max_j |Δ³q_j| ≤ SMOOTH ·
    max_j |Δ²q_j|, and True; else False and out untouched (the same arithmetic as newton.py). d2, d3 (nv,),
    tmp (nq,) scratch."""
    for k in range(qb.shape[0]):
        tmp[k] = qb[k]
    difference(m, tmp, qp, d2)
    if back2:
        difference(m, qb2, tmp, d3)
    big3, big2, big1 = 0.0, 0.0, 0.0
    for k in range(d2.shape[0]):
        e1 = d2[k]
        d2[k] = dv[k] - e1
        big2, big1 = max(big2, abs(d2[k])), max(big1, abs(dv[k]))
        if back2:
            d3[k] = d2[k] - (e1 - d3[k])
            big3 = max(big3, abs(d3[k]))
    if not big2 <= SMOOTH * big1:
        return False
    third = back2 and big3 <= SMOOTH * big2
    for k in range(d2.shape[0]):
        d2[k] = dv[k] + d2[k] + (d3[k] if third else 0.0)
    integrate(m, qc, d2, out)
    return True


@jitable
def predictor_trust(m, qb, qp, qc, qn, d1, d2, u):
    """integrators/newton.py predictor_trust of one row, the same arithmetic: whether q_{k−2}, q_{k−1}, q_k (qb, qp,
    qc (nq,)) extrapolated to second order predicted the solution qn at least 1/TRUST times closer than to first
    order. d1, d2, u (nv,) scratch."""
    difference(m, qp, qc, d1)
    difference(m, qb, qp, d2)
    difference(m, qc, qn, u)
    e1, e2 = 0.0, 0.0
    for j in range(d1.shape[0]):
        d2[j] = d1[j] - d2[j]
        u[j] = u[j] - d1[j]
        a, b = abs(u[j]), abs(u[j] - d2[j])
        if a != a or b != b:  # (NumPy's max propagates NaN, and NaN is not trusted; Python's max would drop it)
            return False
        e1, e2 = max(e1, a), max(e2, b)
    return e2 <= TRUST * e1


@jitable
def next_trust(m, fo, sc, cu, qb, valid):
    """The Newton memory's trust after a row's step that left its solution in LM slot ``cu``
    (:func:`predictor_trust` of q_back ``qb`` (nq,) and the step's sc.qp, sc.qc; True without the memory or where
    ``valid`` is False: no q_{k−2} to judge by). Uses the slots' free halves as scratch."""
    if fo.newton_memory == 0 or not valid:
        return True
    xb = sc.xs[1 - cu]
    for k in range(qb.shape[0]):
        xb[k] = qb[k]
    return predictor_trust(m, xb, sc.qp, sc.qc, sc.xs[cu], sc.dx, sc.dv, sc.gs[1 - cu])


@inlined_by_llvm
def chord_trial(m, fo, sc, qc, Rr, tr, qpred, E, cu):
    """A chord step from the LM's slot ``cu`` (integrators/newton.py solve_with_memory): δ = −(L Lᵀ)⁻¹ g with the
    factor L that sc.Af keeps from an earlier solve (sc.Dc, sc.mc: its D and μ), the trial point in the other
    slot and its energy and gradient, and LM's accept test; qc, Rr, tr: the step energy's references (sc.qc,
    sc.Rr, sc.tr; BDF2's sc.qe, sc.Re, sc.te). Returns (accepted, E at the trial point)."""
    nx = 1 - cu
    g, D, dx, xs = sc.gs[cu], sc.D, sc.dx, sc.xs
    nv = dx.shape[0]
    ok = chord_solve(sc.Af, g, dx)
    length2 = _length2(dx, D)
    gdx = 0.0
    for j in range(nv):
        gdx += g[j] * dx[j]
    pred = 0.5 * (sc.mc[1] * length2 - gdx)
    if not ok:
        for j in range(nv):
            dx[j] = 0.0
    integrate(m, xs[cu], dx, xs[nx])
    E_try = _energy_grad(m, fo, xs[nx], qc, qpred, sc.ta, sc.A, sc.bt, Rr, tr, sc.Wd, sc.cPr, sc.car, sc.cnr,
                         sc.canr, sc.Rs[nx], sc.ts[nx], sc.ws[nx], sc.vs[nx], sc.Rj, sc.R2, sc.Gs[nx], sc.fs[nx],
                         sc.wr, sc.gs[nx], sc.s33, sc.s3)
    band = _EPS_BAND * fo.mach_eps * max(abs(E), abs(E_try))
    return ok and ((E_try < E) or ((E_try <= E + band) and (pred <= band))), E_try


@jitable
def keep_factor(code, mu, D, Dc, mc):
    """The Newton memory after a damped solve that returned ``code`` (linalg.solve_damped): valid with that solve's
    μ and D when it was a finite Cholesky solve (its factor is in sc.Af), else invalid."""
    if code == 1:
        mc[0], mc[1] = 1.0, mu
        for j in range(D.shape[0]):
            Dc[j] = D[j]
    else:
        mc[0] = 0.0


@inlined_by_llvm
def step_row(m, fo, q_back2, q_back, q_prev, q_cur, tau, cP, cact, cnorm, canc, out_q, out_it, out_gn, out_conv, want,
             out_qd, out_R, out_t, out_w, out_v, out_cP, out_cact, out_cnorm, out_canc, out_force, r, sc, known, back,
             back2, chord):
    """The step of trajectory r, running its own Levenberg-Marquardt to convergence, on the work arrays ``sc``
    (a scratch.StepScratch; no allocation here, so the GPU kernel runs this same code, one thread per row). Returns the
    LM slot of the result (sc.Rs[slot], sc.ts[slot]: its poses). ``known``: sc.Rp, sc.tp and sc.Rr, sc.tr already hold
    the poses of q_prev and q_cur (:func:`carry_poses` after this row's previous substep). ``back``: q_back (B, nq)
    holds q_{k−2}, and the LM starts from the higher-order :func:`warm_start` (else from q_k ⊕ (q_k ⊖ q_{k−1}));
    ``back2``: q_back2 (B, nq) holds q_{k−3} too (third order where smooth). ``chord``: sc.Af, sc.Dc, sc.mc hold a
    Newton memory (valid where sc.mc[0] != 0; its first iteration is then :func:`chord_trial`, a fresh Hessian only
    where that does not converge); the step leaves its own there (:func:`keep_factor`). Both only with fo.newton_memory
    (else the memoryless step). With fo.bdf2 the step is BDF2's (:func:`prepare_bdf2_row`; q_back and q_back2 hold
    q_{k−2} and q_{k−3}, always known) from its predictor q̂, without a Newton memory.

    With ``want`` != 0 the row also leaves what the environment reads of its new state (one call per env step,
    no NumPy after it): velocity q̇ = (q_{k+1} ⊖ q_k)/Δt (out_qd; fo.bdf2: BDF2's), the kinematics of q_{k+1}
    (out_R, out_t, out_w, out_v: the LM's own evaluation at its accepted point) and, with contact, the new contact
    memory (out_cP, out_cact, out_cnorm, out_canc) and the ground force the step applied (out_force). With
    want == 0 these outputs are not touched (they may be empty)."""
    qp, qc, ta, cPr, canr, car, cnr = sc.qp, sc.qc, sc.ta, sc.cPr, sc.canr, sc.car, sc.cnr
    Rs, ts, ws, vs, Gs, fs, gs, xs = sc.Rs, sc.ts, sc.ws, sc.vs, sc.Gs, sc.fs, sc.gs, sc.xs
    Rp, tp, Rr, tr, A, bt, Wd = sc.Rp, sc.tp, sc.Rr, sc.tr, sc.A, sc.bt, sc.Wd
    wtmp, vtmp, Rj, R2, wr, K, Z, F, Xk = sc.wtmp, sc.vtmp, sc.Rj, sc.R2, sc.wr, sc.K, sc.Z, sc.F, sc.Xk
    H, Af, D, dx, dv, piv, qpred = sc.H, sc.Af, sc.D, sc.dx, sc.dv, sc.piv, sc.qpred
    s33, s3, s36 = sc.s33, sc.s3, sc.s36
    n_s = cP.shape[1]
    L, nv, nq = m.mass.shape[0], m.dof_link.shape[0], q_cur.shape[1]
    tol, eps, mu0 = fo.tol, fo.mach_eps, fo.mu0
    max_iter = fo.max_iter
    dt = fo.dt
    for k in range(qc.shape[0]):
        qp[k], qc[k] = q_prev[r, k], q_cur[r, k]
    for k in range(ta.shape[0]):
        ta[k] = tau[r, k]
    for k in range(n_s):
        car[k], cnr[k] = cact[r, k], cnorm[r, k]
        for a in range(3):
            cPr[k, a], canr[k, a] = cP[r, k, a], canc[r, k, a]
    if not known:
        forward_kinematics(m, qp, Rp, tp, wtmp, vtmp, Rj, R2)
        forward_kinematics(m, qc, Rr, tr, wtmp, vtmp, Rj, R2)
    prepare_row(m, fo, qp, qc, Rp, tp, Rr, tr, A, bt, Wd, dv, qpred, cPr)
    # the step energy's references: q_k and its poses, BDF2's q̃ and (4x_k − x_{k−1})/3 (qc, Rr, tr stay q_k's:
    # the velocity and the next substep's poses read them)
    bdf2 = fo.bdf2 != 0
    if bdf2:
        prepare_bdf2_row(m, fo, q_back2[r], q_back[r], sc)
    qe = sc.qe if bdf2 else qc
    Re = sc.Re if bdf2 else Rr
    te = sc.te if bdf2 else tr
    # Levenberg-Marquardt (optim/lm.py) from the warm start
    Dc, mc = sc.Dc, sc.mc
    back, chord = back and fo.newton_memory != 0, chord and fo.newton_memory != 0
    back2 = back and back2
    if not chord:
        mc[0] = 0.0
    cu = 0
    if not (back and warm_start(m, q_back2[r], q_back[r], qp, qc, back2, dv, dx, gs[1], xs[1], xs[0])):
        mc[0] = 0.0  # (no chord step where the motion is not smooth: newton.py)
        for k in range(nq):
            xs[0, k] = qpred[k]
    E = _energy_grad(m, fo, xs[0], qe, qpred, ta, A, bt, Re, te, Wd, cPr, car, cnr, canr, Rs[0], ts[0],
                     ws[0], vs[0], Rj, R2, Gs[0], fs[0], wr, gs[0], s33, s3)
    mu = mu0
    iters = 0
    conv = False
    limit = math.inf
    fresh = True  # a Hessian at the current point still to form
    if mc[0] != 0.0:  # chord steps first (integrators/newton.py), measured with the memory's D
        for j in range(nv):
            D[j] = Dc[j]
        gnorm = _measure(gs[0], D)
        fresh = gnorm >= tol
        # (at least one chord step, even from a start within the tolerance: the measure is blind to the soft modes,
        # where an extrapolated start accepted as it is lets errors drift from step to step; newton.py)
        while (fresh or iters == 0) and gnorm <= CHORD_GATE * tol and iters < CHORD_STEPS and iters < max_iter:
            accept, E_try = chord_trial(m, fo, sc, qe, Re, te, qpred, E, cu)
            iters += 1
            if not accept:
                break
            gn_try = _measure(gs[1 - cu], D)
            if not fresh and gn_try >= tol:  # (a start within the tolerance is kept where round-off lifts the
                break                       # chord point's measure above it: LM could not do better from there)
            last, cu, E = gnorm, 1 - cu, E_try
            gnorm = gn_try
            fresh = gnorm >= tol
            if gnorm > CHORD_RATE * last:
                break
    if fresh:
        hessian(m, fo, xs[cu], qe, qpred, ta, Rs[cu], ts[cu], ws[cu], vs[cu], Gs[cu], fs[cu], Wd, cPr, car, cnr,
                canr, K, Z, F, Xk, H, D, s33, s3, s36)
        gnorm = _measure(gs[cu], D)
    for p in range(fo.cone_passes + 1):  # Coulomb friction capped by the step's own normal force (pbad.py)
        if p > 0:
            if not cone_refresh(m, fo, Rs[cu], ts[cu], cPr, car, cnr, canr):
                break
            E = _energy_grad(m, fo, xs[cu], qe, qpred, ta, A, bt, Re, te, Wd, cPr, car, cnr, canr, Rs[cu], ts[cu],
                             ws[cu], vs[cu], Rj, R2, Gs[cu], fs[cu], wr, gs[cu], s33, s3)
            hessian(m, fo, xs[cu], qe, qpred, ta, Rs[cu], ts[cu], ws[cu], vs[cu], Gs[cu], fs[cu], Wd, cPr, car, cnr,
                    canr, K, Z, F, Xk, H, D, s33, s3, s36)
            mu, limit, gnorm = mu0, math.inf, _measure(gs[cu], D)
        for _ in range(max_iter - (iters if p == 0 else 0)):  # (chord iterations count against the first pass)
            if gnorm < tol:
                conv = True
                break
            g = gs[cu]
            code = _damped_step(H, D, mu, g, Af, dx, piv)
            length2 = _length2(dx, D)
            while code != 0 and length2 > limit and math.isfinite(length2) and mu < MU_MAX:  # after a rejection
                mu = min(mu * MU_GROW, MU_MAX)
                code = _damped_step(H, D, mu, g, Af, dx, piv)
                length2 = _length2(dx, D)
            if fo.newton_memory != 0:
                keep_factor(code, mu, D, Dc, mc)
            ok = code != 0
            gdx = 0.0
            for j in range(nv):
                gdx += g[j] * dx[j]
            pred = 0.5 * (mu * length2 - gdx)  # −(g·δ + ½ δᵀHδ) with Hδ = −g − μDδ (optim/lm.py _trial_step)
            if not ok:
                for j in range(nv):
                    dx[j] = 0.0
            nx = 1 - cu
            integrate(m, xs[cu], dx, xs[nx])
            E_try = _energy_grad(m, fo, xs[nx], qe, qpred, ta, A, bt, Re, te, Wd, cPr, car, cnr, canr, Rs[nx],
                                 ts[nx], ws[nx], vs[nx], Rj, R2, Gs[nx], fs[nx], wr, gs[nx], s33, s3)
            band = _EPS_BAND * eps * max(abs(E), abs(E_try))
            accept = ok and ((E_try < E) or ((E_try <= E + band) and (pred <= band)))
            iters += 1
            if accept:
                mu = mu / MU_SHRINK
            else:
                mu = min(max(mu * MU_GROW, MU_AFTER_REJECT), MU_MAX)
            limit = math.inf if accept or not ok else STEP_SHRINK * STEP_SHRINK * length2
            if accept:  # (a rejected trial's gradient is never measured: it is dropped)
                gn_try = _measure(gs[nx], D)
                if gn_try >= tol:
                    hessian(m, fo, xs[nx], qe, qpred, ta, Rs[nx], ts[nx], ws[nx], vs[nx], Gs[nx], fs[nx], Wd, cPr,
                            car, cnr, canr, K, Z, F, Xk, H, D, s33, s3, s36)
                    gn_try = _measure(gs[nx], D)
                cu, E, gnorm = nx, E_try, gn_try
    conv = gnorm < tol
    for k in range(nq):
        out_q[r, k] = xs[cu, k]
    out_it[r], out_gn[r], out_conv[r] = iters, gnorm, conv
    if want != 0:
        difference(m, qc, xs[cu], dv)
        if bdf2:  # (3(q_{k+1} ⊖ q_k) − (q_k ⊖ q_{k−1}))/(2Δt), and 2Δt = 3Δt'
            difference(m, qp, qc, dx)
            for k in range(nv):
                out_qd[r, k] = (3 * dv[k] - dx[k]) / (3 * dt)
        else:
            for k in range(nv):
                out_qd[r, k] = dv[k] / dt
        Rc_, tc_, wc_, vc_ = Rs[cu], ts[cu], ws[cu], vs[cu]
        for i in range(L):
            for a in range(3):
                out_t[r, i, a] = tc_[i, a]
                for b in range(3):
                    out_R[r, i, a, b] = Rc_[i, a, b]
        for k in range(nv):
            for a in range(3):
                out_w[r, k, a] = wc_[k, a]
                out_v[r, k, a] = vc_[k, a]
        if fo.has_contact:
            contact_update(m, fo, Rc_, tc_, cPr, car, cnr, canr, r, out_cP, out_cact, out_cnorm, out_canc,
                           out_force, s3[3], s33[3], s3[4])
    return cu


@jitable
def carry_poses(sc, cu):
    """After a substep: the poses of its q_cur and of its result (the LM's evaluation slot ``cu``) become those of
    the next substep's q_prev and q_cur (``known`` of :func:`step_row`: the values forward kinematics would compute
    from those coordinates, bit for bit)."""
    Rp, tp, Rr, tr, Rc, tc = sc.Rp, sc.tp, sc.Rr, sc.tr, sc.Rs[cu], sc.ts[cu]
    for i in range(Rr.shape[0]):
        for a in range(3):
            tp[i, a] = tr[i, a]
            tr[i, a] = tc[i, a]
            for b in range(3):
                Rp[i, a, b] = Rr[i, a, b]
                Rr[i, a, b] = Rc[i, a, b]

