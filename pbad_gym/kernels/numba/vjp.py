"""Entry point of the compiled step adjoint (integrators.adjoint.step_vjp's semantics, adjoint.vjp_row per row)."""
from __future__ import annotations

import numpy as np

from ...energies import contact_state
from ...integrators.adjoint import StepCotangents, check_differentiable
from ...kinematics import forward_kinematics
from . import entries
from .step import _arr, _constants, _no_contact, _run, as_force_model, contact_fields


def step_vjp_numba(body, forces, dt, q_prev, q_cur, tau, q_next, gbar, contact=None):
    """Pull a cotangent ``gbar`` (B, nv) on a step's solution ``q_next`` (B, nq) back to its inputs, compiled:
    the same numbers as :func:`pbad_gym.integrators.adjoint.step_vjp` (to round-off) without rebuilding the step's
    data in NumPy.

    The step went from (q_prev, q_cur) (B, nq) under tau (B, nv) [N m or N] with time step dt [s] and the force
    model ``forces``; contact: the contact memory of q_cur it read (ContactMemory, or a dict with its fields; the
    cap of the cone's fixed point is recomputed from q_next; None: a fresh memory of q_cur). Returns
    (:class:`~pbad_gym.integrators.adjoint.StepCotangents` (tangent frames; anchor (B, S, 3) or None), λ (B, nv));
    float64 throughout. A row whose system is singular gives NaN."""
    forces = as_force_model(forces)
    check_differentiable(body, forces)
    dtype = np.float64
    B, nq, nv = np.shape(q_cur)[0], body.nq, body.nv
    q_prev, q_cur, q_next = (_arr(a, dtype, (B, nq)) for a in (q_prev, q_cur, q_next))
    tau, gbar = _arr(tau, dtype, (B, nv)), _arr(gbar, dtype, (B, nv))
    consts = _constants(body, forces, float(dt), None, None, "exact", dtype)
    m, fo, empty = consts
    n_s = m.contact_r.shape[0]
    if forces.contact is not None:
        if contact is None:
            contact = contact_state(body, forward_kinematics(body, q_cur), forces.contact, dt)
        P, active, normal, anchor = contact_fields(contact)
        P = _arr(P, dtype, (B, n_s, 3))
        memory = (P, np.ascontiguousarray(active, dtype=np.bool_), _arr(normal, dtype, (B, n_s)),
                  P if anchor is None else _arr(anchor, dtype, (B, n_s, 3)))
    else:
        memory = tuple(a[0] for a in _no_contact(empty, B, dtype))
    lam, g_prev, g_cur, g_tau = (np.empty((B, nv), dtype) for _ in range(4))
    g_anchor = np.empty((B, n_s, 3), dtype)
    _run(consts, B, 0, "vjp", entries.vjp_batch_serial, entries.vjp_batch,
         (*m, *fo, q_prev, q_cur, tau, q_next, *memory, gbar, lam, g_prev, g_cur, g_tau, g_anchor))
    return StepCotangents(g_prev, g_cur, g_tau, g_anchor if forces.contact is not None else None), lam
