"""The divergence guard's per-step arithmetic (:meth:`pbad_gym.envs.divergence.EnergyBudget.check`), compiled.

The NumPy reference spends about 25 calls on (B,) arrays per env step, a step-rate cost at small batches (≈ 12 µs
of a Swimmer step at 1 env). This is the same float64 expressions, evaluated in the same order row by row, so
its results are the reference's bit for bit (IEEE operations, no fast-math, no contraction into FMA); the
reference stays the definition (and the path for float32, devices and explicit centres of mass).
"""
from __future__ import annotations

import math

from numba import njit

SQRT2 = math.sqrt(2.0)


@njit(cache=True, nogil=True)
def energy_check(kinetic, actuation, limits, contact, com_z, has_floor, mg_z, floor, c_gravity, safety, dt,
                 round_off, K_last, s_last, exceeded, K_out, s_out):
    """The checks of n successive states of B trajectories against their budgets (K_last, s_last) (B,).

    kinetic, actuation, limits, contact, com_z: (n, B) float64, the states' energy terms. has_floor, mg_z
    (m·g_z) and floor: the gravity term of the energy (see the reference). Writes exceeded (B,) bool (on any of
    the n states; NaN counts as exceeded), K_out and s_out (B,): the last state's energy and cumulative bound."""
    n, B = kinetic.shape
    for b in range(B):
        K_before, s, ok = K_last[b], s_last[b], True
        K = K_before
        for k in range(n):
            ke = kinetic[k, b]
            c = safety * (actuation[k, b] + c_gravity)
            K = ke + limits[k, b] + contact[k, b]
            if has_floor:
                K -= mg_z * (com_z[k, b] - floor)
            s = s + SQRT2 * c * dt
            slack = round_off * (abs(K) + abs(K_before))
            ke_pos = ke if (ke >= 0.0 or ke != ke) else 0.0  # np.maximum(ke, 0.0): NaN propagates
            step_ok = K - K_before <= c * math.sqrt(2.0 * ke_pos) * dt + slack
            ok = ok and step_ok and K <= s * s + slack
            K_before = K
        exceeded[b] = not ok
        K_out[b] = K
        s_out[b] = s
