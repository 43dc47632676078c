"""Inertia term of the order-2 step: 1/(2Δt²) ∫ρ ‖P(q) − 2P(q_k) + P(q_{k−1})‖² (docs/physics.md §2)."""
from __future__ import annotations

from ..arrays import xp_of
from ..kinematics import matvec, world_moments
from .base import LinkTerms


def inertia_targets(kin_cur, kin_prev):
    """Affine targets of each link: A = 2R_k − R_{k−1} (B, L, 3, 3), b = 2t_k − t_{k−1} (B, L, 3)."""
    return 2 * kin_cur.R - kin_prev.R, 2 * kin_cur.t - kin_prev.t


def affine_link_energy(body, R, t, A, b, scale, derivatives, W=None):
    """scale · ∫ρ ‖R p0 + t − (A p0 + b)‖²_W per link, summed: value (B,), and ∂/∂R, ∂/∂t when ``derivatives``.

    Closed form from the mass moments: tr(Dᵀ W D S) + 2 uᵀ W D c + m uᵀ W u, D = R − A, u = t − b; W (B, L, 3, 3)
    symmetric (None: identity). The gradients are W times the isotropic ones.
    """
    xp = xp_of(R)
    c = body.arrays(xp, R.dtype)
    m, cl, S = c.mass, c.c, c.S
    D, u = R - A, t - b
    DS, Dc = D @ S, matvec(D, cl)
    gR, gt = DS + u[..., :, None] * cl[:, None, :], Dc + m[:, None] * u  # ½ ∂/∂R, ½ ∂/∂t for W = 1
    if W is not None:
        gR, gt = W @ gR, matvec(W, gt)
    # e = ⟨D, ½∂e/∂R⟩ + ⟨u, ½∂e/∂t⟩ for a quadratic form in (D, u)
    val = scale * xp.sum(xp.sum(gR * D, axis=(-1, -2)) + xp.sum(u * gt, -1), -1)
    if not derivatives:
        return val, None, None
    return val, 2 * scale * gR, 2 * scale * gt


def inertia_terms(body, kin, targets, dt, derivatives=True, gauss_newton=True):
    """Inertia energy at link poses ``kin`` for ``targets`` = (A, b) and time step ``dt`` [s] -> LinkTerms.

    Its Gauss-Newton form K is the links' world mass moments / Δt² (so that Σ SᵀKS = M/Δt²); pass
    ``gauss_newton=False`` to skip it when only the gradient is wanted.
    """
    A, b = targets
    scale = 0.5 / (dt * dt)
    val, G, f = affine_link_energy(body, kin.R, kin.t, A, b, scale, derivatives)
    if not derivatives:
        return LinkTerms(val)
    K = world_moments(body, kin).scaled(1.0 / (dt * dt)) if gauss_newton else None
    return LinkTerms(val, G, f, K)
