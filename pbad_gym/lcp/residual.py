"""Natural-map residual of a boxed LCP: the error measure every solver reports.

``r = λ - clip(λ - w, lo, hi)`` with ``w = Aλ + b`` is zero exactly at a solution (λ at lo with w ≥ 0, at hi with
w ≤ 0, or strictly inside with w = 0). Friction bounds are taken at the λ being measured.
"""
from __future__ import annotations

from ..arrays import xp_of
from .friction import Friction, effective_bounds

NORMS = ("inf", "rel2")


def natural_map(lam, w, lo, hi, friction: Friction | None = None, mask=None):
    """Per-row natural-map residual (B, m) of ``lam`` given ``w = Aλ + b`` (both (B, m)); 0 on padded rows."""
    xp = xp_of(lam, w)
    lo_e, hi_e = effective_bounds(lam, lo, hi, friction)
    r = lam - xp.clip(lam - w, lo_e, hi_e)
    if mask is not None:
        r = xp.where(mask, r, 0.0)
    return r


def reduce_residual(r, b, norm: str = "inf"):
    """Norm (B,) of per-row residuals r (B, m): "inf" = max |r_i|; "rel2" = ‖r‖₂ / ‖b‖₂ (‖b‖ = 0 counts as 1)."""
    xp = xp_of(r, b)
    if norm == "inf":
        return xp.max(xp.abs(r), axis=1) if r.shape[1] else xp.zeros(r.shape[0], dtype=r.dtype)
    if norm == "rel2":
        nb = xp.sqrt(xp.sum(b * b, axis=1))
        return xp.sqrt(xp.sum(r * r, axis=1)) / xp.where(nb > 0, nb, 1.0)
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def natural_residual(A, b, lam, lo=None, hi=None, *, friction: Friction | None = None, mask=None,
                     norm: str = "inf"):
    """Natural-map residual ‖λ - clip(λ - (Aλ + b), lo, hi)‖ per batch element.

    A (B, m, m) (batch axis may be 1), b (B, m), lam (B, m); lo/hi (B, m) or None (defaults 0 and +inf); friction
    bounds at ``lam``; mask (B, m) bool (False rows are ignored); norm "inf" (absolute max-norm) or "rel2"
    (2-norm relative to ‖b‖). Returns (B,).
    """
    xp = xp_of(A, b, lam)
    if lo is None:
        lo = xp.zeros_like(lam)
    if hi is None:
        hi = xp.full_like(lam, xp.inf)
    w = xp.einsum("bij,bj->bi", A, lam) + b
    bb = b if mask is None else xp.where(mask, b, 0.0)
    return reduce_residual(natural_map(lam, w, lo, hi, friction, mask), xp.broadcast_to(bb, lam.shape), norm)
