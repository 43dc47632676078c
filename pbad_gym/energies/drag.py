"""Fluid drag as an energy (docs/physics.md §2): 1/(2Δt) ∫ρ (P(q) − P(q_k))ᵀ W (P(q) − P(q_k)) per link,
W = R_i(q_k) C_i R_i(q_k)ᵀ with body-frame coefficients C_i = diag(c_axial, c_normal, c_normal) [1/s].

Weights follow the mass density, so each coefficient is a damping rate: isotropic C = D·1 (the paper's model)
damps the centre-of-mass velocity as p_{k+1} = p_k / (1 + D·Δt) whatever the joint torques do; anisotropic C
(c_normal > c_axial, slender links) is what lets a swimmer push against the fluid.
"""
from __future__ import annotations

from ..arrays import xp_of
from ..kinematics import weighted_spatial_form, world_moments
from .base import LinkTerms
from .inertia import affine_link_energy


def drag_weights(kin_ref, coeff):
    """W = R_k diag(C) R_kᵀ (B, L, 3, 3) from reference poses and coefficients C (L, 3) [1/s] (body axes)."""
    R = kin_ref.R
    return (R * coeff[:, None, :]) @ R.swapaxes(-1, -2)


def drag_terms(body, kin, kin_ref, W, dt, derivatives=True, gauss_newton=True):
    """Drag energy [J] at poses ``kin`` relative to reference poses ``kin_ref`` (q_k), weights W (B, L, 3, 3),
    step ``dt`` [s] -> LinkTerms with a (B, L, 6, 6) Gauss-Newton form."""
    scale = 0.5 / dt
    val, G, f = affine_link_energy(body, kin.R, kin.t, kin_ref.R, kin_ref.t, scale, derivatives, W=W)
    if not derivatives:
        return LinkTerms(val)
    K = None
    if gauss_newton:
        mom = world_moments(body, kin)
        xp = xp_of(kin.R)
        K = weighted_spatial_form(xp.broadcast_to(mom.m, kin.t.shape[:2]), mom.c, mom.S, W) / dt
    return LinkTerms(val, G, f, K)
