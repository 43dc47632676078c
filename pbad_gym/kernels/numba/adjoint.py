"""The step's adjoint, one row: integrators/adjoint.py step_vjp and integrators/contact_adjoint.py in the kernel's
scalar style (docs/gradients.md).

λ = A⁻ᵀ ḡ with A the exact Hessian at the solution (plus, for Coulomb friction capped at the step's own fixed
point, the cap's coupling μ·J_xyᵀ x̂ ⊗ (−k_eff J_z) per touching sphere); then every term's ∇_θ(λᵀ g): the link
terms through the link poses of q_k and q_{k−1} (the field u(p) = ω_l × x(p) + v_l that λ moves each link with),
the joint terms in joint space and penalty contact at the sphere centres of q_k and the stick anchors. The row's
cotangents are θ̄ = −∇_θ(λᵀ g).
"""
from __future__ import annotations

import math

from .algebra import quat_mul, quat_to_rot
from .chain_rule import wrench_gradient
from .contact import _normal_depth, applied_normal
from .forward import forward_kinematics
from .hessian import hessian
from .jit import inlined, jitable
from .linalg import solve_damped, solve_lu
from .lm import prepare_row
from .terms import link_terms


@jitable
def vjp_row(m, fo, gbar, sc, V, anc):
    """The step's vector-Jacobian product for the row :func:`load_row` put in the scratch ``sc`` (a
    scratch.StepScratch); gbar (nv,): the row's cotangent on q_next in its tangent frame (per rad or m). Leaves λ in
    sc.dx, the cotangents of q_cur, q_prev (tangent frames) and tau in sc.xv, sc.ev, sc.zv (nv,) and the anchors'
    in anc (S, 3); V (L, 6): the links' velocities under λ. fo must hold the exact Hessian's switch (exact = 1)
    whatever the forward used. A singular system gives NaN."""
    _adjoint_solve(m, fo, gbar, sc)
    lam, d_cur, d_prev, d_tau = sc.dx, sc.xv, sc.ev, sc.zv
    Rn, tn, Gn, fn, Gc, fc = sc.Rs[0], sc.ts[0], sc.Gs[0], sc.fs[0], sc.Gs[1], sc.fs[1]
    _link_velocities(m.link_dofs, sc.ws[0], sc.vs[0], lam, V)
    for k in range(lam.shape[0]):
        d_cur[k] = d_prev[k] = d_tau[k] = 0.0
    # (Gn, fn) are free once the Hessian is formed: they take the moments at q_{k−1}
    _link_moments(m.mass, m.c, m.S, fo.dt, fo.has_drag, Rn, tn, sc.Rr, sc.tr, sc.Wd, V, Gn, fn, Gc, fc, sc.s33)
    if fo.has_contact:
        _contact_vjp(m, fo, Rn, tn, V, sc.cPr, sc.car, sc.cnr, sc.canr, Gc, fc, anc)
    wrench_gradient(m, sc.Rr, sc.tr, sc.ws[1], sc.vs[1], Gc, fc, sc.wr, d_cur)
    wrench_gradient(m, sc.Rp, sc.tp, sc.wtmp, sc.vtmp, Gn, fn, sc.wr, d_prev)
    _joint_vjp(m, fo, sc.xs[0], sc.qc, sc.ta, lam, d_cur, d_prev, d_tau, sc.s33)
    for k in range(lam.shape[0]):  # θ̄ = −∇_θ(λᵀ g)
        d_prev[k], d_cur[k], d_tau[k] = -d_prev[k], -d_cur[k], -d_tau[k]


@inlined
def _cone_fixed_point(fo):
    """True when Coulomb friction is capped at the step's own fixed point (the applied normal force, re-solved)."""
    return fo.friction == 1 and fo.cap_applied != 0 and fo.cone_passes > 0


@inlined
def load_row(m, fo, q_prev, q_cur, tau, q_next, cP, cact, cnorm, canc, r, sc):
    """Row r of a step from (q_prev, q_cur) (B, nq) under tau (B, nv), with the contact memory of q_cur (cP (B, S, 3)
    [m], cact (B, S), cnorm (B, S) [N], canc (B, S, 3) [m]), solved to q_next (B, nq), into the scratch: the inputs
    (sc.qp, sc.qc, sc.xs[0] = q_next, sc.ta, the memory's row copies), the poses of q_prev (sc.Rp, sc.tp, axes
    sc.wtmp, sc.vtmp), q_cur (sc.Rr, sc.tr, sc.ws[1], sc.vs[1]) and q_next (slot 0 of sc.Rs, sc.ts, sc.ws, sc.vs),
    the step data (lm.prepare_row) and, at the cone's fixed point, the cap q_next applies (the normal force it
    applies)."""
    qp, qc, qn, cPr, canr = sc.qp, sc.qc, sc.xs[0], sc.cPr, sc.canr
    for k in range(q_cur.shape[1]):
        qp[k], qc[k], qn[k] = q_prev[r, k], q_cur[r, k], q_next[r, k]
    for k in range(tau.shape[1]):
        sc.ta[k] = tau[r, k]
    for s in range(cP.shape[1]):
        sc.car[s], sc.cnr[s] = cact[r, s], cnorm[r, s]
        for a in range(3):
            cPr[s, a], canr[s, a] = cP[r, s, a], canc[r, s, a]
    forward_kinematics(m, qp, sc.Rp, sc.tp, sc.wtmp, sc.vtmp, sc.Rj, sc.R2)
    forward_kinematics(m, qc, sc.Rr, sc.tr, sc.ws[1], sc.vs[1], sc.Rj, sc.R2)
    prepare_row(m, fo, qp, qc, sc.Rp, sc.tp, sc.Rr, sc.tr, sc.A, sc.bt, sc.Wd, sc.dv, sc.qpred, cPr)
    forward_kinematics(m, qn, sc.Rs[0], sc.ts[0], sc.ws[0], sc.vs[0], sc.Rj, sc.R2)
    if _cone_fixed_point(fo):
        for s in range(cP.shape[1]):
            sc.cnr[s] = applied_normal(m.contact_link, m.contact_p0, m.contact_r, fo, s, sc.Rs[0], sc.ts[0], cPr)


@inlined
def _adjoint_solve(m, fo, gbar, sc):
    """λ = A⁻ᵀ gbar into sc.dx (NaN when A is singular): A the exact Hessian at q_next (slot 0 of sc, loaded by
    :func:`load_row`), plus the cap's coupling at the cone's fixed point (then LU; else A is symmetric: Cholesky,
    LU where it is indefinite)."""
    Rn, tn, Gn, fn = sc.Rs[0], sc.ts[0], sc.Gs[0], sc.fs[0]
    neg = sc.gs[1]
    for k in range(gbar.shape[0]):
        neg[k] = -gbar[k]
    # the link terms' pose gradients at q_{k+1}: the exact Hessian's second-order part reads them (the step's
    # gradient itself is not needed)
    link_terms(m, fo, Rn, tn, sc.A, sc.bt, sc.Rr, sc.tr, sc.Wd, sc.cPr, sc.car, sc.cnr, sc.canr, Gn, fn, sc.s33,
               sc.s3)
    hessian(m, fo, sc.xs[0], sc.qc, sc.qpred, sc.ta, Rn, tn, sc.ws[0], sc.vs[0], Gn, fn, sc.Wd, sc.cPr, sc.car,
            sc.cnr, sc.canr, sc.K, sc.Z, sc.F, sc.Xk, sc.H, sc.D, sc.s33, sc.s3, sc.s36)
    if _cone_fixed_point(fo):  # (sc.xv, sc.ev: scratch here, the cotangents' accumulators after)
        _coupled_transpose(m, fo, Rn, tn, sc.ws[0], sc.vs[0], sc.cPr, sc.car, sc.canr, sc.H, sc.Hd, sc.xv, sc.ev)
        ok = solve_lu(sc.Hd, sc.D, 0.0, neg, sc.Af, sc.dx, sc.piv)
    else:
        ok = solve_damped(sc.H, sc.D, 0.0, neg, sc.Af, sc.dx, sc.piv)
    if not ok:
        for k in range(gbar.shape[0]):
            sc.dx[k] = math.nan


@jitable
def _sphere_centre(sph_link, p0, s, R, t):
    """(x, y, z) [m] of sphere s's centre at link poses R (L, 3, 3), t (L, 3)."""
    l = sph_link[s]
    return (t[l, 0] + R[l, 0, 0] * p0[s, 0] + R[l, 0, 1] * p0[s, 1] + R[l, 0, 2] * p0[s, 2],
            t[l, 1] + R[l, 1, 0] * p0[s, 0] + R[l, 1, 1] * p0[s, 1] + R[l, 1, 2] * p0[s, 2],
            t[l, 2] + R[l, 2, 0] * p0[s, 0] + R[l, 2, 1] * p0[s, 1] + R[l, 2, 2] * p0[s, 2])


@jitable
def _coupled_transpose(m, fo, R, t, w, v, cP, cact, canc, H, At, gvec, dvec):
    """At (nv, nv) = (H + G_N Dn)ᵀ (contact_adjoint.cap_coupling), H (nv, nv) the exact Hessian: per sphere
    touching at q_k with positive depth, the rank-one coupling μ·J_xyᵀ x/max(s, ε) ⊗ (−k_eff J_z) at poses (R, t)
    with motion axes (w, v) (nv, 3); gvec, dvec (nv,) scratch."""
    nv = H.shape[0]
    for i in range(nv):
        for j in range(nv):
            At[i, j] = H[j, i]
    eps = fo.slip_eps
    for s in range(m.contact_link.shape[0]):
        if not cact[s]:
            continue
        P0, P1, P2 = _sphere_centre(m.contact_link, m.contact_p0, s, R, t)
        d_eff, k_eff = _normal_depth(m.contact_r, fo, s, P2, cP)
        if not d_eff > 0:
            continue
        x0, x1 = P0 - canc[s, 0], P1 - canc[s, 1]
        c = fo.mu / max(math.sqrt(x0 * x0 + x1 * x1), eps)
        l = m.contact_link[s]
        for j in range(nv):
            if m.link_dofs[l, j] == 0:
                gvec[j] = dvec[j] = 0.0
                continue
            # J_j = w_j × P + v_j
            jx = w[j, 1] * P2 - w[j, 2] * P1 + v[j, 0]
            jy = w[j, 2] * P0 - w[j, 0] * P2 + v[j, 1]
            jz = w[j, 0] * P1 - w[j, 1] * P0 + v[j, 2]
            gvec[j] = c * (jx * x0 + jy * x1)
            dvec[j] = -k_eff * jz
        for j in range(nv):  # Aᵀ[j, i] += dvec_j gvec_i
            if dvec[j] != 0.0:
                for i in range(nv):
                    At[j, i] += dvec[j] * gvec[i]


@jitable
def _link_velocities(link_dofs, w, v, lam, V):
    """V (L, 6): each link's spatial velocity (ω [rad/s], v [m/s] at the world origin, per unit of λ) under the
    generalised velocity lam (nv,), from the motion axes w, v (nv, 3)."""
    for l in range(link_dofs.shape[0]):
        for a in range(6):
            V[l, a] = 0.0
        for j in range(lam.shape[0]):
            if link_dofs[l, j] != 0:
                for a in range(3):
                    V[l, a] += lam[j] * w[j, a]
                    V[l, 3 + a] += lam[j] * v[j, a]


@jitable
def _link_moments(mass, c, S, dt, has_drag, Rn, tn, Rr, tr, Wd, V, Gp, fp, Gc, fc, s33):
    """The link terms' pose gradients of λᵀ g: at q_{k−1} into (Gp, fp) = (∫ρ u pᵀ, ∫ρ u)/Δt², at q_k into
    (Gc, fc) = −2/Δt² of those, minus W_k's /Δt with drag, whose rotation with q_k adds a torque τ, carried as
    ½[τ]× R_k in Gc (its wrench is then τ); u(p) = Au p + bu, Au = [ω]× R, bu = ω × t + v at q_{k+1} (Rn, tn)."""
    Au, G, M, WM = s33[0], s33[1], s33[2], s33[3]
    for i in range(mass.shape[0]):
        mi = mass[i]
        w0, w1, w2 = V[i, 0], V[i, 1], V[i, 2]
        for b in range(3):  # [ω]× R[:, b]
            Au[0, b] = w1 * Rn[i, 2, b] - w2 * Rn[i, 1, b]
            Au[1, b] = w2 * Rn[i, 0, b] - w0 * Rn[i, 2, b]
            Au[2, b] = w0 * Rn[i, 1, b] - w1 * Rn[i, 0, b]
        bu0 = w1 * tn[i, 2] - w2 * tn[i, 1] + V[i, 3]
        bu1 = w2 * tn[i, 0] - w0 * tn[i, 2] + V[i, 4]
        bu2 = w0 * tn[i, 1] - w1 * tn[i, 0] + V[i, 5]
        bu = (bu0, bu1, bu2)
        auc = (Au[0, 0] * c[i, 0] + Au[0, 1] * c[i, 1] + Au[0, 2] * c[i, 2],
               Au[1, 0] * c[i, 0] + Au[1, 1] * c[i, 1] + Au[1, 2] * c[i, 2],
               Au[2, 0] * c[i, 0] + Au[2, 1] * c[i, 1] + Au[2, 2] * c[i, 2])
        f = (auc[0] + mi * bu0, auc[1] + mi * bu1, auc[2] + mi * bu2)
        for a in range(3):
            for b in range(3):
                G[a, b] = Au[a, 0] * S[i, 0, b] + Au[a, 1] * S[i, 1, b] + Au[a, 2] * S[i, 2, b] + bu[a] * c[i, b]
        for a in range(3):
            fp[i, a] = f[a] / (dt * dt)
            fc[i, a] = -2.0 / (dt * dt) * f[a]
            for b in range(3):
                Gp[i, a, b] = G[a, b] / (dt * dt)
                Gc[i, a, b] = -2.0 / (dt * dt) * G[a, b]
        if has_drag:
            for a in range(3):
                fc[i, a] -= (Wd[i, a, 0] * f[0] + Wd[i, a, 1] * f[1] + Wd[i, a, 2] * f[2]) / dt
                for b in range(3):
                    Gc[i, a, b] -= (Wd[i, a, 0] * G[0, b] + Wd[i, a, 1] * G[1, b] + Wd[i, a, 2] * G[2, b]) / dt
            t0, t1, t2 = _drag_weight_torque(c, S, mi, i, Rn, tn, Rr, tr, Wd, Au, bu, auc, M, WM, dt)
            for b in range(3):  # ½[τ]× R_k: the pose gradient whose wrench is the pure torque τ
                Gc[i, 0, b] += 0.5 * (t1 * Rr[i, 2, b] - t2 * Rr[i, 1, b])
                Gc[i, 1, b] += 0.5 * (t2 * Rr[i, 0, b] - t0 * Rr[i, 2, b])
                Gc[i, 2, b] += 0.5 * (t0 * Rr[i, 1, b] - t1 * Rr[i, 0, b])


@jitable
def _drag_weight_torque(c, S, mi, i, Rn, tn, Rr, tr, Wd, Au, bu, auc, M, WM, dt):
    """The torque (3 floats) [N m per unit λ] on link i of W_k's rotation with q_k in λᵀ g_drag
    (adjoint._drag_weight_torque): rotating the link by ω changes W_k by [ω]×W − W[ω]×, which turns both factors of
    ∫ρ uᵀ W r into torques: (axial(W M) + axial(W Mᵀ))/Δt, M = ∫ρ r uᵀ (3, 3 scratch, as WM)."""
    _drag_torque_moments(c, S, mi, i, Rn, tn, Rr, tr, Au, bu, auc, M)
    for a in range(3):
        for b in range(3):
            WM[a, b] = Wd[i, a, 0] * M[0, b] + Wd[i, a, 1] * M[1, b] + Wd[i, a, 2] * M[2, b]
    t0, t1, t2 = WM[1, 2] - WM[2, 1], WM[2, 0] - WM[0, 2], WM[0, 1] - WM[1, 0]
    for a in range(3):
        for b in range(3):
            WM[a, b] = Wd[i, a, 0] * M[b, 0] + Wd[i, a, 1] * M[b, 1] + Wd[i, a, 2] * M[b, 2]
    return ((t0 + (WM[1, 2] - WM[2, 1])) / dt, (t1 + (WM[2, 0] - WM[0, 2])) / dt,
            (t2 + (WM[0, 1] - WM[1, 0])) / dt)


@jitable
def _drag_torque_moments(c, S, mi, i, Rn, tn, Rr, tr, Au, bu, auc, M):
    """M (3, 3) = ∫ρ r uᵀ over link i, r(p) = D p + e with D = R_{k+1} − R_k, e = t_{k+1} − t_k
    (adjoint._drag_weight_torque): D S Auᵀ + (D c) buᵀ + e (Au c)ᵀ + m e buᵀ."""
    for a in range(3):
        d0, d1, d2 = Rn[i, a, 0] - Rr[i, a, 0], Rn[i, a, 1] - Rr[i, a, 1], Rn[i, a, 2] - Rr[i, a, 2]
        e = tn[i, a] - tr[i, a]
        ds0 = d0 * S[i, 0, 0] + d1 * S[i, 1, 0] + d2 * S[i, 2, 0]
        ds1 = d0 * S[i, 0, 1] + d1 * S[i, 1, 1] + d2 * S[i, 2, 1]
        ds2 = d0 * S[i, 0, 2] + d1 * S[i, 1, 2] + d2 * S[i, 2, 2]
        dc = d0 * c[i, 0] + d1 * c[i, 1] + d2 * c[i, 2]
        for b in range(3):
            M[a, b] = (ds0 * Au[b, 0] + ds1 * Au[b, 1] + ds2 * Au[b, 2] + dc * bu[b] + e * auc[b]
                       + mi * e * bu[b])


@jitable
def _contact_vjp(m, fo, Rn, tn, V, cP, cact, cnorm, canc, Gc, fc, anc):
    """Penalty contact's part (contact_adjoint.contact_point_vjp), from the link velocities V (L, 6) under λ at
    poses (Rn, tn) of q_{k+1}: its gradient at the centres of q_k added to the pose gradients Gc (L, 3, 3), fc (L, 3)
    of q_k, and the anchors' cotangent −∂(λᵀ g)/∂anchor into anc (S, 3) (every row written)."""
    k, kd = fo.contact_k, fo.contact_dn / fo.dt
    share = kd / (k + kd) if kd > 0 else 0.0
    eps = fo.slip_eps
    fixed_point = _cone_fixed_point(fo)
    for s in range(m.contact_link.shape[0]):
        anc[s, 0] = anc[s, 1] = anc[s, 2] = 0.0
        if not cact[s]:  # every term below is scaled by [d_k > 0]
            continue
        l = m.contact_link[s]
        P0, P1, P2 = _sphere_centre(m.contact_link, m.contact_p0, s, Rn, tn)
        u0 = V[l, 1] * P2 - V[l, 2] * P1 + V[l, 3]
        u1 = V[l, 2] * P0 - V[l, 0] * P2 + V[l, 4]
        u2 = V[l, 0] * P1 - V[l, 1] * P0 + V[l, 5]
        d_eff, k_eff = _normal_depth(m.contact_r, fo, s, P2, cP)
        pos = d_eff > 0
        g0 = g1 = g2 = 0.0
        if kd > 0 and pos:
            g2 -= k_eff * u2 * share
        if fo.friction == 0:
            g0 -= fo.contact_d / fo.dt * u0
            g1 -= fo.contact_d / fo.dt * u1
        elif fo.friction == 1:
            x0, x1 = P0 - canc[s, 0], P1 - canc[s, 1]
            sn = math.sqrt(x0 * x0 + x1 * x1)
            mm = max(sn, eps)
            xh0, xh1 = x0 / mm, x1 / mm
            dot = xh0 * u0 + xh1 * u1
            sl = 1.0 if sn >= eps else 0.0
            ks = fo.mu * cnorm[s] / mm
            anc[s, 0] = ks * (u0 - sl * xh0 * dot)  # −∂(λᵀ g)/∂anchor = H_f u
            anc[s, 1] = ks * (u1 - sl * xh1 * dot)
            nbar = fo.mu * dot  # ∂(λᵀ g)/∂n
            if fixed_point:
                if pos:
                    g2 += nbar * k_eff * share
            else:  # the lagged spring cap D1·d(P_k)
                g2 -= nbar * k
        p0 = m.contact_p0
        fc[l, 0] += g0
        fc[l, 1] += g1
        fc[l, 2] += g2
        for b in range(3):
            Gc[l, 0, b] += g0 * p0[s, b]
            Gc[l, 1, b] += g1 * p0[s, b]
            Gc[l, 2, b] += g2 * p0[s, b]


@inlined
def _joint_vjp(m, fo, qn, qc, ta, lam, d_cur, d_prev, d_tau, s33):
    """The joint terms' ∇ of λᵀ g added to d_cur, d_prev, d_tau (nv,) (adjoint._joint_vjp) at q_{k+1} = qn, q_k = qc
    (nq,) under ta (nv,): actuation, damping, armature (linear coordinates), damped limits and quaternion joints."""
    for i in range(m.lin_v.shape[0]):
        j = m.lin_v[i]
        d_tau[j] -= lam[j]
        if fo.has_damping:
            d_cur[j] -= fo.chart[0, j] * lam[j]
        if fo.has_armature:
            d_cur[j] -= 2 * fo.chart[1, j] * lam[j]
            d_prev[j] += fo.chart[1, j] * lam[j]
    if fo.has_limits and fo.limit_d > 0:
        k, c = fo.limit_k, fo.limit_d / fo.dt
        for j in range(m.lim_on.shape[0]):
            if not m.lim_on[j]:
                continue
            lo, hi = m.lim_lo[j], m.lim_hi[j]
            qi, qk = qn[m.lim_q[j]], qc[m.lim_q[j]]
            over = max(0.0, qi - hi) - max(0.0, lo - qi)
            shift = (max(0.0, qk - hi) + max(0.0, lo - qk)) * (c / (k + c))
            dshift = ((1.0 if qk > hi else 0.0) - (1.0 if qk < lo else 0.0)) * (c / (k + c))
            if over - shift > 0:
                d_cur[j] -= (k + c) * lam[j] * dshift
            elif -over - shift > 0:
                d_cur[j] += (k + c) * lam[j] * dshift
    for i in range(m.quat_q.shape[0]):
        _quaternion_vjp(m.quat_q[i], m.quat_v[i], fo.has_damping, fo.chart, qn, qc, ta, lam, d_cur, d_tau, s33)


@jitable
def _quaternion_vjp(a, v0, has_damping, chart, qn, qc, ta, lam, d_cur, d_tau, s33):
    """One quaternion joint (coordinates a … a+3, DOFs v0 … v0+2) of :func:`_joint_vjp` (adjoint._quaternion_vjp):
    with r = q_k⁻¹ q and Jc = w_r 1 + [vec r]×, ∇_τ = −Jc λ and ∇_{q_k} = −R(r) Tᵀ λ, T the trivialised
    Jacobian of the actuation (and damping) gradient."""
    rw, rx, ry, rz = quat_mul(qc[a], -qc[a + 1], -qc[a + 2], -qc[a + 3], qn[a], qn[a + 1], qn[a + 2], qn[a + 3])
    vr = (rx, ry, rz)
    Jc, T, X = s33[0], s33[1], s33[2]
    _skew_into(rx, ry, rz, Jc)
    for x in range(3):
        Jc[x, x] = rw
    l0, l1, l2 = lam[v0], lam[v0 + 1], lam[v0 + 2]
    for x in range(3):
        d_tau[v0 + x] -= Jc[x, 0] * l0 + Jc[x, 1] * l1 + Jc[x, 2] * l2
    t0, t1, t2 = ta[v0], ta[v0 + 1], ta[v0 + 2]
    tq = (t0, t1, t2)
    _skew_into(t0, t1, t2, X)
    for x in range(3):
        for y in range(3):
            T[x, y] = 0.5 * tq[x] * vr[y] - 0.5 * (X[x, 0] * Jc[0, y] + X[x, 1] * Jc[1, y] + X[x, 2] * Jc[2, y])
    if has_damping:
        b = (chart[0, v0], chart[0, v0 + 1], chart[0, v0 + 2])
        bd = (b[0] * 2 * rx, b[1] * 2 * ry, b[2] * 2 * rz)
        _skew_into(bd[0], bd[1], bd[2], X)
        for x in range(3):
            for y in range(3):
                T[x, y] += (-0.5 * bd[x] * vr[y] + 0.5 * (X[x, 0] * Jc[0, y] + X[x, 1] * Jc[1, y] + X[x, 2] * Jc[2, y])
                            + (Jc[0, x] * b[0] * Jc[0, y] + Jc[1, x] * b[1] * Jc[1, y] + Jc[2, x] * b[2] * Jc[2, y]))
    # y = Tᵀ λ, then −R(r) y
    y0 = T[0, 0] * l0 + T[1, 0] * l1 + T[2, 0] * l2
    y1 = T[0, 1] * l0 + T[1, 1] * l1 + T[2, 1] * l2
    y2 = T[0, 2] * l0 + T[1, 2] * l1 + T[2, 2] * l2
    quat_to_rot(rw, rx, ry, rz, s33, 3)
    Rq = s33[3]
    for x in range(3):
        d_cur[v0 + x] -= Rq[x, 0] * y0 + Rq[x, 1] * y1 + Rq[x, 2] * y2


@jitable
def _skew_into(a0, a1, a2, X):
    """X (3, 3) = [a]×."""
    X[0, 0], X[0, 1], X[0, 2] = 0.0, -a2, a1
    X[1, 0], X[1, 1], X[1, 2] = a2, 0.0, -a0
    X[2, 0], X[2, 1], X[2, 2] = -a1, a0, 0.0
