"""The numba kernel behind the step contract: ``step(model, state, tau, options) -> (State, StepInfo)``."""
from __future__ import annotations

import numpy as np
from numba import njit

from ...energies import contact_state
from ...integrators.state import StepInfo, advance
from ...kinematics import Kinematics
from . import core
from .model import kernel_model
from .step import pbad_step_numba


@njit(cache=True)
def _fk_rows(m, q, R, t, w, v):
    L = R.shape[1]
    Rj = np.empty((L, 3, 3), q.dtype)
    R2 = np.empty((L, 3, 3), q.dtype)
    for b in range(q.shape[0]):
        core.forward_kinematics(m, q[b], R[b], t[b], w[b], v[b], Rj, R2)


def forward_kinematics(body, q):
    """Compiled :func:`pbad_gym.kinematics.forward_kinematics` of q (B, nq): the same Kinematics to round-off."""
    q = np.ascontiguousarray(q)
    B, L, nv = q.shape[0], body.L, body.nv
    R, t = np.empty((B, L, 3, 3), q.dtype), np.empty((B, L, 3), q.dtype)
    w, v = np.empty((B, nv, 3), q.dtype), np.empty((B, nv, 3), q.dtype)
    _fk_rows(kernel_model(body, q.dtype), q, R, t, w, v)
    return Kinematics(R, t, w, v)


def step(model, state, tau, options):
    """The order-2 PBAD step with penalty contact and LM, compiled (same numbers as ``integrators.pbad.step`` to
    round-off). The kernel needs no kinematics: they are computed (compiled) only where the contact memory needs
    them and otherwise left for the next :meth:`Simulator.kinematics` call."""
    body, contact = model.body, state.contact
    if model.forces.contact is not None and contact is None:
        kin = state.kin if state.kin is not None else forward_kinematics(body, state.q)
        contact = contact_state(body, kin, model.forces.contact, model.dt)
    q_next, iterations, grad_norm, converged = pbad_step_numba(
        body, state.q_prev, state.q, tau, model.dt, model.forces, max_iter=options.max_iter, tol=options.tol,
        hessian=options.hessian, contact=contact)
    lazy = model.forces.contact is None
    new = advance(model, state._replace(contact=contact), state.q, q_next,
                  kinematics=None if lazy else forward_kinematics)
    return new, StepInfo(iterations, grad_norm, converged)
