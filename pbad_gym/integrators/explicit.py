"""Conventional baselines on M(q) q̈ = τ − h(q, q̇) (docs/physics.md §4): explicit Euler, semi-implicit Euler, RK4.

Each takes (body, q (B, nq), qd (B, nv), tau (B, nv), dt [s], gravity (3,)) and returns (q, qd) after one step.
Rotations stay on the manifold: Euler steps use q ⊕ Δt q̇; RK4 integrates q in its ambient coordinates
(quaternion rate ½ q ⊗ (0, ω)) and normalises at the end, which keeps its fourth order.
"""
from __future__ import annotations

from ..arrays import xp_of
from ..dynamics import forward_dynamics
from ..kinematics import integrate, normalize, qdot
from .state import StepInfo, contract_step, stored_velocity


def euler(body, q, qd, tau, dt, gravity):
    """Explicit Euler: q ⊕ Δt q̇_k, q̇ + Δt q̈_k."""
    qdd = forward_dynamics(body, q, qd, tau, gravity)
    return integrate(body, q, dt * qd), qd + dt * qdd


def semi_implicit_euler(body, q, qd, tau, dt, gravity):
    """Semi-implicit (symplectic) Euler: q̇_{k+1} = q̇ + Δt q̈_k, q_{k+1} = q ⊕ Δt q̇_{k+1}."""
    qd_new = qd + dt * forward_dynamics(body, q, qd, tau, gravity)
    return integrate(body, q, dt * qd_new), qd_new


def rk4(body, q, qd, tau, dt, gravity):
    """Classical fourth-order Runge-Kutta."""
    def f(qs, vs):
        return qdot(body, qs, vs), forward_dynamics(body, normalize(body, qs), vs, tau, gravity)

    k1q, k1v = f(q, qd)
    k2q, k2v = f(q + 0.5 * dt * k1q, qd + 0.5 * dt * k1v)
    k3q, k3v = f(q + 0.5 * dt * k2q, qd + 0.5 * dt * k2v)
    k4q, k4v = f(q + dt * k3q, qd + dt * k3v)
    q_new = q + dt / 6.0 * (k1q + 2 * k2q + 2 * k3q + k4q)
    qd_new = qd + dt / 6.0 * (k1v + 2 * k2v + 2 * k3v + k4v)
    return normalize(body, q_new), qd_new


EXPLICIT = {"euler": euler, "semi_implicit_euler": semi_implicit_euler, "rk4": rk4}


def explicit_step(scheme):
    """The step-contract function of the explicit ``scheme`` (a key of EXPLICIT): gravity and actuation only,
    diagnostics 0 iterations, converged."""
    fn = EXPLICIT[scheme]

    @contract_step(stored_velocity)
    def step(model, state, tau, options):
        q, qd = fn(model.body, state.q, state.qd, tau, model.dt, model.gravity)
        xp, B = xp_of(q), q.shape[0]
        zeros = xp.zeros(B, dtype=q.dtype)
        info = StepInfo(xp.zeros(B, dtype=xp.int64), zeros, xp.ones(B, dtype=bool))
        return state._replace(q=q, qd=qd, kin=None, velocity=None, time=state.time + model.dt), info

    step.__doc__ = f"{scheme}: " + (fn.__doc__ or "")
    return step
