"""Entry point of the compiled order-2 PBAD step (the numba implementation of the step contract)."""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ...energies import ForceModel, contact_state
from ...integrators.newton import NewtonMemory
from ...integrators.options import SolverOptions
from ...kinematics import Kinematics, forward_kinematics
from . import entries, threads
from .constants import N_TERMS, step_constants

HESSIANS = ("exact", "gauss_newton")
SERIAL_BELOW = 4  # batches smaller than this run on the calling thread (no thread-pool launch)
_FORCES: dict = {}


def supports(body, forces=None, *, integrator="pbad", order=2, optimizer="lm", contact_model="penalty",
             hessian="exact", dtype=np.float64, device="cpu"):
    """None when :func:`pbad_step_numba` handles this case, else a one-line reason for the NumPy fallback."""
    if device != "cpu":
        return f"device={device!r}: the numba kernel runs on the CPU"
    if integrator not in ("pbad", "bdf2"):
        return f"integrator={integrator!r} is not compiled (only 'pbad', 'bdf2')"
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


def _constants(body, forces, dt, max_iter, tol, hessian, dtype, newton_memory=False, integrator="pbad"):
    """(BodyArrays, StepConstants, a dict of cached work arrays) of one simulation's options, memoised by identity
    (a stepping loop pays one dict lookup per call); max_iter / tol None take SolverOptions' defaults."""
    key = (id(forces), id(body), dt, max_iter, tol, hessian, dtype, newton_memory, integrator)
    hit = _FORCES.get(key)
    if hit is not None and hit[0] is forces and hit[1] is body:
        return hit[2]
    if len(_FORCES) > 64:
        _FORCES.clear()
    options = SolverOptions.create(dtype, max_iter=max_iter, tol=tol, hessian=hessian, newton_memory=newton_memory)
    consts = (body_arrays(body, dtype), step_constants(body, forces, dt, options, dtype, integrator), {})
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
    substep); with ``finish``: qd (B, nv) = (q ⊖ q_prev)/Δt, kin (the Kinematics of q), with contact the new
    ContactMemory fields (P, active, normal, anchor) as ``contact`` and the ground force (B, S, 3) [N] the last
    substep applied as ``force`` (else None), q_prev (B, nq): the configuration before the last substep (q_cur for
    one step), and of the n substeps' states substep_q (n, B, nq), substep_qd (n, B, nv) and, where asked for,
    substep_kin (their Kinematics, leading axis n) (q, qd and kin the last); newton: the NewtonMemory the call
    leaves; back: BDF2's (q_{k−2}, q_{k−3}) (B, 2, nq) of the new state (None for the order-2 step)."""

    q: np.ndarray
    iterations: np.ndarray
    grad_norm: np.ndarray
    converged: np.ndarray
    qd: np.ndarray = None
    kin: Kinematics = None
    contact: tuple = None
    force: np.ndarray = None
    q_prev: np.ndarray = None
    substep_q: np.ndarray = None
    substep_qd: np.ndarray = None
    substep_kin: Kinematics = None
    newton: NewtonMemory = None
    back: np.ndarray = None


def _empty_outputs(consts, dtype):
    """Zero-row stand-ins for the finish outputs of one step (same dtypes and ranks as the real ones, so that both
    calls hit one compiled specialisation; the kernel does not touch them when ``want`` is 0): QD (1, 0, nv), R, t,
    w, v (1, 0, …), force."""
    key = ("empty", np.dtype(dtype).str)
    if key not in consts[2]:
        m = consts[0]
        L, nv, S = m.mass.shape[0], m.dof_link.shape[0], m.contact_r.shape[0]
        consts[2][key] = (np.zeros((1, 0, nv), dtype), np.zeros((1, 0, L, 3, 3), dtype), np.zeros((1, 0, L, 3), dtype),
                          np.zeros((1, 0, nv, 3), dtype), np.zeros((1, 0, nv, 3), dtype), np.zeros((0, S, 3), dtype))
    return consts[2][key]


def actuator_arrays(actuated, gear, dtype):
    """(actuated DOFs (n,) int64, gear (n,) [N m or N] in the kernel's ``dtype``), C-contiguous, as the energy
    terms' kernels take them (the gears rounded to the kernel's dtype, as its arithmetic is)."""
    act = np.ascontiguousarray(actuated, dtype=np.int64).reshape(-1)
    return act, np.ascontiguousarray(np.broadcast_to(np.asarray(gear, dtype=np.float64), act.shape), dtype=dtype)


def kernel_step(body, q_prev, q_cur, tau, dt, forces, *, max_iter, tol, hessian="exact", contact=None, finish=False,
                substeps=1, newton=None, newton_memory=False, substep_kin=True, back=None):
    """The compiled step (:func:`pbad_step_numba`'s semantics) as a :class:`KernelStep`; with ``finish`` also what
    the environment reads of the new state, from the same call (velocity, kinematics, new contact memory and
    force), and then ``substeps`` steps under the same tau in that one call (each row's state, contact memory and
    Newton memory carried from substep to substep inside the kernel; the same numbers as that many single calls),
    every substep's configuration and velocity kept, and with ``substep_kin`` every substep's kinematics (else
    only the last's: writing each substep's link poses into fresh memory cost a 10-link chain a fifth of its
    step time, BENCHMARKS.md). With ``newton_memory`` (SolverOptions.newton_memory) the
    step keeps a Newton memory: ``newton`` is the state's NewtonMemory (integrators/newton.py) or None (none yet:
    first-order warm start, fresh Hessians) and the new one is returned (never written into the one passed);
    without, both are None. With ``back`` (B, 2, nq) = (q_{k−2}, q_{k−3}) every substep is BDF2's
    (integrators/bdf2.py; no Newton memory) and KernelStep.back holds the history the call leaves. Inputs that are
    already C-contiguous arrays of the kernel's dtype and shape are passed as they are."""
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
    bdf2 = back is not None
    newton_memory = bool(newton_memory) and not bdf2
    consts = _constants(body, forces, float(dt), max_iter, tol, hessian, dtype, newton_memory,
                        "bdf2" if bdf2 else "pbad")
    m, fo, empty = consts
    n_s = m.contact_r.shape[0]
    has_contact = forces.contact is not None
    # batch.step_rows: the states in Q (q_{k−2}, q_prev, q, then every substep's), the contact memory in two
    # rotating slots, the Newton memory in HV, HT, MF, MD, MM, MV
    Q = np.empty((n + 3, B, nq), dtype)
    Q[1], Q[2] = _arr(q_prev, dtype, (B, nq)), _arr(q_cur, dtype, (B, nq))
    if not newton_memory:
        newton = None
    HV, HT, MF, MD, MM, MV = _newton_arrays(newton, B, nv, dtype) if newton_memory else _no_memory(empty, B, dtype)
    Q[0] = Q[1] if newton is None else _arr(newton.q_back, dtype, (B, nq))
    if bdf2:
        back = _arr(back, dtype, (B, 2, nq))
        Q[0], QB2, H2 = back[:, 0], np.ascontiguousarray(back[:, 1]), np.ones(B, np.bool_)
    elif newton is None:  # (q_{k−3}: the third-order start's)
        QB2, H2 = Q[1], np.zeros(B, np.bool_)
    else:
        QB2, H2 = _arr(newton.q_back2, dtype, (B, nq)), np.asarray(newton.history2, np.bool_)
    if has_contact:
        CP, CACT = np.empty((2, B, n_s, 3), dtype), np.empty((2, B, n_s), np.bool_)
        CNORM, CANC = np.empty((2, B, n_s), dtype), np.empty((2, B, n_s, 3), dtype)
        if contact is None:
            contact = contact_state(body, forward_kinematics(body, Q[2]), forces.contact, dt)
        P, active, normal, anchor = contact_fields(contact)
        CP[0], CACT[0], CNORM[0] = _arr(P, dtype, (B, n_s, 3)), np.asarray(active), _arr(normal, dtype, (B, n_s))
        CANC[0] = CP[0] if anchor is None else _arr(anchor, dtype, (B, n_s, 3))
    else:
        CP, CACT, CNORM, CANC = _no_contact(empty, B, dtype)
    IT, GN, CONV = np.empty((n, B), np.int64), np.empty((n, B), dtype), np.empty((n, B), np.bool_)
    if finish:
        L, nk = body.L, n if substep_kin else 1
        outs = (np.empty((n, B, nv), dtype), np.empty((nk, B, L, 3, 3), dtype), np.empty((nk, B, L, 3), dtype),
                np.empty((nk, B, nv, 3), dtype), np.empty((nk, B, nv, 3), dtype), np.empty((B, n_s, 3), dtype))
    else:
        outs = _empty_outputs(consts, dtype)
    _run(consts, B, n, finish, entries.step_batch_serial, entries.step_batch,
         (*m, *fo, Q, tau, CP, CACT, CNORM, CANC, HV, HT, MF, MD, MM, MV, QB2, H2, IT, GN, CONV, int(finish), *outs))
    q, its = Q[n + 2], (IT[0] if n == 1 else IT.sum(0))
    conv = CONV[0] if n == 1 else CONV.all(0)
    # (q_{k−2} and q_{k−3} of the next call: Q[n] and Q[n − 1], which is the old q_back where n = 1)
    memory = NewtonMemory(Q[n], np.ones(B, np.bool_), MF, MD, MM, MV, HT, Q[n - 1],
                          np.ones(B, np.bool_) if n > 1 else HV) if newton_memory else None  # (HV: read only)
    history = np.stack([Q[n], Q[n - 1]], axis=1) if bdf2 else None
    if not finish:
        return KernelStep(q, its, GN[n - 1], conv, newton=memory, back=history)
    QD, R, t, w, v, force = outs
    c = n % 2
    return KernelStep(q, its, GN[n - 1], conv, QD[n - 1], Kinematics(R[-1], t[-1], w[-1], v[-1]),
                      (CP[c], CACT[c], CNORM[c], CANC[c]) if has_contact else None, force if has_contact else None,
                      Q[n + 1], Q[3:], QD, Kinematics(R, t, w, v) if substep_kin else None, memory, history)


def _no_memory(empty, B, dtype):
    """(HV, HT, MF, MD, MM, MV) without a Newton memory: nothing valid, no factor (zero-size; cached: without
    fo.newton_memory the kernel writes only True into HT and False into MV, which is what they hold)."""
    key = ("no-memory", B)
    if key not in empty:
        empty[key] = (np.zeros(B, np.bool_), np.ones(B, np.bool_), np.zeros((B, 0, 0), dtype), np.zeros((B, 0), dtype),
                      np.zeros(B, dtype), np.zeros(B, np.bool_))
    return empty[key]


def _newton_arrays(newton, B, nv, dtype):
    """(HV, HT, MF, MD, MM, MV) of batch.step_rows from a NewtonMemory (copies: the kernel writes the new memory
    into them) or None (nothing valid)."""
    if newton is None:
        return (np.zeros(B, np.bool_), np.ones(B, np.bool_), np.zeros((B, nv, nv), dtype), np.zeros((B, nv), dtype),
                np.zeros(B, dtype), np.zeros(B, np.bool_))
    return (np.array(newton.history, np.bool_), np.array(newton.trust, np.bool_), np.array(newton.factor, dtype),
            np.array(newton.D, dtype), np.array(newton.mu, dtype), np.array(newton.valid, np.bool_))


def _run(consts, B, n, kind, serial, parallel, args):
    """Call a compiled entry on B rows with n substeps: ``serial(*args)`` on the calling thread, or ``parallel(*args,
    nchunks)`` on the thread pool, as :func:`_launch` decides; the launch is timed for the chooser, and PyTorch's
    thread count, read before the pool starts or launches (both set OpenMP's), is given back after it."""
    torch_threads = threads.torch_threads()
    go_parallel, key = _launch(consts, B, n, kind)
    t0 = time.perf_counter()
    if go_parallel:
        parallel(*args, min(B, threads.num_threads()))
    else:
        serial(*args)
    threads.restore_torch_threads(torch_threads)
    if key is not None:
        threads.CHOOSER.record(key, go_parallel, time.perf_counter() - t0)


def _launch(consts, B, n, kind):
    """(parallel?, the LaunchChooser key or None) of a call on B rows with n substeps: serial below SERIAL_BELOW
    rows, on one thread or in a forked child of an OpenMP parent; else by the launch policy ("auto": whichever
    this process measured faster for this model, batch, substep count and ``kind`` of call — a step with or
    without finish, the energy terms, the guard; threads.set_launch_policy)."""
    if B < SERIAL_BELOW or threads.num_threads() == 1 or not threads.parallel_allowed():
        return False, None
    policy = threads.launch_policy()
    if policy != "auto":
        return policy == "parallel", None
    key = (id(consts), B, n, kind)
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


def finish_numba(body, q_prev, q, dt, forces):
    """(qd (B, nv), Kinematics of q) of states (q_prev, q) (B, nq) by the kernel's compiled code — the values a
    step with ``finish`` leaves, for a state that did not come out of a step."""
    q = np.ascontiguousarray(q)
    dtype, B = q.dtype, q.shape[0]
    q_prev = _arr(q_prev, dtype, q.shape)
    m, fo, _ = _constants(body, forces, float(dt), None, None, "exact", dtype)
    L, nv = body.L, body.nv
    qd = np.empty((B, nv), dtype)
    R, t = np.empty((B, L, 3, 3), dtype), np.empty((B, L, 3), dtype)
    w, v = np.empty((B, nv, 3), dtype), np.empty((B, nv, 3), dtype)
    entries.finish_batch(*m, *fo, q_prev, q, qd, R, t, w, v)
    return qd, Kinematics(R, t, w, v)


def energy_terms_numba(body, forces, dt, actuated, gear, q, qd):
    """The divergence guard's energy terms (…, N_TERMS) (the constants.T_* columns: kinetic energy [J], the
    actuators' power coefficient [√J/s], limit and contact energies [J], centre of mass (3,) [m]) of states with
    configurations q (…, nq) and velocities qd (…, nv) (any leading axes, NumPy of the kernel's dtype), for the
    actuators on DOFs ``actuated`` (n,) with gears ``gear`` (n,) [N m or N]: the kernel's compiled arithmetic
    (dynamics.energy_terms_row, as the step used to compute them), in q's dtype."""
    dtype = q.dtype
    lead = q.shape[:-1]
    q2 = _arr(q, dtype).reshape(-1, body.nq)
    qd2 = _arr(qd, dtype).reshape(-1, body.nv)
    if qd2.shape[0] != q2.shape[0]:
        raise ValueError(f"q {q.shape} and qd {qd.shape} must hold the same states")
    consts = _constants(body, forces, float(dt), None, None, "exact", dtype)
    m, fo, cache = consts
    key = ("actuators", id(actuated), id(gear), np.dtype(dtype).str)
    hit = cache.get(key)
    if hit is None or hit[0] is not actuated or hit[1] is not gear:  # converted once per (actuated, gear) pair
        hit = cache[key] = (actuated, gear, actuator_arrays(actuated, gear, dtype))
    act, g = hit[2]
    N = q2.shape[0]
    out = np.empty((N, N_TERMS), dtype)
    _run(consts, N, 0, "terms", entries.terms_batch_serial, entries.terms_batch, (*m, *fo, act, g, q2, qd2, out))
    return out.reshape(lead + (N_TERMS,))


class GuardNumba:
    """The divergence guard's compiled check after a step (batch.guard_rows: the energy terms of the step's states
    and their checks in ONE call), bound to one simulation: ``GuardNumba(body, forces, dt, actuated, gear, dtype,
    budget)(q, qd, kin, K_last, s_last) -> (exceeded (B,) bool, K (B,) [J], s (B,) [√J], terms (n, B, N_TERMS))``
    for the n states q (n, B, nq), qd (n, B, nv) with their Kinematics ``kin`` (fields with leading axes (n, B);
    the step's own), NumPy of ``dtype``, after budgets K_last, s_last (B,) float64.

    actuated (n_act,) DOFs with gears ``gear`` [N m or N]; budget: the budget's constants (has_floor, mg_z [N],
    floor [m], c_gravity [√J/s], safety, dt [s], round_off) as :func:`.guard.check_rows` takes them. What is bound
    (the model's fields, the actuators) is converted once, so a call is one dispatch; a pickled copy binds anew."""

    def __init__(self, body, forces, dt, actuated, gear, dtype, budget):
        self._spec = (body, forces, dt, actuated, gear, dtype, budget)
        self._bind()

    def _bind(self):
        body, forces, dt, actuated, gear, dtype, budget = self._spec
        self._consts = _constants(body, forces, float(dt), None, None, "exact", dtype)
        m, fo, _ = self._consts
        self._bound = (*m, *fo, *actuator_arrays(actuated, gear, dtype))
        # (Python floats and bools: NumPy scalars dispatch slower)
        self._budget = tuple(b if isinstance(b, bool) else float(b) for b in budget)
        self._dtype = dtype

    def __getstate__(self):
        return self._spec

    def __setstate__(self, spec):
        self._spec = spec
        self._bind()

    def __call__(self, q, qd, kin, K_last, s_last):
        q, qd = np.ascontiguousarray(q), np.ascontiguousarray(qd)  # (the step's own arrays already are)
        R, t, w, v = kin
        R, t, w, v = np.ascontiguousarray(R), np.ascontiguousarray(t), np.ascontiguousarray(w), np.ascontiguousarray(v)
        n, B = q.shape[0], q.shape[1]
        out = np.empty((n, B, N_TERMS), self._dtype)
        exceeded, K, s = np.empty(B, np.bool_), np.empty(B), np.empty(B)
        _run(self._consts, B, n, "guard", entries.guard_batch_serial, entries.guard_batch,
             (*self._bound, q, qd, R, t, w, v, out, *self._budget, K_last, s_last, exceeded, K, s))
        return exceeded, K, s, out


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
