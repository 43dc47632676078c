"""The numba kernel behind the step contract: ``step(model, state, tau, options) -> (State, StepInfo)``."""
from __future__ import annotations

from ...integrators.state import StepInfo, advance, with_contact_memory
from .step import forward_kinematics_numba, pbad_step_numba

# Compiled kinematics.forward_kinematics (same Kinematics to round-off). Its compiled entry lives in core.py beside
# the step, so that an edit of the kernel's kinematics invalidates both caches (numba checks only the timestamp of
# the file that defines a cached entry point, not of the functions it calls).
forward_kinematics = forward_kinematics_numba


def step(model, state, tau, options):
    """The order-2 PBAD step with penalty contact and LM, compiled (same numbers as ``integrators.pbad.step`` to
    round-off). The kernel needs no kinematics: they are computed (compiled) only where the contact memory needs
    them and otherwise left for the next :meth:`Simulator.kinematics` call."""
    state = with_contact_memory(model, state, forward_kinematics)
    q_next, iterations, grad_norm, converged = pbad_step_numba(
        model.body, state.q_prev, state.q, tau, model.dt, model.forces, max_iter=options.max_iter, tol=options.tol,
        hessian=options.hessian, contact=state.contact)
    lazy = model.forces.contact is None
    new = advance(model, state, state.q, q_next, kinematics=None if lazy else forward_kinematics)
    return new, StepInfo(iterations, grad_norm, converged)
