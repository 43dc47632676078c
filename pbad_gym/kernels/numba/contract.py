"""The numba kernel as an implementation of the step contract (DESIGN.md §2): ``step(model, state, tau, options)
-> (State, StepInfo)``, interchangeable with ``integrators.pbad.step`` for the cases :func:`.supports` accepts."""
from __future__ import annotations

from ...integrators.state import StepInfo, advance, with_kinematics
from .step import pbad_step_numba


def step(model, state, tau, options):
    """The order-2 PBAD step by the compiled kernel: (State, StepInfo) after one step under tau (B, nv)."""
    state = with_kinematics(model, state)
    q_next, iterations, grad_norm, converged = pbad_step_numba(
        model.body, state.q_prev, state.q, tau, model.dt, model.forces, max_iter=options.max_iter, tol=options.tol,
        hessian=options.hessian, contact=state.contact)
    return advance(model, state, state.q, q_next), StepInfo(iterations, grad_norm, converged)
