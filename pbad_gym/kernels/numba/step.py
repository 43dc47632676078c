"""Entry point of the compiled order-2 PBAD step (the numba implementation of the step contract)."""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ...energies import ForceModel, contact_state
from ...integrators.options import SolverOptions
from ...kinematics import Kinematics, forward_kinematics
from . import entries, threads
from .constants import N_TERMS, step_constants

HESSIANS = ("exact", "gauss_newton")
SERIAL_BELOW = 4  # batches smaller than this run on the calling thread (no thread-pool launch)
_FORCES: dict = {}
_NO_GAUGE: dict = {}


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
    if isinstance(contact, dict):
        return contact.get("P"), contact.get("active"), contact.get("normal"), contact.get("anchor")
    return contact.P, contact.active, contact.normal, getattr(contact, "anchor", None)


def body_arrays(body, dtype):
    """``body``'s BodyArrays as NumPy arrays in ``dtype``: the very object StepModel.arrays holds (cached on the
    body)."""
    return body.arrays(np, dtype)


def _constants(body, forces, dt, max_iter, tol, hessian, dtype):
    """(BodyArrays, StepConstants, a dict of cached work arrays) of one simulation's options, memoised by identity
    (a stepping loop pays one dict lookup per call); max_iter / tol None take SolverOptions' defaults."""
    key = (id(forces), id(body), dt, max_iter, tol, hessian, dtype)
    hit = _FORCES.get(key)
    if hit is not None and hit[0] is forces and hit[1] is body:
        return hit[2]
    if len(_FORCES) > 64:
        _FORCES.clear()
    options = SolverOptions.create(dtype, max_iter=max_iter, tol=tol, hessian=hessian)
    consts = (body_arrays(body, dtype), step_constants(body, forces, dt, options, dtype), {})
    _FORCES[key] = (forces, body, consts)
    return consts


def _no_contact(empty, B, dtype):
    """Zero-sphere contact memory slots (2, B, 0, …) for batch size B (cached: the kernel never writes them)."""
    if B not in empty:
        empty[B] = (np.zeros((2, B, 0, 3), dtype), np.zeros((2, B, 0), np.bool_), np.zeros((2, B, 0), dtype),
                    np.zeros((2, B, 0, 3), dtype))
    return empty[B]


def _arr(a, dtype, shape=None):
    """``a`` as a C-contiguous NumPy array of ``dtype`` (itself when it already is one) of ``shape``."""
    if not (type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous):
        a = np.ascontiguousarray(a, dtype=dtype)
    if shape is not None and a.shape != shape:
        raise ValueError(f"expected an array of shape {shape}, got {a.shape}")
    return a


class KernelStep(NamedTuple):
    """One compiled call's results, each batched (B first), NumPy in the kernel's dtype: q (B, nq), iterations
    (B,) int64 (summed over the substeps), grad_norm (B,) (the last substep's), converged (B,) bool (on every
    substep); with ``finish``: qd (B, nv) = (q ⊖ q_prev)/Δt, kin (the Kinematics of q), terms (B, N_TERMS)
    (model.T_* columns: the divergence guard's energy terms), with contact the new ContactMemory fields (P, active,
    normal, anchor) as ``contact`` and the ground force (B, S, 3) [N] the last substep applied as ``force`` (else
    None), q_prev (B, nq): the configuration before the last substep (q_cur for one step), and substep_terms
    (n, B, N_TERMS): every substep's energy terms (terms is the last)."""

    q: np.ndarray
    iterations: np.ndarray
    grad_norm: np.ndarray
    converged: np.ndarray
    qd: np.ndarray = None
    kin: Kinematics = None
    terms: np.ndarray = None
    contact: tuple = None
    force: np.ndarray = None
    q_prev: np.ndarray = None
    substep_terms: np.ndarray = None


def _empty_outputs(consts, dtype):
    """Zero-row stand-ins for the finish outputs of one step (same dtypes and ranks as the real ones, so that both
    calls hit one compiled specialisation; the kernel does not touch them when ``want`` is 0): qd, R, t, w, v,
    TERMS (1, 0, N_TERMS), force."""
    key = ("empty", np.dtype(dtype).str)
    if key not in consts[2]:
        m = consts[0]
        L, nv, S = m.mass.shape[0], m.dof_link.shape[0], m.contact_r.shape[0]
        consts[2][key] = (np.zeros((0, nv), dtype), np.zeros((0, L, 3, 3), dtype), np.zeros((0, L, 3), dtype),
                          np.zeros((0, nv, 3), dtype), np.zeros((0, nv, 3), dtype), np.zeros((1, 0, N_TERMS), dtype),
                          np.zeros((0, S, 3), dtype))
    return consts[2][key]


def _gauge_arrays(gauge, dtype):
    """(actuated DOFs (n,) int64, gear (n,) in the kernel's dtype) of an energy gauge (an object with fields
    ``actuated`` and ``gear``, e.g. integrators.state.EnergyGauge); None measures no actuators (c = 0)."""
    if gauge is None:
        key = np.dtype(dtype).str
        if key not in _NO_GAUGE:
            _NO_GAUGE[key] = (np.zeros(0, np.int64), np.zeros(0, dtype))
        return _NO_GAUGE[key]
    gear = gauge.gear
    return gauge.actuated, (gear if gear.dtype == dtype else gear.astype(dtype))


def kernel_step(body, q_prev, q_cur, tau, dt, forces, *, max_iter, tol, hessian="exact", contact=None, finish=False,
                gauge=None, substeps=1):
    """The compiled step (:func:`pbad_step_numba`'s semantics) as a :class:`KernelStep`; with ``finish`` also what
    the environment reads of the new state, from the same call (velocity, kinematics, the guard's energy terms
    for the DOFs and gears of ``gauge`` — an integrators.state.EnergyGauge or None —, new contact memory and
    force), and then ``substeps`` steps under the same tau in that one call (each row's state and contact memory
    carried from substep to substep inside the kernel; the same numbers as that many single calls). Inputs that
    are already C-contiguous arrays of the kernel's dtype and shape are passed as they are."""
    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
    if not isinstance(forces, ForceModel):
        forces = as_force_model(forces)
    n = int(substeps)
    if n < 1 or (n > 1 and not finish):
        raise ValueError(f"substeps must be a positive integer (more than 1 needs finish=True), got {substeps!r}")
    dtype = q_cur.dtype
    if dtype != np.float64 and dtype != np.float32:
        raise ValueError(f"q_cur must be float32 or float64, got {dtype}")
    B, nq, nv = q_cur.shape[0], body.nq, body.nv
    tau = _arr(tau, dtype, (B, nv))
    consts = _constants(body, forces, float(dt), max_iter, tol, hessian, dtype)
    m, fo, empty = consts
    n_s = m.contact_r.shape[0]
    has_contact = forces.contact is not None
    # rotating buffers (batch.step_rows): the state in Q, the contact memory in two slots
    Q = np.empty((3, B, nq), dtype)
    Q[0], Q[1] = _arr(q_prev, dtype, (B, nq)), _arr(q_cur, dtype, (B, nq))
    if has_contact:
        CP, CACT = np.empty((2, B, n_s, 3), dtype), np.empty((2, B, n_s), np.bool_)
        CNORM, CANC = np.empty((2, B, n_s), dtype), np.empty((2, B, n_s, 3), dtype)
        if contact is None:
            contact = contact_state(body, forward_kinematics(body, Q[1]), forces.contact, dt)
        P, active, normal, anchor = contact_fields(contact)
        CP[0], CACT[0], CNORM[0] = _arr(P, dtype, (B, n_s, 3)), np.asarray(active), _arr(normal, dtype, (B, n_s))
        CANC[0] = CP[0] if anchor is None else _arr(anchor, dtype, (B, n_s, 3))
    else:
        CP, CACT, CNORM, CANC = _no_contact(empty, B, dtype)
    IT, GN, CONV = np.empty((n, B), np.int64), np.empty((n, B), dtype), np.empty((n, B), np.bool_)
    act, gear = _gauge_arrays(gauge, dtype)
    if finish:
        L = body.L
        outs = (np.empty((B, nv), dtype), np.empty((B, L, 3, 3), dtype), np.empty((B, L, 3), dtype),
                np.empty((B, nv, 3), dtype), np.empty((B, nv, 3), dtype), np.empty((n, B, N_TERMS), dtype),
                np.empty((B, n_s, 3), dtype))
    else:
        outs = _empty_outputs(consts, dtype)
    torch_threads = threads.torch_threads()  # before numba's pool starts or launches (both set OpenMP's count)
    parallel, key = _launch(consts, B, n, finish)
    t0 = time.perf_counter()
    if not parallel:
        entries.step_batch_serial(*m, *fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, int(finish), *outs)
    else:
        entries.step_batch(*m, *fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, int(finish), *outs,
                        min(B, threads.num_threads()))
    threads.restore_torch_threads(torch_threads)
    if key is not None:
        threads.CHOOSER.record(key, parallel, time.perf_counter() - t0)
    q, its = Q[(n + 1) % 3], (IT[0] if n == 1 else IT.sum(0))
    conv = CONV[0] if n == 1 else CONV.all(0)
    if not finish:
        return KernelStep(q, its, GN[n - 1], conv)
    qd, R, t, w, v, terms, force = outs
    c = n % 2
    return KernelStep(q, its, GN[n - 1], conv, qd, Kinematics(R, t, w, v), terms[n - 1],
                      (CP[c], CACT[c], CNORM[c], CANC[c]) if has_contact else None, force if has_contact else None,
                      Q[n % 3], terms)


def _launch(consts, B, n, finish):
    """(parallel?, the LaunchChooser key or None) of a call on B rows with n substeps: serial below SERIAL_BELOW
    rows, on one thread or in a forked child of an OpenMP parent; else by the launch policy ("auto": whichever
    this process measured faster for this model, batch and substep count; threads.set_launch_policy)."""
    if B < SERIAL_BELOW or threads.num_threads() == 1 or not threads.parallel_allowed():
        return False, None
    policy = threads.launch_policy()
    if policy != "auto":
        return policy == "parallel", None
    key = (id(consts), B, n, bool(finish))
    return threads.CHOOSER.choose(key), key


def pbad_step_numba(body, q_prev, q_cur, tau, dt, forces, *, max_iter, tol, hessian="exact", contact=None):
    """Same semantics as integrators.pbad.pbad_step(..., optimizer="lm"): returns
    (q_next (B, nq), iterations (B,) int64, grad_norm (B,), converged (B,) bool).

    body: a Body; q_prev, q_cur (B, nq), tau (B, nv) NumPy arrays (float64 or float32; q_cur's dtype is the
    kernel's); forces: a ForceModel or a gravity vector; max_iter, tol (None: SolverOptions' defaults for
    the dtype); contact: the lagged contact memory of q_cur (energies.contact_state's dict, or a NamedTuple with its
    fields), computed here when the force model has contact and none is given.
    """
    r = kernel_step(body, q_prev, q_cur, tau, dt, forces, max_iter=max_iter, tol=tol, hessian=hessian,
                    contact=contact)
    return r.q, r.iterations, r.grad_norm, r.converged


def finish_numba(body, q_prev, q, dt, forces, *, gauge=None):
    """(qd (B, nv), Kinematics of q, energy terms (B, N_TERMS)) of states (q_prev, q) (B, nq) by the kernel's
    compiled code — the values a step with ``finish`` leaves, for a state that did not come out of a step."""
    q = np.ascontiguousarray(q)
    dtype, B = q.dtype, q.shape[0]
    q_prev = _arr(q_prev, dtype, q.shape)
    m, fo, _ = _constants(body, forces, float(dt), None, None, "exact", dtype)
    act, gear = _gauge_arrays(gauge, dtype)
    L, nv = body.L, body.nv
    qd, terms = np.empty((B, nv), dtype), np.empty((B, N_TERMS), dtype)
    R, t = np.empty((B, L, 3, 3), dtype), np.empty((B, L, 3), dtype)
    w, v = np.empty((B, nv, 3), dtype), np.empty((B, nv, 3), dtype)
    entries.finish_batch(*m, *fo, act, gear, q_prev, q, qd, R, t, w, v, terms)
    return qd, Kinematics(R, t, w, v), terms


def forward_kinematics_numba(body, q):
    """kinematics.forward_kinematics by the kernel's compiled code: Kinematics(R, t, w, v) of q (B, nq) (NumPy,
    float32 or float64); what the step contract's ``advance`` computes after every step, without NumPy's per-call
    overhead at small batches."""
    q = np.ascontiguousarray(q)
    dtype, B = q.dtype, q.shape[0]
    m = body_arrays(body, dtype)
    R, t = np.empty((B, body.L, 3, 3), dtype), np.empty((B, body.L, 3), dtype)
    w, v = np.empty((B, body.nv, 3), dtype), np.empty((B, body.nv, 3), dtype)
    entries.kinematics_batch(*m, q, R, t, w, v)
    return Kinematics(R, t, w, v)
