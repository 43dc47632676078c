"""The numba kernel behind the step contract: ``step(model, state, tau, options, substeps=1) -> (State, StepInfo)``."""
from __future__ import annotations

import numpy as np

from ...energies import ContactMemory
from ...integrators.bdf2 import history
from ...integrators.state import StepInfo, check_substeps, with_contact_memory
from .step import finish_numba, forward_kinematics_numba, kernel_step

# Compiled kinematics.forward_kinematics (same Kinematics to round-off). Its compiled entry is generated into
# entries.py beside the step's; jit.PackageLocator keys both caches on every kernel source file.
forward_kinematics = forward_kinematics_numba


def step(model, state, tau, options, substeps=1, substep_kin=True):
    """The order-2 PBAD step with penalty contact and LM, compiled (same numbers as ``integrators.pbad.step`` to
    round-off): ``substeps`` steps under the same tau in ONE kernel call (each row's state and contact memory
    carried from substep to substep inside the kernel; the same numbers as that many single calls), which also
    leaves what the environment reads of the new state: its velocity, kinematics, Newton memory and, with contact,
    the new contact memory and the ground force the last step applied (what ``integrators.state.advance``
    computes in NumPy).
    StepInfo: iterations summed over the substeps, the last gradient norm, converged on every one, and for n > 1
    every substep's configuration, velocity and, with ``substep_kin``, kinematics (``substep_q`` (n, B, nq),
    ``substep_qd`` (n, B, nv), ``substep_kin``; None without)."""
    n = check_substeps(substeps)
    kin_prev = state.kin if n == 1 else None
    state = with_contact_memory(model, state, forward_kinematics)
    r = kernel_step(model.body, state.q_prev, state.q, tau, model.dt, model.forces, max_iter=options.max_iter,
                    tol=options.tol, hessian=options.hessian, contact=state.contact, finish=True, substeps=n,
                    newton=state.newton, newton_memory=options.newton_memory, substep_kin=substep_kin)
    return _stepped(model, state, r, n, kin_prev)


def bdf2_step(model, state, tau, options, substeps=1, substep_kin=True):
    """The BDF2 step (``integrators.bdf2.step``'s numbers to round-off) as :func:`step`: ``substeps`` steps in one
    kernel call. Rows reset since their last step first start their history (integrators/bdf2.py history) with
    one compiled order-2 step."""
    n = check_substeps(substeps)
    state = with_contact_memory(model, state, forward_kinematics)
    body, dt, forces = model.body, model.dt, model.forces

    def order2(q_prev, q, t, contact):
        return kernel_step(body, q_prev, q, t, dt, forces, max_iter=options.max_iter, tol=options.tol,
                           hessian=options.hessian, contact=contact).q

    (q_prev, q_back2, q_back3), _ = history(model, state, tau, order2)
    r = kernel_step(body, q_prev, state.q, tau, dt, forces, max_iter=options.max_iter, tol=options.tol,
                    hessian=options.hessian, contact=state.contact, finish=True, substeps=n,
                    substep_kin=substep_kin, back=np.stack([q_back2, q_back3], axis=1))
    return _stepped(model, state, r, n, state.kin if n == 1 else None, back=r.back)


def _stepped(model, state, r, n, kin_prev, **fields):
    """The State and StepInfo after the kernel call ``r`` (a KernelStep) of ``n`` substeps from ``state``."""
    contact, force = state.contact, state.force
    if r.contact is not None:
        contact, force = ContactMemory(*r.contact), r.force
    fresh = None if state.fresh is None else state.fresh & False
    time = state.time
    for _ in range(n):  # as n single steps add it
        time = time + model.dt
    new = state._replace(q=r.q, q_prev=r.q_prev, contact=contact, force=force, fresh=fresh, kin=r.kin,
                         kin_prev=kin_prev, time=time, velocity=r.qd, newton=r.newton, **fields)
    if n == 1:
        return new, StepInfo(r.iterations, r.grad_norm, r.converged)
    return new, StepInfo(r.iterations, r.grad_norm, r.converged, substep_q=r.substep_q, substep_qd=r.substep_qd,
                         substep_kin=r.substep_kin)


def finish(model, state):
    """``state`` with its velocity and kinematics filled in by the kernel's compiled code (the values a step leaves,
    for a state that did not come out of one: a reset, a restore)."""
    qd, kin = finish_numba(model.body, state.q_prev, state.q, model.dt, model.forces)
    return state._replace(velocity=qd, kin=kin)
