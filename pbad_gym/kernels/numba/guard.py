"""The divergence guard's per-step arithmetic (:meth:`pbad_gym.envs.divergence.EnergyBudget.check`), compiled.

The NumPy reference spends about 25 calls on (B,) arrays per env step, a step-rate cost at small batches. This is
the same float64 expressions, evaluated in the same order row by row, so its results are the reference's bit for
bit (IEEE operations, no fast-math, no contraction into FMA; the terms widened to float64 where the reference
widens them, the centre of mass's height above the floor taken in the terms' dtype as NumPy does); the reference
stays the definition (and the path of the other backends). batch.guard_rows runs it right after the energy terms
of the same rows, in the same compiled call.
"""
from __future__ import annotations

import math

import numpy as np

from .constants import T_ACTUATION, T_COM, T_CONTACT, T_KINETIC, T_LIMITS
from .jit import jitable

SQRT2 = math.sqrt(2.0)


@jitable
def check_rows(terms, has_floor, mg_z, floor, c_gravity, safety, dt, round_off, K_last, s_last, exceeded, K_out,
               s_out, r0, r1):
    """The checks of rows r0 … r1−1 of n successive states of B trajectories against their budgets (K_last, s_last)
    (B,) float64.

    terms: (n, B, N_TERMS) the states' energy terms (constants.T_*), float64 or float32. has_floor, mg_z (m·g_z
    [N]), floor [m], c_gravity [√J/s], safety, dt [s] and round_off: the budget's constants (EnergyBudget).
    Writes exceeded (B,) bool (on any of the n states; NaN counts as exceeded), K_out [J] and s_out [√J] (B,):
    the last state's energy and cumulative bound."""
    n = terms.shape[0]
    fz = np.empty(1, terms.dtype)
    fz[0] = floor  # (NumPy subtracts a Python float from the terms' height in their own dtype)
    for b in range(r0, r1):
        K_before, s, ok = K_last[b], s_last[b], True
        K = K_before
        for k in range(n):
            row = terms[k, b]
            ke = np.float64(row[T_KINETIC])  # (np.float64, not float(): numba's float() keeps a float32 a float32)
            c = safety * (np.float64(row[T_ACTUATION]) + c_gravity)
            K = ke + np.float64(row[T_LIMITS]) + np.float64(row[T_CONTACT])
            if has_floor:
                K -= mg_z * np.float64(row[T_COM + 2] - fz[0])
            s = s + SQRT2 * c * dt
            slack = round_off * (abs(K) + abs(K_before))
            ke_pos = ke if (ke >= 0.0 or ke != ke) else 0.0  # np.maximum(ke, 0.0): NaN propagates
            step_ok = K - K_before <= c * math.sqrt(2.0 * ke_pos) * dt + slack
            ok = ok and step_ok and K <= s * s + slack
            K_before = K
        exceeded[b] = not ok
        K_out[b] = K
        s_out[b] = s
