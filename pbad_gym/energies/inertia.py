"""Inertia term of the order-2 step: 1/(2Δt²) ∫ρ ‖P(q) − 2P(q_k) + P(q_{k−1})‖² (DESIGN.md §4)."""
from __future__ import annotations

from ..backend import xp_of
from ..kinematics import matvec, world_moments
from .base import LinkTerms


def inertia_targets(kin_cur, kin_prev):
    """Affine targets of each link: A = 2R_k − R_{k−1} (B, L, 3, 3), b = 2t_k − t_{k−1} (B, L, 3)."""
    return 2 * kin_cur.R - kin_prev.R, 2 * kin_cur.t - kin_prev.t


def affine_link_energy(body, R, t, A, b, scale, derivatives):
    """scale · ∫ρ ‖R p0 + t − (A p0 + b)‖² per link, summed: value (B,), and ∂/∂R, ∂/∂t when ``derivatives``.

    Closed form from the mass moments: tr(D S Dᵀ) + 2 uᵀ D c + m‖u‖², D = R − A, u = t − b.
    """
    xp = xp_of(R)
    c = body.arrays(xp, R.dtype)
    m, cl, S = c["mass"], c["c"], c["S"]
    D, u = R - A, t - b
    DS, Dc = D @ S, matvec(D, cl)
    val = scale * xp.sum(xp.sum(DS * D, axis=(-1, -2)) + 2 * xp.sum(u * Dc, -1) + m * xp.sum(u * u, -1), -1)
    if not derivatives:
        return val, None, None
    G = 2 * scale * (DS + u[..., :, None] * cl[:, None, :])
    f = 2 * scale * (Dc + m[:, None] * u)
    return val, G, f


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
