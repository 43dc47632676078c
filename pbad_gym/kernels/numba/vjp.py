"""Entry points of the compiled step adjoint (integrators.adjoint.step_vjp's semantics; backward.backward_row per
row): the step's vector-Jacobian product in tangent frames, and a differentiable step's whole backward in
configuration coordinates (what diff.functions' Step calls)."""
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
    r = _backward(body, forces, dt, q_prev, q_cur, tau, q_next, gbar, None, contact, coords=False, fresh=False)
    return r[0], r[1]


def step_backward_numba(body, forces, dt, q_prev, q_cur, tau, q_next, grad_q, grad_anchor=None, contact=None,
                        fresh=False):
    """A differentiable step's whole backward in one compiled call: the cotangent ``grad_q`` (B, nq) on q_next's
    coordinates and ``grad_anchor`` (B, S, 3) on the anchors of the step's new contact memory (None: zero) pulled
    back through the anchor update and the step (:func:`step_vjp_numba`'s step and ``contact``) to
    :class:`~pbad_gym.integrators.adjoint.StepCotangents` on the coordinates of q_prev and q_cur (B, nq), on tau
    (B, nv) and on the anchors of ``contact`` (B, S, 3), heights zero, or None without contact. ``fresh``: those
    anchors were the sphere centres of q_cur (a fresh memory), so their cotangent is added to q_cur's as well."""
    return _backward(body, forces, dt, q_prev, q_cur, tau, q_next, grad_q, grad_anchor, contact, coords=True,
                     fresh=fresh)[0]


def _backward(body, forces, dt, q_prev, q_cur, tau, q_next, gin, abar, contact, coords, fresh):
    """(StepCotangents, λ (B, nv)) of one kernel call (entries.vjp_batch)."""
    forces = as_force_model(forces)
    dtype = np.float64
    consts = _constants(body, forces, float(dt), None, None, "exact", dtype)
    m, fo, empty = consts
    if "differentiable" not in empty:  # checked once per simulation's options
        check_differentiable(body, forces)
        empty["differentiable"] = True
    B, nq, nv = np.shape(q_cur)[0], body.nq, body.nv
    q_prev, q_cur, q_next = (_arr(a, dtype, (B, nq)) for a in (q_prev, q_cur, q_next))
    tau, gin = _arr(tau, dtype, (B, nv)), _arr(gin, dtype, (B, nq if coords else nv))
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
    abar = np.zeros((B, n_s, 3), dtype) if abar is None else _arr(abar, dtype, (B, n_s, 3))
    width = nq if coords else nv
    lam, g_tau = np.empty((B, nv), dtype), np.empty((B, nv), dtype)
    g_prev, g_cur = np.empty((B, width), dtype), np.empty((B, width), dtype)
    g_anchor = np.empty((B, n_s, 3), dtype)
    _run(consts, B, 0, "vjp", entries.vjp_batch_serial, entries.vjp_batch,
         (*m, *fo, q_prev, q_cur, tau, q_next, *memory, gin, abar, int(coords), int(fresh), lam, g_prev, g_cur, g_tau,
          g_anchor))
    return StepCotangents(g_prev, g_cur, g_tau, g_anchor if forces.contact is not None else None), lam
