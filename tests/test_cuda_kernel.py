"""The fused GPU step (backend="cuda", pbad_gym.kernels.cuda) without a GPU: its scratch layout, the backend's
validation, and its trajectories under numba's CUDA simulator against the compiled CPU kernel (backend="numba").

The simulator runs the kernel's Python (the CPU kernel's own scalar functions, one simulated thread per trajectory)
on NumPy arrays; it needs NUMBA_ENABLE_CUDASIM=1 before numba is imported, so the rollouts run in one subprocess
(tests/cudasim_crosscheck.py) whose results the tests below read. float64: the same numbers bit for bit (asserted to
1e-10) and the same LM iteration counts on every step. float32: the simulator evaluates float32 ⊗ Python float in
float32 (NumPy's promotion) where compiled code promotes to float64, so the two agree to float32 round-off only.
What only a device can show (FMA contraction and libdevice's sin/cos/atan2 move float64 results by round-off, speed,
occupancy) is in tests/test_gpu.py.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")

from pbad_gym.kernels.cuda import unavailable_reason  # noqa: E402
from pbad_gym.kernels.numba.scratch import (BOOL, FLOAT, INT, StepScratch, alloc_scratch, scratch_bytes,  # noqa: E402
                                            scratch_shapes)
from pbad_gym.model import chain  # noqa: E402
from pbad_gym.simulator import Simulator  # noqa: E402

HERE = Path(__file__).resolve().parent
F64_CASES = ("chain", "chain_memory", "tree", "free_ball", "swimmer", "spider", "spider_v2", "spider_v4",
             "spider_v5")
F32_CASES = ("chain_float32", "spider_float32")


def test_scratch_table_is_the_cpu_allocation():
    """scratch_shapes (what the GPU allocates per thread) lists StepScratch's fields in order, with the shapes and
    element types alloc_scratch (what the CPU kernel allocates per chunk) gives them."""
    L, nv, nq, n_s = 5, 7, 9, 3
    table = scratch_shapes(L, nv, nq, n_s)
    assert tuple(table) == StepScratch._fields
    sc = alloc_scratch(L, nv, nq, n_s, np.float32)
    kinds = {FLOAT: np.float32, INT: np.int64, BOOL: np.bool_}
    for name, (shape, kind) in table.items():
        a = getattr(sc, name)
        assert (a.shape, a.dtype) == (shape, kinds[kind]), name
    assert scratch_bytes(L, nv, nq, n_s, 4) == sum(getattr(sc, f).nbytes for f in StepScratch._fields)


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="the simulator allows device='cpu'")
def test_backend_cuda_needs_device_cuda():
    with pytest.raises(ValueError, match="device='cuda'"):
        Simulator(chain(2), dt=0.01, backend="cuda")


def test_backend_cuda_needs_numba_cuda(monkeypatch):
    """Where numba.cuda sees no device, backend='cuda' names numba.cuda and how to install it."""
    from numba import cuda

    import pbad_gym.kernels.cuda.device as device

    monkeypatch.setattr(device, "simulated", lambda: False)
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    reason = unavailable_reason("cuda")
    assert "numba.cuda" in reason and "numba-cuda" in reason


@pytest.fixture(scope="module")
def cudasim():
    """{case: result} of tests/cudasim_crosscheck.py run under the CUDA simulator (one subprocess, ~30 s)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=os.pathsep.join(
        [str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(HERE / "cudasim_crosscheck.py"), *F64_CASES, *F32_CASES], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[r.pop("case")] = r
    return out


@pytest.mark.parametrize("case", F64_CASES)
def test_cudasim_float64_matches_numba_kernel(cudasim, case):
    """Same trajectories (q after every step) to 1e-10 and the same LM iteration counts on every step; the same
    velocity, energy terms, kinematics and contact forces after the last step (and after a mid-rollout reset of a
    row: the finish kernel), and for the environments the same observations and rewards."""
    r = cudasim[case]
    assert r["same_iterations"], r
    if "memory_rows" in r:  # the Newton memory was kept (and so used) in both
        assert r["memory_rows"][0] == r["memory_rows"][1] > 0, r
    diffs = {k: v for k, v in r.items() if k not in ("same_iterations", "seconds", "memory_rows")}
    assert max(diffs.values()) <= 1e-10, diffs


@pytest.mark.parametrize("case", F32_CASES)
def test_cudasim_float32_close_to_numba_kernel(cudasim, case):
    """float32 to its round-off: q to 1e-4, velocities and energy terms (q differences over Δt) to 1e-2."""
    r = cudasim[case]
    assert r["dq"] <= 1e-4 and r["kin"] <= 1e-4, r
    assert max(v for k, v in r.items() if k not in ("same_iterations", "seconds")) <= 1e-2, r



def test_resource_script_passes_every_kernel_argument():
    """scripts/cuda_resources.py builds each fused kernel's argument types by hand: one per parameter, or the sm_90
    compile (slow, and skipped without numba-cuda) fails on a signature mismatch."""
    import importlib.util
    import inspect

    from pbad_gym.kernels.cuda import kernel

    spec = importlib.util.spec_from_file_location("cuda_resources", HERE.parent / "scripts" / "cuda_resources.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    body, forces = script._body("chain10")
    step, finish, terms, _ = script._arguments(body, forces, np.dtype(np.float64))
    for fn, values in ((kernel.step_kernel, step), (kernel.finish_kernel, finish), (kernel.terms_kernel, terms)):
        assert len(values) == len(inspect.signature(fn.py_func).parameters), fn.py_func.__name__

@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """The fused kernels compile for the device's target, not only run in the simulator (which executes Python and
    so would not notice code numba's CUDA target cannot compile, such as an allocation in a helper): an sm_90 compile
    by numba-cuda and ptxas, no GPU needed (scripts/cuda_resources.py). Needs numba-cuda and a CUDA toolkit's NVVM."""
    import importlib.util

    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("needs numba-cuda (pip install numba-cuda) and a CUDA toolkit's NVVM")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    run = subprocess.run([sys.executable, str(HERE.parent / "scripts" / "cuda_resources.py"), "--body", "chain10"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    import ast
    import re

    tree = ast.parse((HERE.parent / "pbad_gym" / "kernels" / "cuda" / "kernel.py").read_text())
    n_params = {f.name: len(f.args.args) for f in tree.body if isinstance(f, ast.FunctionDef)}
    for name in ("step_kernel", "finish_kernel"):  # every generated parameter typed and passed
        found = re.search(rf"{name}: (\d+) arguments", run.stdout)
        assert found and int(found.group(1)) == n_params[name], run.stdout
    assert "terms_kernel" in run.stdout, run.stdout
