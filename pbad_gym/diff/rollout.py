"""Differentiable rollouts of a Simulator's order-2 PBAD step in torch."""
from __future__ import annotations

import numpy as np

from ..arrays import to_numpy, tree_map
from ..integrators.adjoint import check_differentiable
from ..integrators.state import with_kinematics
from .functions import StepSpec, functions, torch_module


def check_simulator(sim):
    """ValueError naming what a Simulator needs for gradients: the order-2 PBAD step with penalty contact (if any)
    that the adjoint covers."""
    if sim.integrator != "pbad" or sim.options.order != 2 or sim.contact_model != "penalty":
        raise ValueError("gradients need the order-2 PBAD step (integrator='pbad', order=2, contact_model='penalty')")
    check_differentiable(sim.body, sim.forces)


def rollout(sim, tau, q=None, q_prev=None, *, nonconverged="raise", info=None):
    """Configurations (T, B, nq) after each of T order-2 PBAD steps of ``sim`` under generalised forces ``tau``
    (T, B, nv) [N m or N], differentiable with respect to ``tau`` and the initial configurations.

    Starts from the Simulator's current state (q_k, q_{k−1} and its contact memory) unless torch tensors ``q`` and
    ``q_prev`` (B, nq) are given (make them require grad for initial-state gradients; the state velocity is
    (q ⊖ q_prev)/Δt; contact then starts fresh, every stick anchor at its sphere's centre, as after a reset). The
    Simulator itself is left unchanged. The result has tau's dtype and device; the physics runs in float64 on the
    host. With penalty contact the stick anchors of the contact memory are carried, and differentiated, from step
    to step; the active set and each anchor's stick / slip branch are those of the forward rollout.

    nonconverged: what a step whose solver did not converge does to the gradient — "raise" (RuntimeError naming
    the step and rows) or "mask" (no gradient flows through those rows of that step; ``info["masked"]`` counts
    them when a dict ``info`` is given).
    """
    torch = torch_module()
    spec = StepSpec.of(sim, nonconverged, info)
    check_simulator(sim)
    if not torch.is_tensor(tau) or tau.ndim != 3 or tuple(tau.shape[1:]) != (sim.num_envs, sim.body.nv):
        raise ValueError(f"tau must be a torch tensor of shape (T, {sim.num_envs}, {sim.body.nv}), got "
                         f"{getattr(tau, 'shape', type(tau).__name__)}")
    if (q is None) != (q_prev is None):
        raise ValueError("pass both q and q_prev, or neither (then the Simulator's state is used)")
    like = dict(dtype=tau.dtype, device=tau.device)
    anchor = None  # fresh contact memory: anchors at the centres of q
    if q is None:
        state = sim.state
        q = torch.as_tensor(np.array(to_numpy(state.q)), **like)
        q_prev = torch.as_tensor(np.array(to_numpy(state.q_prev)), **like)
        if sim.forces.contact is not None and state.contact is not None:
            memory = with_kinematics(sim.model, state).contact
            spec.memory = tree_map(lambda a: np.array(to_numpy(a)), memory)
            anchor = torch.as_tensor(spec.memory.anchor, **like)
    step = functions().step
    out = []
    for t in range(tau.shape[0]):
        q_next, anchor = step(q_prev, q, anchor, tau[t], spec, t)
        q_prev, q = q, q_next
        out.append(q_next)
    return torch.stack(out)
