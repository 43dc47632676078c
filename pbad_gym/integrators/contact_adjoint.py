"""The penalty-contact part of the step's adjoint (docs/gradients.md §Contact).

Inputs of the contact energy besides q_{k+1}: the sphere centres at q_k (the normal damping's shift, viscous
friction), the stick anchors of the contact memory (Coulomb friction) and the normal force that caps Coulomb
friction. That cap is the fixed point of the step ("applied": the normal force the step itself applies,
n(q_{k+1}, q_k)) or the spring force at q_k ("lagged_spring"); with the fixed point the stationarity condition
g(q*; θ, n(q*, θ)) = 0 has the Jacobian A = H + G_N ∂n/∂q*, G_N = ∂g/∂n, not symmetric.

The active set (spheres touching at q_k), the stick / slip branch of each anchor and the sign of each clamp are
held at the values of the forward step: the gradient is that of the smooth piece the step lies on, exact away
from the switches and one-sided at them.
"""
from __future__ import annotations

from ..arrays import xp_of
from ..energies.contact import (_normal_depth, applied_normal, contact_state, penetration, point_terms_to_links,
                                sphere_centres)
from ..kinematics import generalized_gradient, point_jacobian, pose_gradient_wrench


def sphere_jacobians(body, kin):
    """Centres (B, S, 3) and Jacobians (B, S, 3, nv) of the contact spheres at ``kin``."""
    c = body.arrays(xp_of(kin.R), kin.R.dtype)
    return point_jacobian(body, kin, c.contact_link, c.contact_p0)


def points_to_tangent(body, kin, g):
    """Σ_s J_sᵀ g_s (B, nv): a gradient g (B, S, 3) on the sphere centres at ``kin`` as one on q."""
    P = sphere_centres(body, kin)
    G, f, _ = point_terms_to_links(body, P, g, None, gauss_newton=False)
    wrench, _ = pose_gradient_wrench(kin, G, f)
    return generalized_gradient(body, kin, wrench)


def _friction_direction(P, memory, params, dt):
    """x = (P − anchor)_xy (B, S, 2), its length s, the Huber scale max(s, ε) and ε."""
    xp = xp_of(P)
    eps = params.slip_velocity * dt
    x = (P - memory.anchor)[..., :2]
    s = xp.sqrt(xp.sum(x * x, -1))
    return x, s, xp.maximum(s, eps), eps


def cap_coupling(body, kin, J, data):
    """G_N Dn (B, nv, nv) for the fixed-point cap ("applied" with re-solves), or None: G_N[:, s] = ∂g/∂n_s =
    μ·active·J_s,xyᵀ x/max(s, ε), Dn[s] = ∂n_s/∂q = −k_eff·[d_eff > 0]·J_s,z."""
    params = data.forces.contact
    if params.friction != "coulomb" or not params.resolves_cone:
        return None
    xp = xp_of(J)
    P = sphere_centres(body, kin)
    x, _, m, _ = _friction_direction(P, data.contact, params, data.dt)
    w = params.mu * data.contact.active * 1.0
    GN = xp.einsum("bsjv,bsj->bvs", J[:, :, :2], w[..., None] * x / m[..., None])
    d_eff, k_eff = _normal_depth(body, P, params, data.contact.P, data.dt)
    Dn = -k_eff * (d_eff > 0)[..., None] * J[:, :, 2]
    return GN @ Dn


def contact_point_vjp(body, kin, J, data, lam):
    """∇ of λᵀ g over the contact energy with respect to the sphere centres at q_k and to the anchors: (D_Pk, D_anchor)
    (B, S, 3) each, the cap's dependence on q_k included (its dependence on q_{k+1} is in :func:`cap_coupling`)."""
    xp = xp_of(lam)
    params, mem, dt = data.forces.contact, data.contact, data.dt
    P = sphere_centres(body, kin)
    u = (J @ lam[:, None, :, None])[..., 0]  # (B, S, 3): each centre's velocity under λ
    D_Pk, D_anchor = xp.zeros_like(P), xp.zeros_like(P)
    k, kd = params.stiffness, params.normal_damping / dt
    share = kd / (k + kd) if kd > 0 else 0.0
    was_in = mem.active * 1.0  # d_k > 0
    d_eff, k_eff = _normal_depth(body, P, params, mem.P if kd > 0 else None, dt)
    pos = (d_eff > 0) * 1.0
    if kd > 0:  # λᵀ g_n = Σ −k_eff·d_eff·u_z, d_eff = d − s0(d_k): ∂d_eff/∂P_k,z = share·[d_k > 0]
        D_Pk[..., 2] -= k_eff * u[..., 2] * share * was_in * pos
    if params.friction == "viscous":
        D_Pk[..., :2] -= (params.damping / dt) * was_in[..., None] * u[..., :2]
    elif params.friction == "coulomb":
        x, s, m, eps = _friction_direction(P, mem, params, dt)
        ks = params.mu * mem.normal * was_in
        xh = x / m[..., None]
        # the friction point Hessian: ks/m (1 − [s ≥ ε] x̂x̂ᵀ); ∂(λᵀ g_f)/∂anchor = −H_f u
        uxy = u[..., :2]
        Hu = (ks / m)[..., None] * (uxy - (s >= eps)[..., None] * xh * xp.sum(xh * uxy, -1, keepdims=True))
        D_anchor[..., :2] = -Hu
        nbar = params.mu * was_in * xp.sum(uxy * xh, -1)  # ∂(λᵀ g)/∂n_s
        if params.resolves_cone:  # n = k_eff·d_eff(P*, P_k)
            D_Pk[..., 2] += nbar * k_eff * share * was_in * pos
        elif params.friction_cap == "lagged_spring":  # n = D1·d(P_k)
            D_Pk[..., 2] -= nbar * k * was_in
    return D_Pk, D_anchor


def memory_vjp(body, params, dt, kin_next, memory, anchor_bar):
    """Pull a cotangent on the next memory's anchors (B, S, 3; x, y used) back through the anchor update of
    :func:`~pbad_gym.energies.contact.update_anchors`: (cotangent on q_{k+1} (B, nv), on the anchors of
    ``memory`` (B, S, 3)). Spheres touching at both q_k and q_{k+1} keep their anchor while they stick
    (s ≤ ε) and are dragged to ε behind the centre while they slip; the others anchor at their centre."""
    xp = xp_of(anchor_bar)
    P = sphere_centres(body, kin_next)
    active = penetration(body, P, params.height) > 0
    out_P, out_a = xp.zeros_like(P), xp.zeros_like(P)
    ab = anchor_bar[..., :2]
    if params.friction != "coulomb":
        return xp.zeros(P.shape[:1] + (body.nv,), dtype=P.dtype), out_a
    x, s, m, eps = _friction_direction(P, memory, params, dt)
    keep = active & memory.active
    slip = keep & (s > eps)
    xh = x / m[..., None]
    proj = ab - xh * xp.sum(xh * ab, -1, keepdims=True)  # (1 − x̂x̂ᵀ) ā
    r = (eps / m)[..., None]
    # slip: a' = P − ε x̂: ∂a'/∂P = 1 − (ε/s)(1 − x̂x̂ᵀ), ∂a'/∂a = (ε/s)(1 − x̂x̂ᵀ); stick: a' = a; new: a' = P
    out_P[..., :2] = xp.where(slip[..., None], ab - r * proj, xp.where(keep[..., None], 0.0, ab))
    out_a[..., :2] = xp.where(slip[..., None], r * proj, xp.where(keep[..., None], ab, 0.0))
    return points_to_tangent(body, kin_next, out_P), out_a


def memory_of(body, params, dt, kin_cur, anchor, kin_next=None):
    """The contact memory a step from q_k (kinematics ``kin_cur``) reads, with stick anchors ``anchor`` (B, S, 3)
    (None: at the centres, a fresh memory) and, for the cone's fixed point, the cap the solution (``kin_next``)
    applies; for "lagged_spring" the spring force at q_k."""
    memory = contact_state(body, kin_cur, params, dt)
    if anchor is not None:
        memory = memory._replace(anchor=anchor)
    return memory if kin_next is None else with_fixed_point_cap(body, params, dt, memory, kin_next)


def with_fixed_point_cap(body, params, dt, memory, kin_next):
    """``memory`` with the cap Coulomb friction has at the cone's fixed point: the normal force the solution
    (``kin_next``) applies (unchanged for the other caps)."""
    if not params.resolves_cone:
        return memory
    return memory._replace(normal=applied_normal(body, sphere_centres(body, kin_next), params, memory.P, dt))


def sphere_force_vjp(body, params, dt, kin_next, memory, Fbar):
    """Pull a cotangent Fbar (B, S, 3) on the ground forces F = −∂E_c/∂P the step applied at q_{k+1} (kinematics
    ``kin_next``, contact ``memory`` of q_k with its final cap) back to: (q_{k+1} (B, nv), the centres at q_k
    (B, S, 3), the anchors (B, S, 3)). The cap's own dependence (the fixed point's n(P, P_k), or D1·d(P_k)) is
    included."""
    xp = xp_of(Fbar)
    P = sphere_centres(body, kin_next)
    k, kd = params.stiffness, params.normal_damping / dt
    share = kd / (k + kd) if kd > 0 else 0.0
    was_in = memory.active * 1.0
    d_eff, k_eff = _normal_depth(body, P, params, memory.P if kd > 0 else None, dt)
    pos = (d_eff > 0) * 1.0
    gP, gPk, ga = xp.zeros_like(P), xp.zeros_like(P), xp.zeros_like(P)
    gP[..., 2] = -k_eff * pos * Fbar[..., 2]  # F_z = k_eff·d_eff
    gPk[..., 2] = k_eff * share * was_in * pos * Fbar[..., 2]
    Fxy = Fbar[..., :2]
    if params.friction == "viscous":  # F = −(D2/Δt)·active·(P − P_k)_xy
        c = (params.damping / dt) * was_in[..., None]
        gP[..., :2], gPk[..., :2] = -c * Fxy, c * Fxy
    elif params.friction == "coulomb":  # F = −μ N active x/max(s, ε), x = (P − anchor)_xy
        x, s, m, eps = _friction_direction(P, memory, params, dt)
        ks = params.mu * memory.normal * was_in
        xh = x / m[..., None]
        HF = (ks / m)[..., None] * (Fxy - (s >= eps)[..., None] * xh * xp.sum(xh * Fxy, -1, keepdims=True))
        gP[..., :2], ga[..., :2] = -HF, HF
        nbar = -params.mu * was_in * xp.sum(Fxy * xh, -1)  # ∂(F̄·F)/∂n
        if params.resolves_cone:  # n = k_eff·d_eff(P, P_k)
            gP[..., 2] -= nbar * k_eff * pos
            gPk[..., 2] += nbar * k_eff * share * was_in * pos
        elif params.friction_cap == "lagged_spring":  # n = D1·d(P_k)
            gPk[..., 2] -= nbar * k * was_in
    return points_to_tangent(body, kin_next, gP), gPk, ga
