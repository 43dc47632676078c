"""The fused GPU kernel behind the step contract: ``step(model, state, tau, options, substeps=1) -> (State, StepInfo)``
(one launch per substep)."""
from __future__ import annotations

from ...energies import ContactMemory
from ...integrators.state import StepInfo, contract_step, order2_state_velocity, with_contact_memory
from ...kinematics import forward_kinematics
from .launch import finish_cuda, kernel_step_cuda


@contract_step(order2_state_velocity)
def step(model, state, tau, options):
    """The order-2 PBAD step with penalty contact and LM as ONE kernel launch, one thread per trajectory (same
    numbers as ``kernels.numba.contract.step`` to round-off), leaving what the environment reads of the new state
    (velocity, kinematics, contact memory, ground force and Newton memory) on the device beside q."""
    state = with_contact_memory(model, state, forward_kinematics)
    r = kernel_step_cuda(model.body, state.q_prev, state.q, tau, model.dt, model.forces, max_iter=options.max_iter,
                         tol=options.tol, hessian=options.hessian, contact=state.contact, finish=True,
                         newton=state.newton, newton_memory=options.newton_memory)
    contact, force = state.contact, state.force
    if r.contact is not None:
        contact, force = ContactMemory(*r.contact), r.force
    fresh = None if state.fresh is None else state.fresh & False
    new = state._replace(q=r.q, q_prev=state.q, contact=contact, force=force, fresh=fresh, kin=r.kin,
                         kin_prev=state.kin, time=state.time + model.dt, velocity=r.qd, newton=r.newton)
    return new, StepInfo(r.iterations, r.grad_norm, r.converged)


def finish(model, state):
    """``state`` with its velocity and kinematics filled in by the GPU kernel (the values a step leaves, for a state
    that did not come out of one: a reset, a restore)."""
    qd, kin = finish_cuda(model.body, state.q_prev, state.q, model.dt, model.forces)
    return state._replace(velocity=qd, kin=kin)
