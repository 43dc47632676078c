"""Reverse-mode derivative of the order-2 PBAD step by the implicit-function theorem (docs/gradients.md).

The step ends at a stationary point of its energy, g(q_{k+1}; q_k, q_{k−1}, τ) = 0 (g the gradient in the
tangent frame of q_{k+1}). Perturbing the step's inputs θ moves the solution by δ = −H⁻¹ ∂g/∂θ dθ, H the exact
Hessian at the solution (no LM damping; at a stationary point it equals the Jacobian of δ ↦ g(q ⊕ δ)). A cotangent
ḡ on q_{k+1} therefore pulls back as θ̄ = −(∂g/∂θ)ᵀ λ with λ = H⁻¹ ḡ, and (∂g/∂θ)ᵀ λ = ∇_θ (λᵀ g): the gradient, with
respect to the inputs, of the energy's directional derivative along λ. Each term supplies that gradient:

- link terms (inertia, drag) through the link poses of q_k and q_{k−1}: λ moves every point of link l with the
  velocity u(p) = ω_l × x(p) + v_l, so λᵀ g_inertia = 1/Δt² ∫ρ u·(x − 2x_k + x_{k−1}) and
  λᵀ g_drag = 1/Δt ∫ρ uᵀ W_k (x − x_k), W_k = R_k C R_kᵀ (whose rotation with q_k adds a torque on each link);
- joint terms (actuation, damping, damped limits) in joint space, on quaternion joints through the chart
  d = 2·vec(q_ref⁻¹ q) (a perturbation ε of q_ref acts on it as δ = −R(r)ᵀ ε on q);
- gravity and springs depend on q alone.

Tangent conventions are the engine's: q ⊕ δ adds on linear coordinates and composes q ⊗ exp(δ) on quaternions, for
q_{k+1}, q_k and q_{k−1} alike. Penalty contact is in :mod:`.contact_adjoint`; armature on ball / free joints is
refused by name.
"""
from __future__ import annotations

from typing import NamedTuple

from ..arrays import xp_of
from ..energies.joints import _q_of_v, limit_arrays
from ..kinematics import (cross, forward_kinematics, generalized_gradient, matvec, motion_matrix,
                          pose_gradient_wrench, quat_conj, quat_mul, quat_to_rot, skew)
from .contact_adjoint import cap_coupling, contact_point_vjp, points_to_tangent, sphere_jacobians
from .pbad import step_energy_grad, step_hessian


class StepCotangents(NamedTuple):
    """Cotangents (B, nv) of one step's inputs, in the tangent frames of q_{k−1}, q_k, and on τ [per N m or N];
    anchor (B, S, 3): on the contact memory's stick anchors (None without contact)."""

    q_prev: object
    q_cur: object
    tau: object
    anchor: object = None


def check_differentiable(body, forces):
    """ValueError naming what the step's adjoint does not cover: armature on ball / free joints, and Coulomb
    friction capped by the previous step's applied force without re-solves (friction_cap "applied", cone_passes 0:
    a cap that is neither the step's own fixed point nor a function of q_k), trapezoidal penalty springs (their
    shift reads q_{k−1}, which the adjoint's cotangents do not follow) and friction_onset "step" (the anchors of
    the spheres that join within the step are read off an intermediate solve)."""
    c = forces.contact
    if "trapezoidal" in (forces.limit_springs, getattr(c, "springs", None)):
        raise ValueError("gradients through the step need limit_springs='implicit' and the contact's "
                         "springs='implicit' (the trapezoidal penalty springs are not differentiated)")
    if c is not None and c.friction == "coulomb" and c.friction_cap == "applied" and c.cone_passes == 0:
        raise ValueError("gradients through Coulomb contact need friction_cap='lagged_spring' or cone_passes > 0")
    if c is not None and c.friction_onset == "step":
        raise ValueError("gradients through the step need the contact's friction_onset='lagged' (the anchors of the "
                         "spheres that join within a step are not differentiated)")
    if body.has_armature and len(body.quat_v):
        arm = body.arrays(xp_of(body.quat_v), float).armature
        if float(abs(arm[body.quat_v]).max()) > 0:
            raise ValueError("gradients through the step do not cover armature on ball or free joints")


def step_vjp(body, data, q_prev, q_next, gbar):
    """Pull a cotangent ``gbar`` (B, nv) on the step's solution ``q_next`` (B, nq) back to its inputs.

    data: the :class:`~pbad_gym.integrators.pbad.StepData` the step was solved with (its q_k = data.q_ref),
    q_prev (B, nq) its q_{k−1}; q_next must be a converged minimiser (the gradient is exact up to the solver's
    tolerance). Returns :class:`StepCotangents` and λ = A⁻ᵀ ḡ (B, nv), A the exact Hessian H (plus, for Coulomb
    friction capped at the step's own fixed point, the cap's coupling :func:`.contact_adjoint.cap_coupling`).
    """
    check_differentiable(body, data.forces)
    xp = xp_of(q_next)
    _, _, ctx = step_energy_grad(body, q_next, data, "exact")
    H, _ = step_hessian(body, ctx)
    J = None if data.forces.contact is None else sphere_jacobians(body, ctx.kin)[1]
    coupling = None if J is None else cap_coupling(body, ctx.kin, J, data)
    A = H if coupling is None else xp.swapaxes(H + coupling, -1, -2)
    lam = xp.linalg.solve(A, gbar[..., None])[..., 0]
    d_cur, d_prev = _link_vjp(body, ctx.kin, data, forward_kinematics(body, q_prev), lam)
    j_cur, j_prev, j_tau = _joint_vjp(body, q_next, data, lam)
    anchor = None
    if J is not None:
        D_Pk, D_anchor = contact_point_vjp(body, ctx.kin, J, data, lam)
        d_cur = d_cur + points_to_tangent(body, data.kin_ref, D_Pk)
        anchor = -D_anchor
    # θ̄ = −(∂g/∂θ)ᵀ λ
    return StepCotangents(-(d_prev + j_prev), -(d_cur + j_cur), -j_tau, anchor), lam


def link_velocities(body, kin, lam):
    """Spatial velocity (ω, v) (B, L, 3) each of the links of ``kin`` has under the generalised velocity lam (B, nv)."""
    xp = xp_of(lam)
    moves = xp.asarray(body.subtree[body.dof_link].T, dtype=lam.dtype)  # (L, nv): DOF j moves link l
    V = moves @ (lam[..., None] * motion_matrix(kin))  # (B, L, 6)
    return V[..., :3], V[..., 3:]


def _moment_gradient(body, A, b, xp, dtype):
    """(∫ρ a pᵀ, ∫ρ a) per link for the affine field a(p) = A p + b (A (B, L, 3, 3), b (B, L, 3)): the pose
    gradient (∂/∂R, ∂/∂t) of ∫ρ a·x(p) with respect to the link pose x(p) = R p + t."""
    c = body.arrays(xp, dtype)
    return A @ c.S + b[..., :, None] * c.c[:, None, :], matvec(A, c.c) + c.mass[:, None] * b


def _link_vjp(body, kin, data, kin_prev, lam):
    """∇_{q_k} and ∇_{q_{k−1}} of λᵀ g over the link terms (inertia, drag) (B, nv) each."""
    xp = xp_of(lam)
    dtype, dt = lam.dtype, data.dt
    w, v = link_velocities(body, kin, lam)
    Au, bu = skew(w) @ kin.R, cross(w, kin.t) + v  # u(p) = Au p + bu
    G, f = _moment_gradient(body, Au, bu, xp, dtype)  # ∫ρ u pᵀ, ∫ρ u
    kin_cur = data.kin_ref
    Gc, fc = -2.0 / dt**2 * G, -2.0 / dt**2 * f
    torque = None
    if data.forces.drag is not None:
        W = data.W
        Gc, fc = Gc - (W @ G) / dt, fc - matvec(W, f) / dt
        torque = _drag_weight_torque(body, kin, kin_cur, W, Au, bu, xp, dtype) / dt
    wrench, _ = pose_gradient_wrench(kin_cur, Gc, fc)
    if torque is not None:
        wrench = wrench + xp.concatenate([torque, xp.zeros_like(torque)], -1)
    d_cur = generalized_gradient(body, kin_cur, wrench)
    wrench_prev, _ = pose_gradient_wrench(kin_prev, G / dt**2, f / dt**2)
    return d_cur, generalized_gradient(body, kin_prev, wrench_prev)


def _drag_weight_torque(body, kin, kin_ref, W, Au, bu, xp, dtype):
    """Per-link torque (B, L, 3) of W_k's rotation with q_k in λᵀ g_drag·Δt = ∫ρ uᵀ W_k r, r = x − x_k: rotating
    the link by ω changes W_k by [ω]×W − W[ω]×, so the term is ω·∫ρ ((W r) × u + (W u) × r)."""
    c = body.arrays(xp, dtype)
    D, e = kin.R - kin_ref.R, kin.t - kin_ref.t  # r(p) = D p + e
    # M = ∫ρ r uᵀ
    M = (D @ c.S @ xp.swapaxes(Au, -1, -2) + matvec(D, c.c)[..., :, None] * bu[..., None, :]
         + e[..., :, None] * matvec(Au, c.c)[..., None, :] + c.mass[:, None, None] * e[..., :, None] * bu[..., None, :])
    return _axial(W @ M) + _axial(W @ xp.swapaxes(M, -1, -2))


def _axial(N):
    """∫ a × b from N = ∫ a bᵀ (…, 3, 3): (ε_ijk N_jk)_i."""
    xp = xp_of(N)
    return xp.stack([N[..., 1, 2] - N[..., 2, 1], N[..., 2, 0] - N[..., 0, 2], N[..., 0, 1] - N[..., 1, 0]], -1)


def _joint_vjp(body, q, data, lam):
    """(∇_{q_k}, ∇_{q_{k−1}}, ∇_τ) of λᵀ g (B, nv) each over the joint terms: actuation −τᵀ(q ⊖ q_k), damping
    b/(2Δt)‖q ⊖ q_k‖², damped limits (their shift depends on q_k) and armature (linear coordinates)."""
    xp = xp_of(lam)
    f, dt = data.forces, data.dt
    lin = body.lin_v
    d_tau = xp.zeros_like(lam)
    d_cur, d_prev = xp.zeros_like(lam), xp.zeros_like(lam)
    d_tau[:, lin] = -lam[:, lin]  # g = −τ on linear coordinates
    b = None
    if f.has_damping:
        b = xp.asarray(f.damping, dtype=lam.dtype) / dt
        d_cur[:, lin] -= b[lin] * lam[:, lin]
    if body.has_armature:
        a = body.arrays(xp, lam.dtype).armature / dt**2
        # q_pred = 2q_k − q_{k−1} on linear coordinates: ∂g/∂q_k = −2a/Δt², ∂g/∂q_{k−1} = a/Δt²
        d_cur[:, lin] -= 2 * a[lin] * lam[:, lin]
        d_prev[:, lin] += a[lin] * lam[:, lin]
    if f.limit_stiffness > 0 and f.limit_damping > 0:
        d_cur = d_cur + _limit_vjp(body, q, data, lam)
    if len(body.quat_q):
        r = quat_mul(quat_conj(data.q_ref[:, body.quat_q]), q[:, body.quat_q])
        qc, qt = _quaternion_vjp(body, r, data.tau[:, body.quat_v], lam[:, body.quat_v],
                                 None if b is None else b[body.quat_v])
        d_cur[:, body.quat_v] += qc
        d_tau[:, body.quat_v] = qt
    return d_cur, d_prev, d_tau


def _limit_vjp(body, q, data, lam):
    """∇_{q_k} (λᵀ g_limit) (B, nv): the damped limit's shift s0 = p_k·c/(kΔt + c) moves with q_k's depth p_k."""
    xp = xp_of(lam)
    f = data.forces
    idx, lo, hi = limit_arrays(body)
    lo, hi = xp.asarray(lo, dtype=q.dtype), xp.asarray(hi, dtype=q.dtype)
    qi_idx = _q_of_v(body, idx)
    qi, qk = q[:, qi_idx], data.q_ref[:, qi_idx]
    k, c = f.limit_stiffness, f.limit_damping / data.dt
    over = xp.maximum(0.0, qi - hi) - xp.maximum(0.0, lo - qi)
    shift = (xp.maximum(0.0, qk - hi) + xp.maximum(0.0, lo - qk)) * (c / (k + c))
    dshift = ((qk > hi).astype(q.dtype) - (qk < lo).astype(q.dtype)) * (c / (k + c))
    # g = (k + c)·over' with over' = max(0, over − s) − max(0, −over − s): ∂over'/∂s = −1 on either active side
    active = ((over - shift) > 0) | ((-over - shift) > 0)
    sign = xp.where((over - shift) > 0, -1.0, 1.0)
    out = xp.zeros_like(lam)
    out[:, idx] = (k + c) * lam[:, idx] * xp.where(active, sign * dshift, 0.0)
    return out


def _quaternion_vjp(body, r, tq, lq, b):
    """Quaternion joints' (∇_{q_k}, ∇_τ) of λᵀ g (B, n, 3) each, for r = q_k⁻¹ q (B, n, 4), their torques tq and
    λ's components lq (B, n, 3), damping b/Δt (n, 3) or None.

    With Jc = w_r 1 + [vec r]× (the chart's Jacobian), actuation has g = −Jcᵀ τ, damping g = Jcᵀ(b ⊙ d), d = 2 vec r;
    their trivialised Jacobians (δ ↦ g(r ⊗ exp δ)) are T_act = ½ τ vec(r)ᵀ − ½[τ]× Jc and
    T_damp = −½ (b⊙d) vec(r)ᵀ + ½ [b⊙d]× Jc + Jcᵀ diag(b) Jc. A perturbation ε of q_k acts as δ = −R(r)ᵀ ε.
    """
    xp = xp_of(r)
    w, vr = r[..., :1, None], r[..., 1:]
    eye = xp.eye(3, dtype=r.dtype)
    Jc = w * eye + skew(vr)
    d_tau = -matvec(Jc, lq)  # ∇_τ (λᵀ(−Jcᵀτ)) = −Jc λ
    T = 0.5 * tq[..., :, None] * vr[..., None, :] - 0.5 * skew(tq) @ Jc
    if b is not None:
        bd = b * 2 * vr
        T = T - 0.5 * bd[..., :, None] * vr[..., None, :] + 0.5 * skew(bd) @ Jc \
            + xp.swapaxes(Jc, -1, -2) @ (b[..., :, None] * Jc)
    # ∂g/∂ε = −T R(r)ᵀ: ∇_ε (λᵀ g) = −R(r) Tᵀ λ
    Rr = quat_to_rot(r)
    return -matvec(Rr, matvec(xp.swapaxes(T, -1, -2), lq)), d_tau
