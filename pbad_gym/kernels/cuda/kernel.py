"""The fused GPU kernels: one CUDA thread per trajectory runs the CPU kernel's own scalar-style code.

:func:`step_kernel` is ONE launch per step: thread r copies its row's inputs into its scratch, runs its own
Levenberg-Marquardt to convergence (``core.step_row``: early exit per thread, no host decision inside the step) and
writes q_{k+1} and what the environment reads of it. :func:`finish_kernel` fills those reads for a state that did not
come out of a step (a reset, a restore), by the same compiled functions as ``core.finish_batch``.

The functions of kernels/numba/core.py are numba ``register_jitable`` overloads of the generic target, so
``cuda.jit`` compiles the very same Python for the device; they allocate nothing (their work arrays come in a
``StepScratch``). Here each scratch field is a global array with the batch axis LAST, and thread r works on the view
``field[..., r]``: element k of neighbouring threads is adjacent in memory, so a warp's scratch loads coalesce.

Arguments are flat arrays, as in core.step_batch (numba types plain arrays cheaply at dispatch); this module imports
``numba.cuda``, so with ``NUMBA_ENABLE_CUDASIM=1`` set before the first import the kernels run in numba's CUDA
simulator (plain Python on host arrays: how the CPU-only tests exercise them).

Compiling a kernel takes tens of seconds per dtype. ``PBAD_CUDA_CACHE=1`` caches the compiled kernels on disk; it is
off by default because numba checks only this file's timestamp, not that of core.py whose functions it compiles in
(the device check turns it on: a fresh machine, one working tree). ``PBAD_CUDA_MAXREG=N`` caps the registers per
thread (default: the compiler's choice, 255 for the step kernel, which bounds occupancy at 8 warps per SM; 128
doubles the warps at the cost of a few KB of spills per thread, docs/gpu.md): a knob for timing on a device.
"""
from __future__ import annotations

import os

from numba import cuda

from ..numba.configuration import difference
from ..numba.dynamics import energy_terms_row
from ..numba.forward import forward_kinematics
from ..numba.lm import step_row
from ..numba.model import N_TERMS, S_DT, KernelForces, KernelModel
from ..numba.scratch import StepScratch
from .device import simulated

_OPTIONS = {"cache": os.environ.get("PBAD_CUDA_CACHE") == "1"}
if os.environ.get("PBAD_CUDA_MAXREG") and not simulated():  # the simulator's jit takes no register cap
    _OPTIONS["max_registers"] = int(os.environ["PBAD_CUDA_MAXREG"])


@cuda.jit(**_OPTIONS)
def step_kernel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature, sph_p0,
                sph_r, gravity, drag, chart, flags, scalars, q_prev, q_cur, tau, cP, cact, cnorm, canc, out_q,
                out_it, out_gn, out_conv, act, gear, want, out_qd, out_R, out_t, out_w, out_v, out_terms, out_cP,
                out_cact, out_cnorm, out_canc, out_force, qp, qc, ta, cPr, canr, car, cnr, Rs, ts, ws, vs, Gs, fs,
                gs, xs, Rp, tp, Rr, tr, A, bt, Wd, wtmp, vtmp, Rj, R2, wr, K, Z, F, Xk, H, Hd, Af, D, dx, dv, piv,
                qpred, s33, s3, s36, xv, ev, zv, qdr, trow):
    """Row r = the thread's global index (r < B) of core.step_batch: the model's and force model's fields, the step
    inputs and outputs (batch axis first, as core.step_batch's), then the StepScratch fields (batch axis last)."""
    r = cuda.grid(1)
    if r < q_cur.shape[0]:
        m = KernelModel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q,
                        lin_v, sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2,
                        armature, sph_p0, sph_r)
        fo = KernelForces(gravity, drag, chart, flags, scalars)
        sc = StepScratch(qp[..., r], qc[..., r], ta[..., r], cPr[..., r], canr[..., r], car[..., r], cnr[..., r],
                         Rs[..., r], ts[..., r], ws[..., r], vs[..., r], Gs[..., r], fs[..., r], gs[..., r],
                         xs[..., r], Rp[..., r], tp[..., r], Rr[..., r], tr[..., r], A[..., r], bt[..., r],
                         Wd[..., r], wtmp[..., r], vtmp[..., r], Rj[..., r], R2[..., r], wr[..., r], K[..., r],
                         Z[..., r], F[..., r], Xk[..., r], H[..., r], Hd[..., r], Af[..., r], D[..., r], dx[..., r],
                         dv[..., r], piv[..., r], qpred[..., r], s33[..., r], s3[..., r], s36[..., r], xv[..., r],
                         ev[..., r], zv[..., r], qdr[..., r], trow[..., r])
        step_row(m, fo, q_prev, q_cur, tau, cP, cact, cnorm, canc, out_q, out_it, out_gn, out_conv, act, gear, want,
                 out_qd, out_R, out_t, out_w, out_v, out_terms, out_cP, out_cact, out_cnorm, out_canc, out_force, r,
                 sc, False)


@cuda.jit(**_OPTIONS)
def finish_kernel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                  sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature, sph_p0,
                  sph_r, gravity, drag, chart, flags, scalars, act, gear, q_prev, q, out_qd, out_R, out_t, out_w,
                  out_v, out_terms, Rj, R2, K, Xk, H, Af, dv, piv, s33, s3, xv, ev, zv, qdr, trow):
    """Row r of core.finish_batch: velocity (q ⊖ q_prev)/Δt (B, nv), kinematics of q and the energy terms
    (B, N_TERMS), on the StepScratch fields it names (batch axis last)."""
    r = cuda.grid(1)
    if r < q.shape[0]:
        m = KernelModel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q,
                        lin_v, sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2,
                        armature, sph_p0, sph_r)
        fo = KernelForces(gravity, drag, chart, flags, scalars)
        dt = scalars[S_DT]
        dvr, qdrr, trowr = dv[..., r], qdr[..., r], trow[..., r]
        difference(m, q_prev[r], q[r], dvr)
        for k in range(dvr.shape[0]):
            qdrr[k] = dvr[k] / dt
            out_qd[r, k] = qdrr[k]
        forward_kinematics(m, q[r], out_R[r], out_t[r], out_w[r], out_v[r], Rj[..., r], R2[..., r])
        energy_terms_row(m, fo, act, gear, q[r], qdrr, out_R[r], out_t[r], out_w[r], out_v[r], K[..., r],
                         Xk[..., r], H[..., r], Af[..., r], xv[..., r], ev[..., r], zv[..., r], piv[..., r],
                         s33[..., r], s3[..., r], trowr)
        for k in range(N_TERMS):
            out_terms[r, k] = trowr[k]
