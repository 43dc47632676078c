"""Entry point of the compiled order-2 PBAD step (the numba implementation of the step contract)."""
from __future__ import annotations

import numpy as np

from ...energies import ForceModel, contact_state
from ...kinematics import Kinematics, forward_kinematics
from . import core, threads
from .model import kernel_forces, kernel_model

HESSIANS = ("exact", "gauss_newton")
SERIAL_BELOW = 4  # batches smaller than this run on the calling thread (no thread-pool launch)
_FORCES: dict = {}


def supports(body, forces=None, *, integrator="pbad", order=2, optimizer="lm", contact_model="penalty",
             hessian="exact", dtype=np.float64, device="cpu"):
    """None when :func:`pbad_step_numba` handles this case, else a one-line reason for the NumPy fallback."""
    if device != "cpu":
        return f"device={device!r}: the numba kernel runs on the CPU"
    if integrator != "pbad":
        return f"integrator={integrator!r} (explicit baseline) is not compiled"
    if order != 2:
        return f"collocation order {order} is not compiled"
    if optimizer != "lm":
        return f"optimizer={optimizer!r} is not compiled (only 'lm')"
    if contact_model != "penalty":
        return f"contact_model={contact_model!r} is not compiled (only 'penalty')"
    if hessian not in HESSIANS:
        return f"hessian={hessian!r} is unknown"
    if np.dtype(dtype) not in (np.float32, np.float64):
        return f"dtype={np.dtype(dtype)} is not compiled (float32, float64)"
    return None


def as_force_model(forces):
    """A ForceModel as is; a gravity vector (3,) as gravity and actuation only (integrators.pbad's rule)."""
    if isinstance(forces, ForceModel):
        return forces
    return ForceModel(gravity=np.asarray(forces, dtype=float).reshape(3))


def contact_fields(contact):
    """(P, active, normal, anchor) of a lagged contact memory given as a dict or a NamedTuple with those field
    names; anchor may be missing (viscous friction)."""
    get = contact.get if isinstance(contact, dict) else (lambda k, d=None: getattr(contact, k, d))
    return get("P"), get("active"), get("normal"), get("anchor")


def _constants(body, forces, dt, max_iter, tol, hessian, dtype):
    """(KernelModel, KernelForces, empty contact arrays by batch size) of one simulation's options, memoised by
    identity (a stepping loop pays one dict lookup per call)."""
    key = (id(forces), id(body), dt, max_iter, tol, hessian, dtype)
    hit = _FORCES.get(key)
    if hit is not None and hit[0] is forces and hit[1] is body:
        return hit[2]
    if len(_FORCES) > 64:
        _FORCES.clear()
    fo = kernel_forces(body, forces, dt, max_iter=max_iter, tol=tol, hessian=hessian, dtype=dtype)
    consts = (kernel_model(body, dtype), fo, {})
    _FORCES[key] = (forces, body, consts)
    return consts


def _no_contact(empty, B, dtype):
    """Zero-sphere contact arrays (P, active, normal) for batch size B (cached: they are never written)."""
    if B not in empty:
        empty[B] = (np.zeros((B, 0, 3), dtype), np.zeros((B, 0), np.bool_), np.zeros((B, 0), dtype))
    return empty[B]


def _arr(a, dtype, shape=None):
    a = np.ascontiguousarray(a, dtype=dtype)
    if shape is not None and a.shape != shape:
        raise ValueError(f"expected an array of shape {shape}, got {a.shape}")
    return a


def pbad_step_numba(body, q_prev, q_cur, tau, dt, forces, *, max_iter, tol, hessian="exact", contact=None):
    """Same semantics as integrators.pbad.pbad_step(..., optimizer="lm"): returns
    (q_next (B, nq), iterations (B,) int64, grad_norm (B,), converged (B,) bool).

    body: a Body; q_prev, q_cur (B, nq), tau (B, nv) NumPy arrays (float64 or float32; q_cur's dtype is the
    kernel's); forces: a ForceModel or a gravity vector; max_iter (None: 50), tol (None: 1e-9 in float64, 1e-5 in
    float32); contact: the lagged contact memory of q_cur (energies.contact_state's dict, or a NamedTuple with its
    fields), computed here when the force model has contact and none is given.
    """
    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
    if not isinstance(forces, ForceModel):
        forces = as_force_model(forces)
    dtype = q_cur.dtype
    if dtype != np.float64 and dtype != np.float32:
        raise ValueError(f"q_cur must be float32 or float64, got {dtype}")
    max_iter = 50 if max_iter is None else int(max_iter)
    tol = (1e-9 if dtype == np.float64 else 1e-5) if tol is None else float(tol)
    B = q_cur.shape[0]
    q_cur = _arr(q_cur, dtype, (B, body.nq))
    q_prev = _arr(q_prev, dtype, (B, body.nq))
    tau = _arr(tau, dtype, (B, body.nv))
    m, fo, empty = _constants(body, forces, float(dt), max_iter, tol, hessian, dtype)
    n_s = m.sph_r.shape[0]
    if forces.contact is not None:
        if contact is None:
            contact = contact_state(body, forward_kinematics(body, q_cur), forces.contact, dt)
        P, active, normal, anchor = contact_fields(contact)
        cP = _arr(P, dtype, (B, n_s, 3))
        cact = np.ascontiguousarray(active, dtype=np.bool_)
        cnorm = _arr(normal, dtype, (B, n_s))
        canc = cP if anchor is None else _arr(anchor, dtype, (B, n_s, 3))
    else:
        cP, cact, cnorm = _no_contact(empty, B, dtype)
        canc = cP
    out_q = np.empty((B, body.nq), dtype)
    out_it = np.empty(B, np.int64)
    out_gn = np.empty(B, dtype)
    out_conv = np.empty(B, np.bool_)
    nthreads = 1 if B < SERIAL_BELOW else threads.num_threads()
    if nthreads == 1:
        core.step_batch_serial(*m, *fo, q_prev, q_cur, tau, cP, cact, cnorm, canc, out_q, out_it, out_gn, out_conv)
    else:
        core.step_batch(*m, *fo, q_prev, q_cur, tau, cP, cact, cnorm, canc, out_q, out_it, out_gn, out_conv,
                        min(B, nthreads))
    return out_q, out_it, out_gn, out_conv


def forward_kinematics_numba(body, q):
    """kinematics.forward_kinematics by the kernel's compiled code: Kinematics(R, t, w, v) of q (B, nq) (NumPy,
    float32 or float64); what the step contract's ``advance`` computes after every step, without NumPy's per-call
    overhead at small batches."""
    q = np.ascontiguousarray(q)
    dtype, B = q.dtype, q.shape[0]
    m = kernel_model(body, dtype)
    R, t = np.empty((B, body.L, 3, 3), dtype), np.empty((B, body.L, 3), dtype)
    w, v = np.empty((B, body.nv, 3), dtype), np.empty((B, body.nv, 3), dtype)
    core.kinematics_batch(*m, q, R, t, w, v)
    return Kinematics(R, t, w, v)
