"""Batched forward kinematics, joint motion axes, point Jacobians and the chain rule from link poses to
generalised coordinates (DESIGN.md §3).

Shapes: B trajectories, L links, nv DOFs. Link poses R (B, L, 3, 3), t (B, L, 3) in the world frame. Each DOF j
has a world motion axis s_j = (ω_j, v_j): moving δ_j rotates every descendant link about ω_j and translates it,
dR = [ω_j]× R dδ_j, dt = (ω_j × t + v_j) dδ_j. All functions take the array module from their inputs.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .backend import xp_of


# --- small batched vector algebra (hand-written: np.cross / einsum are slow on tiny trailing axes) ----------
_P1, _P2 = np.array([1, 2, 0]), np.array([2, 0, 1])


def cross(a, b):
    """Cross product over the last axis (…, 3) (cyclic-permutation form: fewest array calls)."""
    xp = xp_of(a, b)
    p1, p2 = (_P1, _P2) if xp is np else (xp.asarray(_P1), xp.asarray(_P2))
    return xp.take(a, p1, -1) * xp.take(b, p2, -1) - xp.take(a, p2, -1) * xp.take(b, p1, -1)


def skew(w):
    """[w]× (…, 3, 3) from w (…, 3)."""
    xp = xp_of(w)
    z = xp.zeros_like(w[..., 0])
    w0, w1, w2 = w[..., 0], w[..., 1], w[..., 2]
    return xp.stack([xp.stack([z, -w2, w1], -1), xp.stack([w2, z, -w0], -1), xp.stack([-w1, w0, z], -1)], -2)


def matvec(m, v):
    """m @ v over the last axes: (…, n, n) x (…, n) -> (…, n)."""
    if m.size < 4096:  # one BLAS-backed call wins for small batches, column sums for large ones
        return (m @ v[..., None])[..., 0]
    out = m[..., 0] * v[..., 0:1]
    for k in range(1, m.shape[-1]):
        out = out + m[..., k] * v[..., k:k + 1]
    return out


def axis_angle(axis, angle):
    """Rotation matrices exp(angle [axis]×): axis (…, 3) unit, angle (…,) -> (…, 3, 3) (Rodrigues)."""
    xp = xp_of(axis, angle)
    c, s = xp.cos(angle)[..., None, None], xp.sin(angle)[..., None, None]
    outer = axis[..., :, None] * axis[..., None, :]
    eye = xp.eye(3, dtype=angle.dtype)
    return c * eye + s * skew(axis) + (1 - c) * outer


def quat_to_rot(q):
    """Rotation matrices from quaternions (w, x, y, z) (…, 4) -> (…, 3, 3); q need not be normalised."""
    xp = xp_of(q)
    q = q / xp.sqrt(xp.sum(q * q, axis=-1, keepdims=True))
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return xp.stack([
        xp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        xp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        xp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


def quat_mul(a, b):
    """Hamilton product a ⊗ b of (…, 4) quaternions (w, x, y, z)."""
    xp = xp_of(a, b)
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    return xp.concatenate([aw * bw - xp.sum(av * bv, -1, keepdims=True), aw * bv + bw * av + cross(av, bv)], -1)


def quat_conj(q):
    """Conjugate (inverse for unit quaternions)."""
    xp = xp_of(q)
    return xp.concatenate([q[..., :1], -q[..., 1:]], -1)


def quat_exp(phi):
    """Unit quaternion of the rotation vector phi (…, 3) [rad]."""
    xp = xp_of(phi)
    th = xp.sqrt(xp.sum(phi * phi, -1, keepdims=True))
    small = th < 1e-8
    half = 0.5 * th
    # sin(θ/2)/θ with its series near 0
    k = xp.where(small, 0.5 - th * th / 48.0, xp.sin(half) / xp.where(small, 1.0, th))
    return xp.concatenate([xp.cos(half), k * phi], -1)


def quat_log(q):
    """Rotation vector (…, 3) of a unit quaternion (…, 4), on the shortest arc (angle in [0, π])."""
    xp = xp_of(q)
    q = xp.where(q[..., :1] < 0, -q, q)
    vn = xp.sqrt(xp.sum(q[..., 1:] ** 2, -1, keepdims=True))
    ang = 2.0 * xp.arctan2(vn, q[..., :1])
    small = vn < 1e-8
    k = xp.where(small, 2.0 / xp.maximum(q[..., :1], 1e-300), ang / xp.where(small, 1.0, vn))
    return k * q[..., 1:]


# --- configuration space -------------------------------------------------------------------------------------
def integrate(body, q, dq):
    """q ⊕ dq: q (B, nq), dq (B, nv) -> (B, nq). Linear coordinates add; quaternions compose on the right
    (q ⊗ exp(dq)), i.e. rotation increments are in the joint's child (body) frame."""
    xp = xp_of(q, dq)
    out = q.copy()
    out[:, body.lin_q] = q[:, body.lin_q] + dq[:, body.lin_v]
    if len(body.quat_q):
        qq = quat_mul(q[:, body.quat_q], quat_exp(dq[:, body.quat_v]))
        out[:, body.quat_q] = qq / xp.sqrt(xp.sum(qq * qq, -1, keepdims=True))
    return out


def difference(body, q0, q1):
    """q1 ⊖ q0 (B, nv): the increment dq with q0 ⊕ dq = q1 (exact quaternion log)."""
    xp = xp_of(q0, q1)
    out = xp.zeros(q0.shape[:-1] + (body.nv,), dtype=q0.dtype)
    out[:, body.lin_v] = q1[:, body.lin_q] - q0[:, body.lin_q]
    if len(body.quat_q):
        out[:, body.quat_v] = quat_log(quat_mul(quat_conj(q0[:, body.quat_q]), q1[:, body.quat_q]))
    return out


def qdot(body, q, v):
    """Time derivative of q (B, nq) for velocity v (B, nv) (quaternions: ½ q ⊗ (0, ω_body))."""
    xp = xp_of(q, v)
    out = xp.zeros_like(q)
    out[:, body.lin_q] = v[:, body.lin_v]
    if len(body.quat_q):
        w = v[:, body.quat_v]
        pure = xp.concatenate([xp.zeros_like(w[..., :1]), w], -1)
        out[:, body.quat_q] = 0.5 * quat_mul(q[:, body.quat_q], pure)
    return out


def normalize(body, q):
    """Copy of q with every quaternion normalised."""
    xp = xp_of(q)
    out = q.copy()
    if len(body.quat_q):
        qq = q[:, body.quat_q]
        out[:, body.quat_q] = qq / xp.sqrt(xp.sum(qq * qq, -1, keepdims=True))
    return out


# --- forward kinematics ---------------------------------------------------------------------------------------
class Kinematics(NamedTuple):
    """Link poses and DOF motion axes at one batch of configurations.

    R (B, L, 3, 3), t (B, L, 3): link rotations and origins. w, v (B, nv, 3): motion axes (angular part and linear
    part at the world origin). RJ (B, L, 3, 3), oJ (B, L, 3): joint frames before the joint moves.
    """

    R: object
    t: object
    w: object
    v: object
    RJ: object
    oJ: object


def _joint_local(body, q, xp, consts):
    """Per-link joint motion as 4x4 transforms (B, L, 4, 4), and the universal joints' first rotations."""
    B = q.shape[0]
    R = xp.empty((B, body.L, 3, 3), dtype=q.dtype)
    R[:] = consts["eye3"]
    t = xp.zeros((B, body.L, 3), dtype=q.dtype)
    extra = {}
    for jtype, links in body.joint_groups.items():
        qs = body.q_start[links]
        if jtype in ("hinge", "universal"):
            R[:, links] = _hinge_rot(consts["axis1_outer"][links], consts["axis1_skew"][links], q[:, qs], consts)
            if jtype == "universal":
                extra["universal_R1"] = R[:, links]
                R[:, links] = R[:, links] @ _hinge_rot(consts["axis2_outer"][links], consts["axis2_skew"][links],
                                                       q[:, qs + 1], consts)
        elif jtype == "slide":
            t[:, links] = consts["axis1"][links] * q[:, qs, None]
        elif jtype == "ball":
            R[:, links] = quat_to_rot(q[:, qs[:, None] + xp.arange(4)])
        elif jtype == "free":
            t[:, links] = q[:, qs[:, None] + xp.arange(3)]
            R[:, links] = quat_to_rot(q[:, qs[:, None] + 3 + xp.arange(4)])
    T = xp.zeros((B, body.L, 4, 4), dtype=q.dtype)
    T[..., :3, :3], T[..., :3, 3], T[..., 3, 3] = R, t, 1.0
    return T, extra


def _hinge_rot(outer, skew_axis, angle, consts):
    """Rodrigues for constant axes (given as aaᵀ and [a]×, (n, 3, 3)) and angles (B, n): c(1 − aaᵀ) + s[a]× + aaᵀ."""
    xp = xp_of(angle)
    c, s = xp.cos(angle)[..., None, None], xp.sin(angle)[..., None, None]
    return c * (consts["eye3"] - outer) + s * skew_axis + outer


def forward_kinematics(body, q):
    """Link poses and motion axes for q (B, nq); returns :class:`Kinematics`."""
    xp = xp_of(q)
    consts = body.arrays(xp, q.dtype)
    Tj, extra = _joint_local(body, q, xp, consts)
    Tplace = consts["place_T"]
    Tloc = Tplace @ Tj
    T = _compose_tree(body, Tloc, xp)
    Tpar = xp.where(consts["has_parent"][:, None, None], T[:, body.parent], consts["eye4"])
    TJ = Tpar @ Tplace
    R, t, RJ, oJ = T[..., :3, :3], T[..., :3, 3], TJ[..., :3, :3], TJ[..., :3, 3]
    w, v = _motion_axes(body, q, R, t, RJ, oJ, extra, xp, consts)
    return Kinematics(R, t, w, v, RJ, oJ)


def _compose_tree(body, Tloc, xp):
    """World transforms (B, L, 4, 4) from parent-relative ones.

    One pass down the tree, level by level, does the least arithmetic. Deep trees (long chains) would pay one call
    per level, so they use pointer jumping instead: every link is composed with its current ancestor and the
    reach doubles each round (ceil(log2 depth) batched calls). The choice depends on the body only, never on the
    batch size, so a trajectory gets the same bits whether it is simulated alone or in a batch.
    """
    if body.depth.max() >= 24:
        T = Tloc
        for act, anc in body.jump_rounds:
            T = T.copy()
            T[:, act] = T[:, anc] @ T[:, act]
        return T
    T = Tloc.copy()
    for links in body.levels[1:]:
        if len(links) == 1:
            i = int(links[0])
            T[:, i] = T[:, body.parent[i]] @ Tloc[:, i]
        else:
            T[:, links] = T[:, body.parent[links]] @ Tloc[:, links]
    return T


def _motion_axes(body, q, R, t, RJ, oJ, extra, xp, consts):
    B = q.shape[0]
    w = xp.zeros((B, body.nv, 3), dtype=q.dtype)
    v = xp.zeros((B, body.nv, 3), dtype=q.dtype)
    for jtype, links in body.joint_groups.items():
        vs = body.v_start[links]
        if jtype in ("hinge", "slide"):
            ax = matvec(RJ[:, links], consts["axis1"][links])
            if jtype == "hinge":
                w[:, vs], v[:, vs] = ax, cross(oJ[:, links], ax)
            else:
                v[:, vs] = ax
        elif jtype == "universal":
            w1 = matvec(RJ[:, links], consts["axis1"][links])
            w2 = matvec(RJ[:, links] @ extra["universal_R1"], consts["axis2"][links])
            w[:, vs], w[:, vs + 1] = w1, w2
            v[:, vs], v[:, vs + 1] = cross(oJ[:, links], w1), cross(oJ[:, links], w2)
        elif jtype in ("ball", "free"):
            rot = vs[:, None] + (3 if jtype == "free" else 0) + xp.arange(3)
            cols = xp.swapaxes(R[:, links], -1, -2)  # (B, n, 3 axes, 3): body axes in world
            w[:, rot] = cols
            v[:, rot] = cross(t[:, links][:, :, None, :], cols)
            if jtype == "free":
                v[:, vs[:, None] + xp.arange(3)] = xp.swapaxes(RJ[:, links], -1, -2)
    return w, v


def point_jacobian(body, kin, link, p0):
    """Jacobian of body points: link (P,) indices, p0 (P, 3) or (B, P, 3) link-frame offsets -> world positions
    (B, P, 3) and J (B, P, 3, nv) with J[..., j] = ω_j × P + v_j for DOFs j moving the link (0 otherwise)."""
    xp = xp_of(kin.R)
    p0 = xp.asarray(p0, dtype=kin.R.dtype)
    P = kin.t[:, link] + matvec(kin.R[:, link], p0)
    moves = xp.asarray(body.subtree[body.dof_link][:, link].T, dtype=kin.R.dtype)  # (P, nv)
    J = cross(kin.w[:, None, :, :], P[:, :, None, :]) + kin.v[:, None, :, :]  # (B, P, nv, 3)
    J = J * moves[None, :, :, None]
    return P, xp.swapaxes(J, -1, -2)


# --- chain rule: link-pose derivatives -> generalised derivatives -----------------------------------------
def pose_gradient_wrench(kin, G, f):
    """World wrench (B, L, 6) = (moment about the origin, force) of a per-link pose gradient.

    G (B, L, 3, 3) = ∂E/∂R_i, f (B, L, 3) = ∂E/∂t_i. Since dR = [ω]×R: ∂E/∂δ = ω·τ + (ω×t + v)·f with τ the axial
    vector of R Gᵀ; regrouping gives ω·(τ + t×f) + v·f.
    """
    xp = xp_of(G, f)
    X = kin.R @ xp.swapaxes(G, -1, -2)
    tau = xp.stack([X[..., 1, 2] - X[..., 2, 1], X[..., 2, 0] - X[..., 0, 2], X[..., 0, 1] - X[..., 1, 0]], -1)
    f = xp.broadcast_to(f, kin.t.shape)
    return xp.concatenate([tau + cross(kin.t, f), f], -1), X


def generalized_gradient(body, kin, wrench):
    """∂E/∂δ (B, nv) from per-link world wrenches (B, L, 6): subtree sums projected on each DOF's axis."""
    xp = xp_of(wrench)
    sub = body.arrays(xp, wrench.dtype)["subtree"]
    W = (sub @ wrench)[:, body.dof_link]  # (B, nv, 6) wrench of the subtree each DOF carries
    return xp.sum(kin.w * W[..., :3], -1) + xp.sum(kin.v * W[..., 3:], -1)


def motion_matrix(kin):
    """S (B, nv, 6): DOF motion axes stacked as (ω, v)."""
    xp = xp_of(kin.w)
    return xp.concatenate([kin.w, kin.v], -1)


def generalized_hessian(body, kin, K=None, G=None, f=None, X=None, gn_diagonal=False, trivialized=False):
    """Generalised Hessian (B, nv, nv) from per-link pose derivatives.

    K: per-link spatial quadratic form of the energy in the link's spatial velocity (ω, v at the world origin),
    either (B, L, 6, 6) or :class:`Moments` (inertia-like forms) — the Gauss-Newton part Σ_i S_iᵀ K_i S_i
    (the mass matrix when K is the links' world mass moments).
    G, f (and X = R Gᵀ if already computed): first pose derivatives; when given, adds the curvature part
    Σ_i ∂E/∂pose_i · ∂²pose_i/∂δ_j∂δ_k using ∂²R = [ω_j][ω_k]R, ∂²t = ω_j×(ω_k×t + v_k) for j carrying k.
    With ``gn_diagonal`` also returns the diagonal of the Gauss-Newton part (B, nv). With ``trivialized`` returns
    instead the Jacobian of δ ↦ g(q ⊕ δ) (g in the tangent frame of q ⊕ δ): equal to the Hessian except inside
    ball / free rotations, where it is not symmetric away from stationary points (Newton on a residual needs it).
    """
    xp = xp_of(kin.w)
    c = body.arrays(xp, kin.w.dtype)
    sub, weight = c["subtree"], c["hess_weight"]
    dl = body.dof_link
    S = motion_matrix(kin)
    B, nv, L = S.shape[0], S.shape[1], body.L
    Xk = xp.zeros((B, nv, 6), dtype=S.dtype)
    if isinstance(K, Moments):  # composite (subtree) moments per DOF k, applied without forming 6x6 matrices
        Xk = K.subtree_sum(sub).take(dl).apply(S)
    elif K is not None:
        Kc = (sub @ K.reshape(B, L, 36)).reshape(B, L, 6, 6)[:, dl]
        Xk = matvec(Kc, S)
    diag = xp.sum(S * Xk, -1) if gn_diagonal else None
    if G is not None:
        if X is None:
            X = kin.R @ xp.swapaxes(G, -1, -2)
        Z = X + kin.t[..., :, None] * f[..., None, :]
        Zc = (sub @ Z.reshape(B, L, 9)).reshape(B, L, 3, 3)[:, dl]
        Fc = (sub @ f)[:, dl]
        tr = (Zc[..., 0, 0] + Zc[..., 1, 1] + Zc[..., 2, 2])[..., None]
        Xk[..., :3] += matvec(Zc, kin.w) - tr * kin.w + cross(kin.v, Fc)
    P = S @ xp.swapaxes(Xk, -1, -2)  # P[j, k] = s_j · X_k, meaningful where j carries k
    if trivialized:
        H = P * c["jac_weight_a"] + xp.swapaxes(P * c["jac_weight_b"], -1, -2)
    else:
        P = P * weight
        H = P + xp.swapaxes(P, -1, -2)
    return (H, diag) if gn_diagonal else H


class Moments(NamedTuple):
    """World mass moments per link about the origin: m (L,) or (B, L), c = ∫ρP (B, L, 3), S = ∫ρPPᵀ (B, L, 3, 3).

    They define the spatial quadratic form K(ω, v) = ∫ρ‖ω×P + v‖² (twice the kinetic energy) without 6x6 matrices.
    """

    m: object  # (L,) constants or (B, L)
    c: object
    S: object

    def __add__(self, other):
        return Moments(self.m + other.m, self.c + other.c, self.S + other.S)

    def scaled(self, a):
        return Moments(self.m * a, self.c * a, self.S * a)

    def subtree_sum(self, sub):
        """Composite moments of every subtree (sub: (L, L) subtree matrix)."""
        B, L = self.c.shape[:2]
        return Moments(self.m @ sub.T, sub @ self.c, (sub @ self.S.reshape(B, L, 9)).reshape(B, L, 3, 3))

    def take(self, idx):
        """Moments of the links ``idx`` (along axis 1; m may be per-link constants (L,) or batched (B, L))."""
        return Moments(self.m[..., idx], self.c[:, idx], self.S[:, idx])

    def apply(self, s):
        """K s for motions s (B, n, 6) with these moments (B, n): (tr(S)ω − Sω + c×v, ω×c + m v)."""
        xp = xp_of(s)
        w, v = s[..., :3], s[..., 3:]
        tr = (self.S[..., 0, 0] + self.S[..., 1, 1] + self.S[..., 2, 2])[..., None]
        return xp.concatenate([tr * w - matvec(self.S, w) + cross(self.c, v),
                               cross(w, self.c) + self.m[..., None] * v], -1)

    def matrix(self):
        """The (…, 6, 6) matrices."""
        return spatial_from_moments(self.m, self.c, self.S)


def world_moments(body, kin):
    """:class:`Moments` of every link at poses ``kin``: c_w = R c + m t, S_w = R S Rᵀ + R c tᵀ + t cᵀRᵀ + m t tᵀ."""
    xp = xp_of(kin.R)
    c = body.arrays(xp, kin.R.dtype)
    m, cl, Sl = c["mass"], c["c"], c["S"]
    R, t = kin.R, kin.t
    Rc = matvec(R, cl)
    tRc = t[..., :, None] * Rc[..., None, :]
    Sw = R @ Sl @ xp.swapaxes(R, -1, -2) + tRc + xp.swapaxes(tRc, -1, -2) + m[:, None, None] * (
        t[..., :, None] * t[..., None, :])
    return Moments(m, Rc + m[:, None] * t, Sw)


def spatial_inertia(body, kin):
    """World-frame spatial inertia about the origin per link (B, L, 6, 6), ordering (ω, v):
    [[tr(S_w) 1 − S_w, [c_w]×], [[c_w]×ᵀ, m 1]]."""
    return world_moments(body, kin).matrix()


def spatial_from_moments(m, cw, Sw):
    """Spatial quadratic form [[tr(S) 1 − S, [c]×], [[c]×ᵀ, m 1]] from world moments m (…), c (…, 3), S (…, 3, 3)."""
    xp = xp_of(cw, Sw)
    out = xp.zeros(Sw.shape[:-2] + (6, 6), dtype=Sw.dtype)
    tr = Sw[..., 0, 0] + Sw[..., 1, 1] + Sw[..., 2, 2]
    out[..., :3, :3] = -Sw
    m = xp.asarray(m, dtype=Sw.dtype)
    for a in range(3):
        out[..., a, a] += tr
        out[..., 3 + a, 3 + a] = m
    c0, c1, c2 = cw[..., 0], cw[..., 1], cw[..., 2]
    out[..., 0, 4], out[..., 0, 5], out[..., 1, 5] = -c2, c1, -c0
    out[..., 1, 3], out[..., 2, 3], out[..., 2, 4] = c2, -c1, c0
    out[..., 3:, :3] = xp.swapaxes(out[..., :3, 3:], -1, -2)
    return out



def mixed_moments(body, kin_a, kin_b):
    """Mass moments of every link shared by two configurations a, b: (c_a = ∫ρP_a, c_b = ∫ρP_b (B, L, 3),
    S_ab = ∫ρ P_a P_bᵀ (B, L, 3, 3)), with P_x = R_x p0 + t_x."""
    xp = xp_of(kin_a.R)
    c = body.arrays(xp, kin_a.R.dtype)
    m, cl, Sl = c["mass"], c["c"], c["S"]
    Rca, Rcb = matvec(kin_a.R, cl), matvec(kin_b.R, cl)
    ta, tb = kin_a.t, kin_b.t
    S_ab = kin_a.R @ Sl @ xp.swapaxes(kin_b.R, -1, -2) + Rca[..., :, None] * tb[..., None, :] + \
        ta[..., :, None] * Rcb[..., None, :] + m[:, None, None] * (ta[..., :, None] * tb[..., None, :])
    return Rca + m[:, None] * ta, Rcb + m[:, None] * tb, S_ab


def cross_spatial_form(m, c_a, c_b, S_ab, W=None):
    """Cross quadratic form of ∫ρ (ω×P_a + v)ᵀ W (ω'×P_b + v') between two configurations (…, 6, 6) so that the
    form is s_aᵀ K s_b: [[Σ ε_bak ε_cdl W_bc S_ab,kl, [c_a]×W], [−W[c_b]×, mW]] (W = None: identity)."""
    xp = xp_of(c_a, S_ab)
    eye = xp.eye(3, dtype=S_ab.dtype)
    W = xp.broadcast_to(eye, S_ab.shape) if W is None else W
    out = xp.empty(S_ab.shape[:-2] + (6, 6), dtype=S_ab.dtype)
    out[..., :3, :3] = _rotational_block(W, S_ab)
    out[..., :3, 3:] = skew(c_a) @ W
    out[..., 3:, :3] = -W @ skew(c_b)
    out[..., 3:, 3:] = xp.asarray(m, dtype=S_ab.dtype)[..., None, None] * W
    return out


def cross_hessian(body, kin_a, kin_b, K):
    """Σ_links s_i(q_a)ᵀ K_l s_j(q_b) over the links moved by both DOFs (B, nv, nv): the coupling of two
    configurations through per-link cross forms K (B, L, 6, 6) (e.g. ∫ρ J_aᵀ J_b, the cross mass matrix)."""
    xp = xp_of(K)
    c = body.arrays(xp, K.dtype)
    B, L = K.shape[:2]
    dl = body.dof_link
    Kc = (c["subtree"] @ K.reshape(B, L, 36)).reshape(B, L, 6, 6)[:, dl]  # composite forms per DOF
    Sa, Sb = motion_matrix(kin_a), motion_matrix(kin_b)
    P1 = Sa @ xp.swapaxes(matvec(Kc, Sb), -1, -2)  # s_i^a · Kc[l(j)] s_j^b: valid when l(i) carries l(j)
    P2 = matvec(xp.swapaxes(Kc, -1, -2), Sa) @ xp.swapaxes(Sb, -1, -2)  # Kc[l(i)]: valid when l(j) carries l(i)
    anc = c["dof_anc"]
    return xp.where(anc > 0, P1, xp.where(xp.swapaxes(anc, 0, 1) > 0, P2, 0.0))


def _rotational_block(W, S):
    """∫ρ [P_a]×ᵀ W [P_b]× = Σ_kl S_kl [e_k]×ᵀ W [e_l]× = −Σ_k [e_k]× W [S_k,:]× for S = ∫ρ P_a P_bᵀ (…, 3, 3):
    three batched 3x3 products (a 4-index einsum was the drag Hessian's bottleneck)."""
    xp = xp_of(W, S)
    E = xp.asarray(_SKEW_E, dtype=S.dtype)
    out = -(E[0] @ W) @ skew(S[..., 0, :])
    for k in (1, 2):
        out = out - (E[k] @ W) @ skew(S[..., k, :])
    return out


_SKEW_E = np.array([[[0, 0, 0], [0, 0, -1], [0, 1, 0]], [[0, 0, 1], [0, 0, 0], [-1, 0, 0]],
                    [[0, -1, 0], [1, 0, 0], [0, 0, 0]]], dtype=float)


def weighted_spatial_form(m, cw, Sw, W):
    """Spatial quadratic form of ∫ρ (ω×P + v)ᵀ W (ω×P + v) (…, 6, 6) for a constant symmetric weight W (…, 3, 3),
    from world moments m (…), c = ∫ρP (…, 3), S = ∫ρPPᵀ (…, 3, 3): [[Σ ε_bak ε_cdl W_bc S_kl, [c]×W], [−W[c]×, mW]]."""
    xp = xp_of(cw, Sw, W)
    out = xp.empty(Sw.shape[:-2] + (6, 6), dtype=Sw.dtype)
    out[..., :3, :3] = _rotational_block(W, Sw)
    cW = skew(cw) @ W
    out[..., :3, 3:] = cW
    out[..., 3:, :3] = xp.swapaxes(cW, -1, -2)
    out[..., 3:, 3:] = xp.asarray(m, dtype=Sw.dtype)[..., None, None] * W
    return out
