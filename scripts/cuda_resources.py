"""Registers, local memory and occupancy of the fused GPU kernels, from a compile for a chosen GPU: no GPU needed.

    python scripts/cuda_resources.py [--body spider|swimmer|chain10] [--dtype float64|float32] [--cc 9.0]
                                     [--maxrregcount N]

Compiles ``kernels.cuda.kernel.step_kernel``, ``finish_kernel`` and ``terms_kernel`` to PTX with numba-cuda (its NVVM:
a CUDA toolkit or the nvidia-cuda-nvcc wheel) for compute capability --cc, assembles them with ``ptxas -v`` (from
PATH, $CUDA_HOME or /usr/local/cuda*) and prints per kernel: registers per thread, stack frame and spill bytes, the
kernel parameter bytes, the per-thread global scratch (StepScratch) and the occupancy the registers allow. Where no
GPU is present, numba-cuda's device query (it compiles device functions for the current device) is answered with
--cc.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np

REGS_PER_SM, MAX_THREADS_PER_SM = 65536, 2048  # sm_70 … sm_90
SECTION = re.compile(r"Compiling entry function '(?P<name>[^']+)'.*?(?P<stack>\d+) bytes stack frame, "
                     r"(?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads.*?Used (?P<regs>\d+) registers",
                     re.S)


def _body(name):
    from pbad_gym.energies import make_force_model
    from pbad_gym.model import chain, spider, swimmer

    if name == "spider":
        body = spider(density=5.0, armature=1.0)
        return body, make_force_model(body, contact=dict(friction="coulomb"), limit_stiffness=1e3)
    if name == "swimmer":
        body = swimmer()
        return body, make_force_model(body, gravity=(0.0, 0.0, 0.0), drag=(0.1, 10.0))
    body = chain(10)
    return body, make_force_model(body)


def _arguments(body, forces, dtype, B=4):
    """Host arrays of the kernels' argument types (types depend on dtype and rank only, not on the body)."""
    from pbad_gym.integrators.options import SolverOptions
    from pbad_gym.kernels.numba.constants import N_TERMS, step_constants
    from pbad_gym.kernels.numba.scratch import BOOL, FLOAT, INT, scratch_shapes
    from pbad_gym.kernels.numba.step import body_arrays

    m = body_arrays(body, dtype)
    fo = step_constants(body, forces, 0.01, SolverOptions.create(dtype), dtype)
    L, nv, nq, ns = body.L, body.nv, body.nq, m.contact_r.shape[0]
    e = lambda *s: np.empty(s, dtype)  # noqa: E731
    b = lambda *s: np.empty(s, np.bool_)  # noqa: E731
    act, gear = np.zeros(2, np.int64), e(2)
    kin_out = (e(B, L, 3, 3), e(B, L, 3), e(B, nv, 3), e(B, nv, 3))
    kinds = {FLOAT: dtype, INT: np.int64, BOOL: np.bool_}
    shapes = scratch_shapes(L, nv, nq, ns)
    work = {k: np.empty(s + (B,), kinds[kind]) for k, (s, kind) in shapes.items()}
    # q_back, HV, HT, MF, MD, MM, MV, q_back2, H2: the Newton memory
    memory = (e(B, nq), b(B), b(B), e(B, nv, nv), e(B, nv), e(B), b(B), e(B, nq), b(B))
    step = (*m, *fo, *memory, e(B, nq), e(B, nq), e(B, nv), e(B, ns, 3), b(B, ns), e(B, ns), e(B, ns, 3), e(B, nq),
            np.empty(B, np.int64), e(B), b(B), 1, e(B, nv), *kin_out, e(B, ns, 3), b(B, ns), e(B, ns),
            e(B, ns, 3), e(B, ns, 3), *work.values())
    from pbad_gym.kernels.cuda.launch import FINISH_FIELDS, TERMS_FIELDS

    finish = (*m, *fo, e(B, nq), e(B, nq), e(B, nv), *kin_out, *(work[f] for f in FINISH_FIELDS))
    terms = (*m, *fo, act, gear, e(B, nq), e(B, nv), *kin_out, e(B, N_TERMS), *(work[f] for f in TERMS_FIELDS))
    return step, finish, terms, (L, nv, nq, ns)


def _param_bytes(sig):
    """Kernel parameter bytes as numba passes them (an array: meminfo, parent, nitems, itemsize, data, shape,
    strides; a scalar: 8)."""
    return sum((5 + 2 * t.ndim) * 8 if hasattr(t, "ndim") else 8 for t in sig)


def _ptxas():
    found = shutil.which("ptxas")
    cands = [found] if found else []
    cands += [os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "ptxas")]
    cands += sorted(glob.glob("/usr/local/cuda*/bin/ptxas"), reverse=True)
    return next((c for c in cands if c and os.path.exists(c)), None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--body", choices=("spider", "swimmer", "chain10"), default="spider")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--cc", default="9.0", help="compute capability (default 9.0: H100/H200)")
    p.add_argument("--maxrregcount", type=int, default=None,
                   help="cap on registers per thread, as PBAD_CUDA_MAXREG sets it (default: the compiler's choice)")
    args = p.parse_args(argv)
    cc = tuple(int(x) for x in args.cc.split("."))
    import numba
    from numba import cuda

    if not cuda.is_available():  # compile for --cc without a device
        import numba.cuda.dispatcher as dispatcher

        dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    from pbad_gym.kernels.cuda import kernel
    from pbad_gym.kernels.numba.scratch import scratch_bytes

    dtype = np.dtype(args.dtype)
    body, forces = _body(args.body)
    step, finish, terms, (L, nv, nq, ns) = _arguments(body, forces, dtype)
    scratch = scratch_bytes(L, nv, nq, ns, dtype.itemsize)
    print(f"{args.body}: L {L}, nv {nv}, nq {nq}, {ns} contact spheres; {dtype}; sm_{cc[0]}{cc[1]}; "
          f"global scratch {scratch:,} bytes per trajectory")
    ptxas = _ptxas()
    for name, fn, values in (("step_kernel", kernel.step_kernel, step), ("finish_kernel", kernel.finish_kernel, finish),
                             ("terms_kernel", kernel.terms_kernel, terms)):
        sig = tuple(numba.typeof(a) for a in values)
        ptx, _ = cuda.compile_ptx(fn.py_func, sig, cc=cc)
        line = f"  {name}: {len(sig)} arguments, {_param_bytes(sig):,} parameter bytes, PTX {len(ptx) / 1e6:.1f} MB"
        if ptxas is None:
            print(line + "; ptxas not found (registers unknown)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "k.ptx")
            with open(src, "w") as f:
                f.write(ptx)
            cap = [] if args.maxrregcount is None else [f"--maxrregcount={args.maxrregcount}"]
            run = subprocess.run([ptxas, "-v", f"--gpu-name=sm_{cc[0]}{cc[1]}", "-O3", *cap, src, "-o",
                                  os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
        if run.returncode != 0:
            print(line + f"; ptxas failed: {run.stderr.strip()[-300:]}")
            continue
        m = next(s for s in SECTION.finditer(run.stderr) if name in s["name"])
        regs = int(m["regs"])
        per_warp = ((regs * 32 + 255) // 256) * 256  # register allocation unit: 256 per warp
        threads = min(MAX_THREADS_PER_SM, (REGS_PER_SM // per_warp) * 32)
        print(line + f"; {regs} registers, {m['stack']} bytes stack frame, {m['st']} / {m['ld']} bytes spill "
                     f"stores / loads; at most {threads} resident threads per SM by registers "
                     f"({threads / MAX_THREADS_PER_SM:.1%} occupancy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
