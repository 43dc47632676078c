"""PBAD order-2 step (DESIGN.md §4): q_{k+1} = argmin E(q) with

    E(q) = 1/(2Δt²) ∫ρ ‖P(q) − 2P(q_k) + P(q_{k−1})‖² + U(q) − τᵀ(q ⊖ q_k)

solved by batched Levenberg-Marquardt from the warm start q_k ⊕ (q_k ⊖ q_{k−1}).
"""
from __future__ import annotations

from typing import NamedTuple

from ..energies import actuation_terms, gravity_terms, inertia_targets, inertia_terms
from ..kinematics import (difference, forward_kinematics, generalized_gradient, generalized_hessian, integrate,
                          pose_gradient_wrench, world_moments)
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


class StepContext(NamedTuple):
    """What the Hessian of the step energy needs from the gradient pass at the same configurations."""

    kin: object
    links: object
    joints: object
    X: object
    dt: float
    hessian: str


def step_energy_grad(body, q, data, hessian="exact"):
    """Step energy E (B,) and gradient g (B, nv) at q (B, nq), plus the context for :func:`step_hessian`."""
    kin = forward_kinematics(body, q)
    links = inertia_terms(body, kin, (data.A, data.b), data.dt, derivatives=True, gauss_newton=False) + \
        gravity_terms(body, kin, data.gravity, derivatives=True)
    joints = actuation_terms(body, q, data.q_ref, data.tau, derivatives=True)
    wrench, X = pose_gradient_wrench(kin, links.G, links.f)
    g = generalized_gradient(body, kin, wrench) + joints.grad
    return links.value + joints.value, g, StepContext(kin, links, joints, X, data.dt, hessian)


def step_hessian(body, ctx):
    """Hessian (B, nv, nv) ("exact" or "gauss_newton": mass matrix / Δt² plus joint-space Hessians) and the
    diagonal of its Gauss-Newton part D (B, nv)."""
    K = world_moments(body, ctx.kin).scaled(1.0 / (ctx.dt * ctx.dt))  # the inertia term's Gauss-Newton form
    exact = ctx.hessian == "exact"
    H, D = generalized_hessian(body, ctx.kin, K=K, G=ctx.links.G if exact else None, f=ctx.links.f, X=ctx.X,
                               gn_diagonal=True)
    return H + ctx.joints.hess, D


def step_energy(body, q, data, derivatives=False, hessian="exact"):
    """The order-2 step energy at q (B, nq) for ``data``: E (B,), or with ``derivatives``
    (E, g (B, nv), H (B, nv, nv), D (B, nv)) (see :func:`step_hessian`)."""
    if not derivatives:
        kin = forward_kinematics(body, q)
        return (inertia_terms(body, kin, (data.A, data.b), data.dt, derivatives=False).value
                + gravity_terms(body, kin, data.gravity, derivatives=False).value
                + actuation_terms(body, q, data.q_ref, data.tau, derivatives=False).value)
    E, g, ctx = step_energy_grad(body, q, data, hessian)
    H, D = step_hessian(body, ctx)
    return E, g, H, D


def pbad_step(body, q_prev, q_cur, tau, dt, gravity, *, max_iter=50, tol=1e-9, hessian="exact",
              record_history=False, kin_prev=None, kin_cur=None):
    """One order-2 PBAD step for a batch: returns (q_next (B, nq), LMResult diagnostics).

    kin_prev / kin_cur: kinematics of q_prev / q_cur when the caller already has them (saves two passes).
    """
    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
    data = prepare_step(body, q_prev, q_cur, tau, dt, gravity, kin_prev, kin_cur)
    x0 = integrate(body, q_cur, difference(body, q_prev, q_cur))
    res = levenberg_marquardt(
        lambda x, idx: step_energy_grad(body, x, data.take(idx), hessian),
        lambda ctx: step_hessian(body, ctx),
        lambda x, idx, dx: integrate(body, x, dx),
        x0, max_iter=max_iter, tol=tol, record_history=record_history)
    return res.x, res
