"""Rigid-body dynamics on the same model: mass matrix (composite rigid body algorithm), inverse dynamics
(recursive Newton-Euler), mechanical energy and the centre of mass. World-frame spatial algebra, ordering (ω, v at
the origin)."""
from __future__ import annotations

from .arrays import xp_of
from .kinematics import (cross, forward_kinematics, generalized_gradient, generalized_hessian, matvec,
                         motion_matrix, pose_gradient_wrench, world_moments)

GRAVITY = (0.0, 0.0, -9.81)


def _kin(body, q, kin):
    return forward_kinematics(body, q) if kin is None else kin


def crba(body, q, kin=None):
    """Joint-space mass matrix M(q) (B, nv, nv) by the composite rigid body algorithm: subtree sums of world
    spatial inertias projected on the DOF axes, plus the joints' armature on the diagonal. Units: kg, kg m,
    kg m² by DOF type."""
    kin = _kin(body, q, kin)
    M = generalized_hessian(body, kin, K=world_moments(body, kin))
    if body.has_armature:
        xp = xp_of(M)
        M = M + xp.diag(body.arrays(xp, M.dtype).armature)
    return M


def _world_first_moments(body, kin):
    """First mass moments m·t + R·c of the links (B, L, 3) [kg m], world frame."""
    xp = xp_of(kin.t)
    c = body.arrays(xp, kin.t.dtype)
    return matvec(kin.R, c.c) + c.mass[:, None] * kin.t


def centre_of_mass(body, q=None, kin=None):
    """Centre of mass (B, 3) [m, world frame] of the body at configurations q (B, nq), or at the forward
    kinematics ``kin`` of them when already computed (then q is not needed)."""
    if kin is None:
        if q is None:
            raise ValueError("centre_of_mass needs q (B, nq) or kin (forward kinematics)")
        kin = forward_kinematics(body, q)
    xp = xp_of(kin.t)
    return xp.sum(_world_first_moments(body, kin), 1) / body.total_mass


def centre_of_mass_vjp(body, kin, gbar):
    """Pull a cotangent gbar (B, 3) on the centre of mass back to the tangent space of q (B, nv): each link's
    share m_l/M moves with its pose, so ∂/∂R_l = gbar c_lᵀ/M and ∂/∂t_l = m_l gbar/M (c_l its first moment)."""
    xp = xp_of(gbar)
    c = body.arrays(xp, gbar.dtype)
    G = gbar[:, None, :, None] * c.c[None, :, None, :] / body.total_mass
    f = c.mass[None, :, None] * gbar[:, None, :] / body.total_mass
    wrench, _ = pose_gradient_wrench(kin, G, f)
    return generalized_gradient(body, kin, wrench)


def motion_cross(a, b):
    """Spatial motion cross product a × b for (…, 6) vectors (ω, v)."""
    xp = xp_of(a, b)
    wa, va, wb, vb = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return xp.concatenate([cross(wa, wb), cross(wa, vb) + cross(va, wb)], -1)


def force_cross(a, f):
    """Spatial force cross product a ×* f for motion a (ω, v) and force f (n, f)."""
    xp = xp_of(a, f)
    wa, va, n, fl = a[..., :3], a[..., 3:], f[..., :3], f[..., 3:]
    return xp.concatenate([cross(wa, n) + cross(va, fl), cross(wa, fl)], -1)


def link_velocities(body, kin, qd):
    """Spatial velocities of the links (B, L, 6) and each DOF's contribution s_j q̇_j (B, nv, 6)."""
    xp = xp_of(qd)
    c = body.arrays(xp, qd.dtype)
    Sq = motion_matrix(kin) * qd[..., None]
    return c.link_dofs @ Sq, Sq  # each link moves with the DOFs of its ancestors and itself


def rnea(body, q, qd, qdd, gravity=GRAVITY, kin=None):
    """Inverse dynamics τ = M(q) q̈ + h(q, q̇) (B, nv) by recursive Newton-Euler, gravity (3,) [m/s²].

    Each DOF axis is carried by the frame that moves it (the parent link for hinges, the child for ball and
    free-rotation DOFs), so ṡ_j = V_carrier × s_j; gravity enters as a base acceleration −g. Armature adds
    its own term armature·q̈ per DOF (a rotor spinning with its joint: no bias force).
    """
    xp = xp_of(q, qd, qdd)
    kin = _kin(body, q, kin)
    c = body.arrays(xp, q.dtype)
    V, Sq = link_velocities(body, kin, qd)
    S = motion_matrix(kin)
    par = body.parent[body.dof_link]
    V_par = xp.where((par >= 0)[None, :, None], V[:, xp.maximum(xp.asarray(par), 0)], 0.0)
    V_carrier = V_par + xp.swapaxes(c.vel_carrier, 0, 1) @ Sq
    acc_dof = S * qdd[..., None] + motion_cross(V_carrier, S) * qd[..., None]
    a0 = xp.concatenate([xp.zeros(3, dtype=q.dtype), -xp.asarray(gravity, dtype=q.dtype)])
    A = c.link_dofs @ acc_dof + a0
    I = world_moments(body, kin)
    f = I.apply(A) + force_cross(V, I.apply(V))
    tau = generalized_gradient(body, kin, f)
    return tau + c.armature * qdd if body.has_armature else tau


def forward_dynamics(body, q, qd, tau, gravity=GRAVITY):
    """q̈ = M⁻¹(τ − h(q, q̇)) (B, nv)."""
    xp = xp_of(q, qd, tau)
    kin = forward_kinematics(body, q)
    M = crba(body, q, kin)
    h = rnea(body, q, qd, xp.zeros_like(qd), gravity, kin)
    return xp.linalg.solve(M, (tau - h)[..., None])[..., 0]


def energy(body, q, qd, gravity=GRAVITY):
    """Kinetic ½ q̇ᵀM q̇ (armature included) and potential −gᵀΣ(m t + R c) energies [J], each (B,)."""
    xp = xp_of(q, qd)
    kin = forward_kinematics(body, q)
    M = crba(body, q, kin)
    ke = 0.5 * xp.sum(qd * (M @ qd[..., None])[..., 0], -1)
    cw = _world_first_moments(body, kin)
    pe = -xp.sum(cw @ xp.asarray(gravity, dtype=q.dtype), -1)
    return ke, pe
