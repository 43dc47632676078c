"""The chain rule from link-pose derivatives to generalised derivatives (docs/physics.md §1-2).

An energy's derivatives with respect to each link's pose (∂E/∂R_i, ∂E/∂t_i, and a spatial quadratic form for the
Gauss-Newton part) become its generalised gradient and Hessian by subtree sums projected on the DOF motion axes.
"""
from __future__ import annotations

from ..arrays import xp_of
from .algebra import cross, matvec
from .spatial import Moments

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
    sub = body.arrays(xp, wrench.dtype).subtree
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
    sub, weight = c.subtree, c.hess_weight
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
        H = P * c.jac_weight_a + xp.swapaxes(P * c.jac_weight_b, -1, -2)
    else:
        P = P * weight
        H = P + xp.swapaxes(P, -1, -2)
    return (H, diag) if gn_diagonal else H


def cross_hessian(body, kin_a, kin_b, K):
    """Σ_links s_i(q_a)ᵀ K_l s_j(q_b) over the links moved by both DOFs (B, nv, nv): the coupling of two
    configurations through per-link cross forms K (B, L, 6, 6) (e.g. ∫ρ J_aᵀ J_b, the cross mass matrix)."""
    xp = xp_of(K)
    c = body.arrays(xp, K.dtype)
    B, L = K.shape[:2]
    dl = body.dof_link
    Kc = (c.subtree @ K.reshape(B, L, 36)).reshape(B, L, 6, 6)[:, dl]  # composite forms per DOF
    Sa, Sb = motion_matrix(kin_a), motion_matrix(kin_b)
    P1 = Sa @ xp.swapaxes(matvec(Kc, Sb), -1, -2)  # s_i^a · Kc[l(j)] s_j^b: valid when l(i) carries l(j)
    P2 = matvec(xp.swapaxes(Kc, -1, -2), Sa) @ xp.swapaxes(Sb, -1, -2)  # Kc[l(i)]: valid when l(j) carries l(i)
    anc = c.dof_anc
    return xp.where(anc > 0, P1, xp.where(xp.swapaxes(anc, 0, 1) > 0, P2, 0.0))
