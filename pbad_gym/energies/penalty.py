"""The step's clamped Kelvin-Voigt penalty, shared by the joint limits and the ground's normal force.

A penalty pushes with k·p + c·ṗ ≥ 0 on a depth p ≥ 0 past its bound (a joint past its range, a sphere in the
ground), with ṗ = (p − p_k)/Δt. Within a step the force is affine in p, so its energy is k_t/2·max(0, p − s)²:
a stiffness k_t and a shift s, constants of the step (convex and C¹ in q). How the spring part k·p is placed in
time (``springs``):

- "implicit": k·p at the end of the step, as every other force of the order-2 step (backward-Euler-like). Then
  k_t = k + c/Δt and s = p_k·c/(kΔt + c). The step removes energy from the penalty's oscillation at a rate of
  order k·Δt·ṗ² (docs/physics.md §2.4).
- "trapezoidal": k·(p/4 + p_k/2 + p_{k−1}/4), Newmark's average acceleration in the two-step form of the order-2
  step (the inertia term's q − 2q_k + q_{k−1} is a central difference). For a linear spring this weighting keeps
  the oscillation's energy for every Δt: the penalty loses energy only through its damper c. Then
  k_t = k/4 + c/Δt and s = (c/Δt·p_k − k(p_k/2 + p_{k−1}/4))/k_t; s < 0 where the past depths push, so the
  force may act up to |s| beyond the bound for one step (micrometres at Spider-v4's constants), and it is still
  continuous there (the energy is C¹). At rest (p = p_k = p_{k−1}) it is k·p, as the implicit one.

The depths p_k, p_{k−1} are clamped at 0 (the spring forces of those steps); the current p is the signed
distance past the bound, so the force starts where k·p + … turns positive. Both forms are order-2 terms (they
read q_k, and the trapezoidal one q_{k−1}).
"""
from __future__ import annotations

SPRING_SCHEMES = ("implicit", "trapezoidal")
DEFAULT_SPRINGS = "implicit"


def check_springs(value, name):
    """``value`` if it is one of :data:`SPRING_SCHEMES`, else ValueError naming ``name``."""
    if not isinstance(value, str) or value not in SPRING_SCHEMES:
        raise ValueError(f"{name} must be one of {SPRING_SCHEMES}, got {value!r}")
    return value


def step_stiffness(k, c, dt, springs):
    """k_t [N/m or N m/rad]: the step energy's stiffness of a penalty with spring k, damper c [N s/m or
    N m s/rad] and step ``dt`` [s] (c = 0: no damper)."""
    kd = c / dt if c > 0 else 0.0
    return (0.25 * k if springs == "trapezoidal" else k) + kd


def trapezoidal_shift(p_k, p_back, k, c, dt):
    """s (array of p_k's shape): the shift of the trapezoidal step energy k_t/2·max(0, p − s)² for clamped depths
    p_k at q_k and p_back at q_{k−1}, spring k, damper c and step ``dt`` [s]. (The implicit form's shift,
    p_k·c/(kΔt + c), is computed where its term is: energies/joints.py, energies/contact.py.)"""
    kd = c / dt if c > 0 else 0.0
    return (kd * p_k - k * (0.5 * p_k + 0.25 * p_back)) / (0.25 * k + kd)
