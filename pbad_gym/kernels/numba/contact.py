"""Penalty ground contact with Coulomb friction: sphere terms, the applied normal force, the cone's
fixed point and the contact memory's update (energies/contact.py; integrators/state.py advance)."""
from __future__ import annotations

import math

from .jit import inlined_by_llvm, jitable


@jitable
def _normal_depth(sph_r, fo, s, pz, cP):
    """(d_eff [m], k_eff [N/m]) of sphere s with centre height pz (energies/contact.py _normal_depth): the penalty's
    depth and stiffness, or with normal damping or trapezoidal springs the clamped Kelvin-Voigt form
    k_t/2·max(0, d − s0)² (energies/penalty.py; cP (n_s, 4) holds every sphere's centre at q_k and, in column 3,
    the step's shift s0: :func:`normal_shift`)."""
    k_n = fo.contact_k
    raw = sph_r[s] - (pz - fo.height)
    k_d = fo.contact_dn / fo.dt
    if fo.contact_trap != 0:
        return max(0.0, raw - cP[s, 3]), 0.25 * k_n + k_d
    if k_d > 0:
        return max(0.0, raw - cP[s, 3]), k_n + k_d
    return max(0.0, raw), k_n


@jitable
def normal_shift(m, fo, cP, Rp, tp):
    """Column 3 of cP (n_s, 4): the normal penalty's shift s0 of the step from q_k (centres cP[:, :3]) with
    q_{k−1}'s link poses (Rp, tp) (energies/penalty.py trapezoidal_shift; 0 without normal damping)."""
    k_n, h = fo.contact_k, fo.height
    k_d = fo.contact_dn / fo.dt
    for s in range(m.contact_link.shape[0]):
        d_k = max(0.0, m.contact_r[s] - (cP[s, 2] - h))
        if fo.contact_trap != 0:
            l, p0 = m.contact_link[s], m.contact_p0
            pz = tp[l, 2] + (Rp[l, 2, 0] * p0[s, 0] + Rp[l, 2, 1] * p0[s, 1] + Rp[l, 2, 2] * p0[s, 2])
            d_b = max(0.0, m.contact_r[s] - (pz - h))
            cP[s, 3] = (k_d * d_k - k_n * (0.5 * d_k + 0.25 * d_b)) / (0.25 * k_n + k_d)
        elif k_d > 0:
            cP[s, 3] = d_k * (k_d / (k_n + k_d))
        else:
            cP[s, 3] = 0.0


@inlined_by_llvm
def sphere_point_terms(sph_link, p0, sph_r, fr, fo, s, R, t, cP, cact, cnorm, canc, gP, HP, want_h, P):
    """Ground-contact point energy of sphere s (links sph_link, centres p0, radii sph_r; friction code fr,
    StepConstants fo) at poses (R, t): value, ∂/∂P into gP (3,), ∂²/∂P² into HP (3, 3) when ``want_h``;
    its centre into P (3,). Returns the value."""
    l = sph_link[s]
    for a in range(3):
        P[a] = t[l, a] + (R[l, a, 0] * p0[s, 0] + R[l, a, 1] * p0[s, 1] + R[l, a, 2] * p0[s, 2])
    d, k_n = _normal_depth(sph_r, fo, s, P[2], cP)
    val = 0.5 * k_n * d * d
    gP[0] = gP[1] = 0.0
    gP[2] = -k_n * d
    if want_h:
        for a in range(3):
            for b in range(3):
                HP[a, b] = 0.0
        HP[2, 2] = k_n if d > 0 else 0.0
    if fr == 0:  # viscous
        kk = fo.contact_d / fo.dt * (1.0 if cact[s] else 0.0)
        x0, x1 = P[0] - cP[s, 0], P[1] - cP[s, 1]
        val += 0.5 * (kk * (x0 * x0 + x1 * x1))
        gP[0] += kk * x0
        gP[1] += kk * x1
        if want_h:
            HP[0, 0] += kk
            HP[1, 1] += kk
    elif fr == 1:  # smoothed Coulomb
        eps = fo.slip_eps
        kk = fo.mu * cnorm[s] * (1.0 if cact[s] else 0.0)
        x0, x1 = P[0] - canc[s, 0], P[1] - canc[s, 1]
        sn = math.sqrt(x0 * x0 + x1 * x1)
        phi = 0.5 * sn * sn / eps if sn < eps else sn - 0.5 * eps
        val += kk * phi
        inv = 1.0 / max(sn, eps)
        gP[0] += kk * inv * x0
        gP[1] += kk * inv * x1
        if want_h:
            c = kk * inv
            xh0, xh1 = x0 * inv, x1 * inv
            sl = 1.0 if sn >= eps else 0.0
            HP[0, 0] += c * (1.0 - sl * xh0 * xh0)
            HP[0, 1] += c * (0.0 - sl * xh0 * xh1)
            HP[1, 0] += c * (0.0 - sl * xh1 * xh0)
            HP[1, 1] += c * (1.0 - sl * xh1 * xh1)
    return val


@jitable
def applied_normal(sph_link, p0, sph_r, fo, s, R, t, cP):
    """Normal force [N] the ground applies on sphere s at poses (R, t) in a step from centres cP (energies/contact.py
    applied_normal): (D1 + Dn/Δt)·max(0, d − s0), the spring force D1·d without normal damping."""
    l = sph_link[s]
    pz = t[l, 2] + (R[l, 2, 0] * p0[s, 0] + R[l, 2, 1] * p0[s, 1] + R[l, 2, 2] * p0[s, 2])
    d, k_n = _normal_depth(sph_r, fo, s, pz, cP)
    return k_n * d


@jitable
def cone_refresh(m, fo, R, t, cP, cact, cnorm, canc):
    """The fixed point's test (integrators/pbad.py solve_step_in_cone): when an active sphere's normal force at poses
    (R, t) differs from its friction cap cnorm by more than fo.cone_tol of the larger — or, with fo.onset_step, a
    sphere outside the active set cact is pushed (energies/contact.py join_pushed: it joins, its anchor in canc
    where its centre crossed into contact) — every sphere's cap becomes its applied normal force and True is
    returned (the row re-solves); else nothing changes."""
    rtol = fo.cone_tol
    n_s = m.contact_link.shape[0]
    gap = False
    for s in range(n_s):
        if cact[s]:
            n = applied_normal(m.contact_link, m.contact_p0, m.contact_r, fo, s, R, t, cP)
            if abs(n - cnorm[s]) > rtol * max(n, cnorm[s]):
                gap = True
        elif fo.onset_step != 0 and applied_normal(m.contact_link, m.contact_p0, m.contact_r, fo, s, R, t, cP) > 0:
            gap = True
            _join(m, fo, s, R, t, cP, cact, canc)
    if gap:
        for s in range(n_s):
            cnorm[s] = applied_normal(m.contact_link, m.contact_p0, m.contact_r, fo, s, R, t, cP)
    return gap


@jitable
def _join(m, fo, s, R, t, cP, cact, canc):
    """Sphere s joins the active set, anchored where its centre crossed into contact between q_k's centre cP[s]
    and its centre at poses (R, t) (energies/contact.py join_pushed)."""
    l, p0 = m.contact_link[s], m.contact_p0
    lift = fo.height + m.contact_r[s] - cP[s, 3]
    above = cP[s, 2] - lift
    alpha = 0.0
    if above > 0:
        pz = t[l, 2] + (R[l, 2, 0] * p0[s, 0] + R[l, 2, 1] * p0[s, 1] + R[l, 2, 2] * p0[s, 2])
        alpha = min(max(above / max(above + (lift - pz), 1e-300), 0.0), 1.0)
    cact[s] = True
    for a in range(3):
        pa = t[l, a] + (R[l, a, 0] * p0[s, 0] + R[l, a, 1] * p0[s, 1] + R[l, a, 2] * p0[s, 2])
        canc[s, a] = cP[s, a] + alpha * (pa - cP[s, a])


@jitable
def _sphere_idle(sph_link, p0, sph_r, h, s, R, t, cact, cP):
    """True when sphere s adds exactly zero to the energy, its gradient and its Hessian at poses (R, t): no normal
    force (its depth as :func:`sphere_point_terms` computes it does not pass the step's shift cP[s, 3], which is
    negative where trapezoidal springs push from past depths) and no lagged friction (not in the contact
    memory's active set). A non-finite pose is never idle (its NaN must propagate as before)."""
    if cact[s]:
        return False
    l = sph_link[s]
    pz = t[l, 2] + (R[l, 2, 0] * p0[s, 0] + R[l, 2, 1] * p0[s, 1] + R[l, 2, 2] * p0[s, 2])
    return sph_r[s] - (pz - h) - cP[s, 3] <= 0.0


@jitable
def contact_update(m, fo, R, t, cP, cact, cnorm, canc, r, nP, nact, nnorm, nanc, force, gP, HP, P):
    """Row r of the contact memory of the new state and of the ground force the step applied (energies/contact.py
    contact_state with ``prev`` = the step's memory (cP, cact, cnorm, canc), and sphere_forces = −∂E/∂P at the
    new poses (R, t) with that memory)."""
    k_n, h, eps = fo.contact_k, fo.height, fo.slip_eps
    coulomb = fo.friction == 1
    applied = fo.cap_applied != 0
    for s in range(m.contact_link.shape[0]):
        sphere_point_terms(m.contact_link, m.contact_p0, m.contact_r, fo.friction, fo, s, R, t, cP, cact, cnorm, canc,
                           gP, HP, False, P)
        d = max(0.0, m.contact_r[s] - (P[2] - h))
        on = d > 0
        nact[r, s] = on
        nnorm[r, s] = -gP[2] if applied else k_n * d  # −∂E/∂P_z: the normal force just applied
        for a in range(3):
            force[r, s, a] = -gP[a]
            nP[r, s, a] = P[a]
            nanc[r, s, a] = P[a]
        if coulomb and on and cact[s]:  # a sphere that stayed in contact: its anchor drags to within ε
            x0, x1 = P[0] - canc[s, 0], P[1] - canc[s, 1]
            sn = math.sqrt(x0 * x0 + x1 * x1)
            f = max(0.0, 1.0 - eps / max(sn, 1e-300))
            nanc[r, s, 0] = canc[s, 0] + x0 * f
            nanc[r, s, 1] = canc[s, 1] + x1 * f

