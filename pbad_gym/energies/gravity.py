"""Gravity potential U = −gᵀ Σ_i (m_i t_i + R_i c_i) (linear in the link poses)."""
from __future__ import annotations

from ..arrays import xp_of
from ..kinematics import matvec
from .base import LinkTerms


def gravity_terms(body, kin, gravity, derivatives=True):
    """Gravity energy [J] for gravity (3,) [m/s²] at link poses ``kin`` -> LinkTerms (K = None: linear)."""
    xp = xp_of(kin.R)
    c = body.arrays(xp, kin.R.dtype)
    g = xp.asarray(gravity, dtype=kin.R.dtype)
    cw = matvec(kin.R, c.c) + c.mass[:, None] * kin.t
    val = -xp.sum(cw @ g, -1)
    if not derivatives:
        return LinkTerms(val)
    # constant over the batch: a leading axis of 1 broadcasts against batched terms
    G = (-g[:, None] * c.c[:, None, :])[None]
    f = (-c.mass[:, None] * g)[None]
    return LinkTerms(val, G, f, None)
