"""Mass moments and spatial quadratic forms of links in the world frame (ordering (ω, v) at the origin).

A link's spatial quadratic form K gives ∫ρ ‖ω×P + v‖²_W for its spatial velocity: the spatial inertia for W = 1,
the drag's form for W = R C Rᵀ, and cross forms between two configurations for collocation.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..arrays import xp_of
from .algebra import cross, matvec, skew


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
    m, cl, Sl = c.mass, c.c, c.S
    R, t = kin.R, kin.t
    Rc = matvec(R, cl)
    tRc = t[..., :, None] * Rc[..., None, :]
    Sw = R @ Sl @ xp.swapaxes(R, -1, -2) + tRc + xp.swapaxes(tRc, -1, -2) + m[:, None, None] * (
        t[..., :, None] * t[..., None, :])
    return Moments(m, Rc + m[:, None] * t, Sw)


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
    m, cl, Sl = c.mass, c.c, c.S
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
    return cross_spatial_form(m, cw, cw, Sw, W)  # the cross form of a configuration with itself
