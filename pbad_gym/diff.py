"""Gradients through the simulator: differentiable rollouts of the order-2 PBAD step in torch (docs/gradients.md).

Forward runs the NumPy engine on the host, row by row as :class:`~pbad_gym.Simulator` does; backward is one linear
solve per step and trajectory with the step's own Hessian (the implicit-function theorem,
:mod:`pbad_gym.integrators.adjoint`). Needs the ``rl`` extra (torch).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .arrays import to_numpy
from .energies.contact import contact_state
from .integrators.adjoint import check_differentiable, step_vjp
from .integrators.contact_adjoint import memory_vjp, points_to_tangent
from .integrators.pbad import prepare_step, solve_step_in_cone
from .integrators.state import with_kinematics
from .kinematics import coordinate_cotangent, forward_kinematics, tangent_cotangent

NONCONVERGED = ("raise", "mask")


@dataclasses.dataclass
class _Spec:
    body: object
    forces: object
    dt: float
    options: object
    nonconverged: str
    info: dict
    memory: object = None  # the contact memory of the next step's q_k (numpy), carried between steps


def _torch():
    try:
        import torch
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("pbad_gym.diff needs torch: pip install 'pbad_gym[rl]'") from err
    return torch


def rollout(sim, tau, q=None, q_prev=None, *, nonconverged="raise", info=None):
    """Configurations (T, B, nq) after each of T order-2 PBAD steps of ``sim`` under generalised forces ``tau``
    (T, B, nv) [N m or N], differentiable with respect to ``tau`` and the initial configurations.

    Starts from the Simulator's current state (q_k, q_{k−1} and its contact memory) unless torch tensors ``q`` and
    ``q_prev`` (B, nq) are given (make them require grad for initial-state gradients; the state velocity is
    (q ⊖ q_prev)/Δt; contact then starts fresh, every stick anchor at its sphere's centre, as after a reset). The
    Simulator itself is left unchanged. The result has tau's dtype and device; the physics runs in float64.
    With penalty contact the stick anchors of the contact memory are carried, and differentiated, from step to
    step; the active set and each anchor's stick / slip branch are those of the forward rollout.

    nonconverged: what a step whose solver did not converge does to the gradient — "raise" (RuntimeError naming
    the step and rows) or "mask" (no gradient flows through those rows of that step; ``info["masked"]`` counts
    them when a dict ``info`` is given).
    """
    torch = _torch()
    if nonconverged not in NONCONVERGED:
        raise ValueError(f"nonconverged must be one of {NONCONVERGED}, got {nonconverged!r}")
    if sim.integrator != "pbad" or sim.options.order != 2 or sim.contact_model != "penalty":
        raise ValueError("gradients need the order-2 PBAD step (integrator='pbad', order=2, contact_model='penalty')")
    check_differentiable(sim.body, sim.forces)
    if not torch.is_tensor(tau) or tau.ndim != 3 or tuple(tau.shape[1:]) != (sim.num_envs, sim.body.nv):
        raise ValueError(f"tau must be a torch tensor of shape (T, {sim.num_envs}, {sim.body.nv}), got "
                         f"{getattr(tau, 'shape', type(tau).__name__)}")
    if (q is None) != (q_prev is None):
        raise ValueError("pass both q and q_prev, or neither (then the Simulator's state is used)")
    like = dict(dtype=tau.dtype, device=tau.device)
    info = {} if info is None else info
    info.setdefault("masked", 0)
    spec = _Spec(sim.body, sim.forces, sim.dt, sim.options, nonconverged, info)
    anchor = None  # fresh contact memory: anchors at the centres of q
    if q is None:
        state = sim.state
        q = torch.as_tensor(np.array(to_numpy(state.q)), **like)
        q_prev = torch.as_tensor(np.array(to_numpy(state.q_prev)), **like)
        if sim.forces.contact is not None and state.contact is not None:
            spec.memory = tree_to_numpy(with_kinematics(sim.model, state).contact)
            anchor = torch.as_tensor(spec.memory.anchor, **like)
    out = []
    for t in range(tau.shape[0]):
        q_next, anchor = _Step.apply(q_prev, q, anchor, tau[t], spec, t)
        q_prev, q = q, q_next
        out.append(q_next)
    return torch.stack(out)


def tree_to_numpy(memory):
    """A ContactMemory with host arrays."""
    return type(memory)(*(np.array(to_numpy(a)) for a in memory))


def _host(x):
    return x.detach().cpu().numpy().astype(np.float64)


class _StepFunction:
    """Factory of the torch.autograd.Function (built on first use, so that importing pbad_gym needs no torch)."""

    cls = None

    @classmethod
    def get(cls):
        if cls.cls is None:
            torch = _torch()

            class Step(torch.autograd.Function):
                @staticmethod
                def forward(ctx, q_prev, q, anchor, tau, spec, t):
                    qp, qc, ta = _host(q_prev), _host(q), _host(tau)
                    body, params = spec.body, spec.forces.contact
                    memory = None
                    if params is not None:
                        kin = forward_kinematics(body, qc)
                        memory = contact_state(body, kin, params, spec.dt) if anchor is None else spec.memory
                        if anchor is not None:
                            memory = memory._replace(anchor=_host(anchor))
                    data = prepare_step(body, qp, qc, ta, spec.dt, spec.forces, contact=memory)
                    qn, res, data = solve_step_in_cone(body, data, spec.options)
                    bad = ~np.asarray(res.converged)
                    if bad.any() and spec.nonconverged == "raise":
                        rows = np.nonzero(bad)[0].tolist()
                        raise RuntimeError(f"step {t}: the solver did not converge on rows {rows} (gradient norm "
                                           f"{np.asarray(res.grad_norm)[bad].max():.3g}); pass nonconverged='mask' "
                                           "to cut their gradient instead, or tighten dt / raise max_iter")
                    like = dict(dtype=tau.dtype, device=tau.device)
                    anchor_next = None
                    if params is not None:
                        spec.memory = contact_state(body, forward_kinematics(body, qn), params, spec.dt,
                                                    prev=data.contact)
                        anchor_next = torch.as_tensor(spec.memory.anchor, **like)
                    ctx.step = (spec, data, qp, qc, qn, bad, anchor is None)
                    return torch.as_tensor(qn, **like), anchor_next

                @staticmethod
                def backward(ctx, grad, grad_anchor):
                    spec, data, qp, qc, qn, bad, fresh = ctx.step
                    body, params = spec.body, spec.forces.contact
                    gbar = tangent_cotangent(body, qn, _host(grad))
                    a_mem = 0.0
                    if params is not None and grad_anchor is not None:
                        g_mem, a_mem = memory_vjp(body, params, spec.dt, forward_kinematics(body, qn), data.contact,
                                                  _host(grad_anchor))
                        gbar = gbar + g_mem
                    ct, _ = step_vjp(body, data, qp, qn, gbar)
                    g_prev, g_cur, g_tau = ct.q_prev, ct.q_cur, ct.tau
                    g_anchor = None if ct.anchor is None else ct.anchor + a_mem
                    if g_anchor is not None:
                        g_anchor[..., 2] = 0.0  # the anchors' height is never read
                        if fresh:  # the anchors were the centres of q_k
                            g_cur = g_cur + points_to_tangent(body, data.kin_ref, g_anchor)
                    if bad.any():
                        spec.info["masked"] += int(bad.sum())
                        for a in (g_prev, g_cur, g_tau) + (() if g_anchor is None else (g_anchor,)):
                            a[bad] = 0.0
                    like = dict(dtype=grad.dtype, device=grad.device)
                    return (torch.as_tensor(coordinate_cotangent(body, qp, g_prev), **like),
                            torch.as_tensor(coordinate_cotangent(body, qc, g_cur), **like),
                            None if fresh or g_anchor is None else torch.as_tensor(g_anchor, **like),
                            torch.as_tensor(g_tau, **like), None, None)

            cls.cls = Step
        return cls.cls


class _Step:
    @staticmethod
    def apply(*args):
        return _StepFunction.get().apply(*args)
