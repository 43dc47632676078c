"""Scalar row updates of the projected iterations, vectorised over the batch.

Every rule receives, for one row i per batch element (all arrays (B,)):
``lam`` = λ_i, ``r`` = Σ_{j≠i} A_ij λ_j + b_i, ``a`` = A_ii > 0, and the row's current box ``lo``, ``hi``.
"""
from __future__ import annotations

from ..arrays import xp_of


def psor_row(lam, r, a, lo, hi, omega):
    """Projected SOR: λ_i ← clip((1-ω)λ_i + ω(-r/a), lo, hi); ω = 1 is projected Gauss-Seidel.

    Written as a convex combination (not λ - ωw/a) so that ω = 1 gives exactly -r/a: AMGS with Ω = D then
    reproduces PGS bit for bit on plain LCP rows.
    """
    xp = xp_of(lam, r, a)
    return xp.clip((1.0 - omega) * lam + omega * (-r / a), lo, hi)


def amgs_row(lam, xneg, r, a, lo, hi, theta):
    """Accelerated modulus-based Gauss-Seidel (Zheng & Yin; seed 004), γ = 2, Ω = θ·D. Returns (λ_i, x₋,i).

    Derivation (plain LCP): λ = (|x|+x)/γ, w = Ω(|x|-x)/γ turns Aλ + b = w into (A+Ω)x = (Ω-A)|x| - γb; with
    the splittings A = (D-L) - U on x and A = (D-U) - L on |x| and L-terms taken at the new iterate,
    (D+Ω)x_i = -γ(Σ_{j≠i} A_ij λ_j + b_i) + (Ω_ii - A_ii)|x_i|, using x + |x| = γλ. With γ = 2,
    |x_i| = λ_i + x₋,i (x₋ = max(0, -x)), so
        x_i ← [-2 r + (θ-1) a (λ_i + x₋,i)] / ((1+θ) a),   λ_i = max(0, x_i),   x₋,i = max(0, -x_i).
    θ = 1 gives λ_i = max(0, -r/a): PGS. Where the previous iterate was positive (x₋ = 0) the step is PSOR with
    ω = 2/(1+θ); the difference is the memory x₋ of how far below the bound the last iterate was.

    Boxed rows and friction rows (our choice: shift and reflect the variable). Seed 004's boxed form assumes
    0 ≤ lo < hi; friction boxes are [-μλ_n, μλ_n]. Each row is mapped to a non-negative variable with the
    current box: y = λ - lo (lo finite), y = hi - λ (only hi finite), y = λ (free row, no modulus split). In y
    the row is an LCP with upper bound hi - lo: w_y = a·y + r' with r' = s(r + a·anchor); the update above runs
    on y, is clipped to [0, hi - lo], and mapped back. x₋ is kept in these shifted coordinates; for friction rows
    the anchor -μλ_n moves with the normal impulse and the stored x₋ is reused as is (it only scales the
    relaxation memory; the fixed point is unchanged). With θ = 1 the update is clip(-r/a, lo, hi) exactly: PGS.
    """
    xp = xp_of(lam, r, a)
    lo_f = xp.isfinite(lo)
    hi_f = xp.isfinite(hi)
    free = ~lo_f & ~hi_f
    s = xp.where(lo_f | free, 1.0, -1.0)
    anchor = xp.where(lo_f, lo, xp.where(hi_f, hi, 0.0))
    anchor = xp.where(xp.isfinite(anchor), anchor, 0.0)
    span = xp.where(lo_f & hi_f, hi - xp.where(lo_f, lo, 0.0), xp.inf)
    y = s * (lam - anchor)
    rp = s * (r + a * anchor)
    om = theta * a
    x = (-2.0 * rp + (om - a) * (y + xneg)) / (a + om)
    y_new = xp.where(free, x, xp.clip(x, 0.0, span))
    xneg_new = xp.where(free, 0.0, xp.maximum(0.0, -x))
    return anchor + s * y_new, xneg_new
