"""PBAD order-2 step (DESIGN.md §4): q_{k+1} = argmin E(q) with

    E(q) = 1/(2Δt²) ∫ρ ‖P(q) − 2P(q_k) + P(q_{k−1})‖² + U(q) − τᵀ(q ⊖ q_k)

solved by batched Levenberg-Marquardt from the warm start q_k ⊕ (q_k ⊖ q_{k−1}).
"""
from __future__ import annotations

from typing import NamedTuple

from ..energies import actuation_terms, gravity_terms, inertia_targets, inertia_terms
from ..kinematics import (difference, forward_kinematics, generalized_gradient, generalized_hessian, integrate,
                          pose_gradient_wrench)
from ..optim import levenberg_marquardt

HESSIANS = ("exact", "gauss_newton")


class StepData(NamedTuple):
    """Constants of one step for a batch: inertia targets (A, b), q_k (B, nq), τ (B, nv), Δt [s], gravity (3,)."""

    A: object
    b: object
    q_ref: object
    tau: object
    dt: float
    gravity: object

    def take(self, idx):
        """The data of trajectories ``idx`` (None: all)."""
        if idx is None:
            return self
        return StepData(self.A[idx], self.b[idx], self.q_ref[idx], self.tau[idx], self.dt, self.gravity)


def prepare_step(body, q_prev, q_cur, tau, dt, gravity, kin_prev=None, kin_cur=None):
    """StepData for the step from (q_{k−1}, q_k) under generalised force tau (B, nv); kinematics of either
    configuration may be passed in when already known."""
    kin_prev = forward_kinematics(body, q_prev) if kin_prev is None else kin_prev
    kin_cur = forward_kinematics(body, q_cur) if kin_cur is None else kin_cur
    A, b = inertia_targets(kin_cur, kin_prev)
    return StepData(A, b, q_cur, tau, float(dt), gravity)


def step_energy(body, q, data, derivatives=False, hessian="exact"):
    """The order-2 step energy at q (B, nq) for ``data``.

    Returns E (B,), or (E, g (B, nv), H (B, nv, nv), D (B, nv)) when ``derivatives``; ``hessian`` is "exact" or
    "gauss_newton" (mass matrix / Δt² plus joint-space Hessians), D the diagonal of the Gauss-Newton Hessian.
    """
    kin = forward_kinematics(body, q)
    links = inertia_terms(body, kin, (data.A, data.b), data.dt, derivatives) + gravity_terms(
        body, kin, data.gravity, derivatives)
    joints = actuation_terms(body, q, data.q_ref, data.tau, derivatives)
    E = links.value + joints.value
    if not derivatives:
        return E
    wrench, X = pose_gradient_wrench(kin, links.G, links.f)
    g = generalized_gradient(body, kin, wrench) + joints.grad
    exact = hessian == "exact"
    H, D = generalized_hessian(body, kin, K=links.K, G=links.G if exact else None, f=links.f, X=X,
                               gn_diagonal=True)
    return E, g, H + joints.hess, D


def pbad_step(body, q_prev, q_cur, tau, dt, gravity, *, max_iter=50, tol=1e-9, hessian="exact",
              record_history=False, kin_prev=None, kin_cur=None):
    """One order-2 PBAD step for a batch: returns (q_next (B, nq), LMResult diagnostics).

    kin_prev / kin_cur: kinematics of q_prev / q_cur when the caller already has them (saves two passes).
    """
    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
    data = prepare_step(body, q_prev, q_cur, tau, dt, gravity, kin_prev, kin_cur)
    x0 = integrate(body, q_cur, difference(body, q_prev, q_cur))

    def fun(x, idx, derivatives):
        return step_energy(body, x, data.take(idx), derivatives, hessian)

    def retract(x, idx, dx):
        return integrate(body, x, dx)

    res = levenberg_marquardt(fun, retract, x0, max_iter=max_iter, tol=tol, record_history=record_history)
    return res.x, res
