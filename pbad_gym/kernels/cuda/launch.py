"""Host side of the fused GPU step: constants and scratch on the device (once), one kernel launch per step.

Arrays in and out are CuPy arrays (numba.cuda takes them through ``__cuda_array_interface__``, zero copy, without
the stream synchronisation numba would otherwise do per argument) and the kernel runs on CuPy's current stream, so
a step queues one launch and returns without waiting for the GPU. Under numba's CUDA simulator everything is NumPy.
"""
from __future__ import annotations

import numpy as np

from ...energies import ForceModel, contact_state
from ...integrators.newton import NewtonMemory
from ...kinematics import Kinematics, forward_kinematics
from ..numba.codegen import FINISH_FIELDS, TERMS_FIELDS
from ..numba.constants import ARRAY_FIELDS, N_TERMS
from ..numba.scratch import BOOL, FLOAT, INT, scratch_shapes
from ..numba.step import HESSIANS, KernelStep, _constants, actuator_arrays, as_force_model, contact_fields
from . import device

# one trajectory per thread; 2 warps per block: at 255 registers per thread an SM holds 8 warps (4 such blocks),
# and small blocks spread a small batch over more SMs
THREADS_PER_BLOCK = 64
_KINDS = {INT: np.int64, BOOL: np.bool_}


class _Device:
    """Where the arrays of one simulation live: ``xp`` (cupy, or numpy under the simulator), ``arg`` / ``out`` (an
    input / output array as the kernel takes it) and ``empty`` (an uninitialised array that never leaves this
    module; under the simulator wrapped as an input, so that it is not copied back after each launch)."""

    def __init__(self):
        self.simulated = device.simulated()
        if self.simulated:
            self.xp = np
        else:
            import cupy

            self.xp = cupy

    def arg(self, a):
        """An input (or scratch) array as a kernel argument."""
        from numba import cuda

        if self.simulated:  # copied in, never back (the simulator writes every plain array argument back)
            return cuda.In(np.ascontiguousarray(a))
        if a.size == 0:  # no data pointer to share: numba's own empty array of the same type
            return cuda.device_array(a.shape, a.dtype)
        return cuda.as_cuda_array(a, sync=False)

    def out(self, a):
        """An output array (C-contiguous, fresh) as a kernel argument: written in place."""
        if self.simulated:
            return a
        from numba import cuda

        return cuda.as_cuda_array(a, sync=False)

    def empty(self, shape, dtype):
        from numba import cuda

        if self.simulated:
            return cuda.In(np.empty(shape, dtype))
        return cuda.device_array(shape, dtype)  # numba's own: zero-size arrays included

    def stream(self):
        """The launch stream: CuPy's current one (None under the simulator)."""
        if self.simulated:
            return None
        import cupy
        from numba import cuda

        ptr = cupy.cuda.get_current_stream().ptr
        return cuda.default_stream() if ptr == 0 else cuda.external_stream(ptr)


_DEVICE = []


def _device():
    if not _DEVICE:
        _DEVICE.append(_Device())
    return _DEVICE[0]


def _on_device(consts, dtype):
    """The kernel arguments of a simulation's constants (BodyArrays and StepConstants fields; arrays copied to the
    device once, numbers as they are), cached beside the CPU kernel's own copies."""
    key = ("cuda", np.dtype(dtype).str)
    if key not in consts[2]:
        dev = _device()
        m, fo = consts[0], consts[1]
        fo_args = tuple(dev.arg(dev.xp.asarray(v)) if k in ARRAY_FIELDS else v for k, v in fo._asdict().items())
        consts[2][key] = tuple(dev.arg(dev.xp.asarray(a)) for a in m) + fo_args
    return consts[2][key]


def scratch(consts, B, nq, dtype, fields=None):
    """{field: array} of the StepScratch fields (all, or those named in ``fields``) for B threads, each of shape
    field shape + (B,) (batch axis last), allocated once per batch size and cached with the constants."""
    key = ("cuda-scratch", np.dtype(dtype).str, B, fields)
    if key not in consts[2]:
        for k in [k for k in consts[2] if k[0] == "cuda-scratch" and k[3] == fields]:  # one batch size at a time
            del consts[2][k]
        m, dev = consts[0], _device()
        shapes = scratch_shapes(m.mass.shape[0], m.dof_link.shape[0], nq, m.contact_r.shape[0])
        consts[2][key] = {name: dev.empty(shape + (B,), dtype if kind == FLOAT else _KINDS[kind])
                          for name, (shape, kind) in shapes.items() if fields is None or name in fields}
    return consts[2][key]


def _empty_outputs(consts, dtype):
    """Zero-row stand-ins for the finish outputs (want = 0, or no contact): never touched by the kernel."""
    key = ("cuda-empty", np.dtype(dtype).str)
    if key not in consts[2]:
        m, dev = consts[0], _device()
        L, nv, n_s = m.mass.shape[0], m.dof_link.shape[0], m.contact_r.shape[0]
        shapes = ((0, nv), (0, L, 3, 3), (0, L, 3), (0, nv, 3), (0, nv, 3), (0, n_s, 3), (0, n_s), (0, n_s),
                  (0, n_s, 3), (0, n_s, 3))
        consts[2][key] = tuple(dev.empty(s, np.bool_ if i == 6 else dtype) for i, s in enumerate(shapes))
    return consts[2][key]


def _no_contact(consts, B, dtype):
    key = ("cuda-nocontact", np.dtype(dtype).str, B)
    if key not in consts[2]:
        dev = _device()
        consts[2][key] = (dev.empty((B, 0, 3), dtype), dev.empty((B, 0), np.bool_), dev.empty((B, 0), dtype))
    return consts[2][key]


def _grid(B):
    return (B + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, THREADS_PER_BLOCK


def _launch(kernel, B, args):
    dev = _device()
    blocks, threads = _grid(B)
    stream = dev.stream()
    if stream is None:
        kernel[blocks, threads](*args)
    else:
        kernel[blocks, threads, stream](*args)


def kernel_step_cuda(body, q_prev, q_cur, tau, dt, forces, *, max_iter, tol, hessian="exact", contact=None,
                     finish=False, newton=None, newton_memory=False):
    """The fused GPU step: same arguments and :class:`~pbad_gym.kernels.numba.step.KernelStep` result as
    ``kernels.numba.step.kernel_step`` (one substep), every array a CuPy array on the device (NumPy under the
    simulator): q_prev, q_cur (B, nq), tau (B, nv) in q_cur's dtype (float32 or float64), ``newton`` the state's
    NewtonMemory or None (used and returned only with ``newton_memory``). One kernel launch; nothing waits for
    the GPU here."""
    from .kernel import step_kernel

    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
    if not isinstance(forces, ForceModel):
        forces = as_force_model(forces)
    dev = _device()
    xp = dev.xp
    dtype = np.dtype(q_cur.dtype)
    if dtype != np.float64 and dtype != np.float32:
        raise ValueError(f"q_cur must be float32 or float64, got {dtype}")
    B, nq, nv = q_cur.shape[0], body.nq, body.nv
    for name, a, shape in (("q_prev", q_prev, (B, nq)), ("q_cur", q_cur, (B, nq)), ("tau", tau, (B, nv))):
        if tuple(a.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(a.shape)}")
    q_prev, q_cur, tau = (xp.ascontiguousarray(a, dtype=dtype) for a in (q_prev, q_cur, tau))
    consts = _constants(body, forces, float(dt), max_iter, tol, hessian, dtype, bool(newton_memory))
    n_s = consts[0].contact_r.shape[0]
    has_contact = forces.contact is not None
    if has_contact:
        if contact is None:
            contact = contact_state(body, forward_kinematics(body, q_cur), forces.contact, dt)
        P, active, normal, anchor = contact_fields(contact)
        cP = xp.ascontiguousarray(P, dtype=dtype)
        cact = xp.ascontiguousarray(active, dtype=np.bool_)
        cnorm = xp.ascontiguousarray(normal, dtype=dtype)
        canc = cP if anchor is None else xp.ascontiguousarray(anchor, dtype=dtype)
        if cP.shape != (B, n_s, 3) or cact.shape != (B, n_s) or canc.shape != (B, n_s, 3):
            raise ValueError(f"contact memory must hold (B, S, 3) / (B, S) arrays for B={B}, S={n_s}")
        c_in = tuple(dev.arg(a) for a in (cP, cact, cnorm, canc))
    else:
        cP, cact, cnorm = _no_contact(consts, B, dtype)
        c_in = (cP, cact, cnorm, cP)
    out_q, out_it = xp.empty((B, nq), dtype), xp.empty(B, np.int64)
    out_gn, out_conv = xp.empty(B, dtype), xp.empty(B, np.bool_)
    empty = _empty_outputs(consts, dtype)
    if finish:
        L = body.L
        outs = (xp.empty((B, nv), dtype), xp.empty((B, L, 3, 3), dtype), xp.empty((B, L, 3), dtype),
                xp.empty((B, nv, 3), dtype), xp.empty((B, nv, 3), dtype))
        if has_contact:
            outs += (xp.empty((B, n_s, 3), dtype), xp.empty((B, n_s), np.bool_), xp.empty((B, n_s), dtype),
                     xp.empty((B, n_s, 3), dtype), xp.empty((B, n_s, 3), dtype))
        out_args = tuple(dev.out(a) for a in outs[:5]) + (
            tuple(dev.out(a) for a in outs[5:]) if has_contact else empty[5:])
    else:
        outs, out_args = (), empty
    work = scratch(consts, B, nq, dtype)
    if newton is None or not newton_memory:  # (without the memory: no factor, zero-size)
        k = nv if newton_memory else 0
        memory = NewtonMemory(q_prev, xp.zeros(B, np.bool_), xp.zeros((B, k, k), dtype), xp.zeros((B, k), dtype),
                              xp.zeros(B, dtype), xp.zeros(B, np.bool_), xp.ones(B, np.bool_), q_prev,
                              xp.zeros(B, np.bool_))
    else:  # copies: the kernel writes the new memory into them
        memory = NewtonMemory(xp.ascontiguousarray(newton.q_back, dtype=dtype), *(
            xp.array(a, dtype=k) for a, k in zip(newton[1:7], (np.bool_, dtype, dtype, dtype, np.bool_, np.bool_))),
            xp.ascontiguousarray(newton.q_back2, dtype=dtype), xp.array(newton.history2, dtype=np.bool_))
    hv, mf, md, mm, mv, ht = memory[1:7]
    args = (*_on_device(consts, dtype), dev.arg(memory.q_back), dev.arg(hv),
            *(dev.out(a) for a in (ht, mf, md, mm, mv)), dev.arg(memory.q_back2), dev.arg(memory.history2),
            dev.arg(q_prev), dev.arg(q_cur), dev.arg(tau), *c_in, dev.out(out_q),
            dev.out(out_it), dev.out(out_gn), dev.out(out_conv), int(finish), *out_args, *work.values())
    _launch(step_kernel, B, args)
    memory = memory._replace(q_back=q_prev, history=xp.ones(B, np.bool_), q_back2=memory.q_back,
                             history2=hv) if newton_memory else None
    if not finish:
        return KernelStep(out_q, out_it, out_gn, out_conv, newton=memory)
    qd, R, t, w, v = outs[:5]
    return KernelStep(out_q, out_it, out_gn, out_conv, qd, Kinematics(R, t, w, v),
                      outs[5:9] if has_contact else None, outs[9] if has_contact else None, newton=memory)


def _actuators_on_device(consts, actuated, gear, dtype):
    """(actuated DOFs, gears in ``dtype``) as kernel arguments (copied to the device once per (actuated, gear)
    pair)."""
    key = ("cuda-actuators", id(actuated), id(gear), np.dtype(dtype).str)
    hit = consts[2].get(key)
    if hit is None or hit[0] is not actuated or hit[1] is not gear:
        dev = _device()
        act, g = actuator_arrays(actuated, gear, dtype)
        hit = (actuated, gear, dev.arg(dev.xp.asarray(act)), dev.arg(dev.xp.asarray(g)))
        consts[2][key] = hit
    return hit[2], hit[3]


def finish_cuda(body, q_prev, q, dt, forces):
    """(qd (B, nv), Kinematics of q) of states (q_prev, q) (B, nq), device arrays, by the same compiled functions
    as the step (``kernels.numba.step.finish_numba`` on the GPU)."""
    from .kernel import finish_kernel

    dev = _device()
    xp = dev.xp
    dtype = np.dtype(q.dtype)
    q = xp.ascontiguousarray(q)
    q_prev = xp.ascontiguousarray(q_prev, dtype=dtype)
    B, L, nv = q.shape[0], body.L, body.nv
    consts = _constants(body, forces, float(dt), None, None, "exact", dtype)
    qd = xp.empty((B, nv), dtype)
    R, t = xp.empty((B, L, 3, 3), dtype), xp.empty((B, L, 3), dtype)
    w, v = xp.empty((B, nv, 3), dtype), xp.empty((B, nv, 3), dtype)
    work = scratch(consts, B, body.nq, dtype, FINISH_FIELDS)
    args = (*_on_device(consts, dtype), dev.arg(q_prev), dev.arg(q), *(dev.out(a) for a in (qd, R, t, w, v)),
            *(work[f] for f in FINISH_FIELDS))
    _launch(finish_kernel, B, args)
    return qd, Kinematics(R, t, w, v)


def energy_terms_cuda(body, forces, dt, actuated, gear, q, qd):
    """``kernels.numba.step.energy_terms_numba`` on the GPU: the divergence guard's energy terms (…, N_TERMS) of
    states q (…, nq), qd (…, nv) (device arrays of the kernel's dtype, any leading axes), a device array; one
    launch, one thread per state."""
    from .kernel import terms_kernel

    dev = _device()
    xp = dev.xp
    dtype = np.dtype(q.dtype)
    lead = tuple(q.shape[:-1])
    q2 = xp.ascontiguousarray(q).reshape(-1, body.nq)
    qd2 = xp.ascontiguousarray(qd, dtype=dtype).reshape(-1, body.nv)
    N, L, nv = q2.shape[0], body.L, body.nv
    consts = _constants(body, forces, float(dt), None, None, "exact", dtype)
    act, g = _actuators_on_device(consts, actuated, gear, dtype)
    out = xp.empty((N, N_TERMS), dtype)
    kin = (xp.empty((N, L, 3, 3), dtype), xp.empty((N, L, 3), dtype), xp.empty((N, nv, 3), dtype),
           xp.empty((N, nv, 3), dtype))
    work = scratch(consts, N, body.nq, dtype, TERMS_FIELDS)
    args = (*_on_device(consts, dtype), act, g, dev.arg(q2), dev.arg(qd2), *(dev.arg(a) for a in kin), dev.out(out),
            *(work[f] for f in TERMS_FIELDS))
    _launch(terms_kernel, N, args)
    return out.reshape(lead + (N_TERMS,))
