"""The numba kernel behind the step contract: ``step(model, state, tau, options) -> (State, StepInfo)``."""
from __future__ import annotations

from ...energies import ContactMemory
from ...integrators.state import EnergyTerms, StepInfo, with_contact_memory
from .constants import T_ACTUATION, T_COM, T_CONTACT, T_KINETIC, T_LIMITS
from .step import finish_numba, forward_kinematics_numba, kernel_step

# Compiled kinematics.forward_kinematics (same Kinematics to round-off). Its compiled entry is generated into
# entries.py beside the step's; jit.PackageLocator keys both caches on every kernel source file.
forward_kinematics = forward_kinematics_numba


def terms_of(out):
    """:class:`EnergyTerms` (views) of the kernel's terms output (B, N_TERMS), or (n, B, N_TERMS) for n steps."""
    return EnergyTerms(out[..., T_KINETIC], out[..., T_ACTUATION], out[..., T_LIMITS], out[..., T_CONTACT],
                       out[..., T_COM:T_COM + 3])


def step(model, state, tau, options):
    """The order-2 PBAD step with penalty contact and LM, compiled (same numbers as ``integrators.pbad.step`` to
    round-off), as ONE kernel call that also leaves what the environment reads of the new state: its velocity,
    kinematics, energy terms (``model.gauge``'s actuators) and, with contact, the new contact memory and the
    ground force the step applied (what ``integrators.state.advance`` computes in NumPy)."""
    new, info, _ = substeps(model, state, tau, options, 1, kin_prev=state.kin)
    return new, info


def substeps(model, state, tau, options, n, kin_prev=None):
    """``n`` steps under the same tau in ONE kernel call (the same numbers as n calls of :func:`step`): the new
    State (its caches those of the last step; kin_prev = ``kin_prev``, the kinematics of the new q_prev when the
    caller has them), the StepInfo (iterations summed, the last gradient norm, converged on every step) and the
    EnergyTerms of every step (fields with a leading axis of n, for the divergence guard's per-step check; None
    for n = 1, whose terms are the new state's own)."""
    state = with_contact_memory(model, state, forward_kinematics)
    r = kernel_step(model.body, state.q_prev, state.q, tau, model.dt, model.forces, max_iter=options.max_iter,
                    tol=options.tol, hessian=options.hessian, contact=state.contact, finish=True, gauge=model.gauge,
                    substeps=n)
    contact, force = state.contact, state.force
    if r.contact is not None:
        contact, force = ContactMemory(*r.contact), r.force
    fresh = None if state.fresh is None else state.fresh & False
    time = state.time
    for _ in range(n):  # as n single steps add it
        time = time + model.dt
    new = state._replace(q=r.q, q_prev=r.q_prev, contact=contact, force=force, fresh=fresh, kin=r.kin,
                         kin_prev=kin_prev, time=time, velocity=r.qd, terms=terms_of(r.terms))
    return new, StepInfo(r.iterations, r.grad_norm, r.converged), None if n == 1 else terms_of(r.substep_terms)


def finish(model, state):
    """``state`` with its velocity, kinematics and energy terms filled in by the kernel's compiled code (the
    values a step leaves, for a state that did not come out of one: a reset, a restore)."""
    qd, kin, terms = finish_numba(model.body, state.q_prev, state.q, model.dt, model.forces, gauge=model.gauge)
    return state._replace(velocity=qd, kin=kin, terms=terms_of(terms))
