#!/usr/bin/env bash
# GPU check of pbad_gym in one command, within 8 minutes: the GPU tests (pytest -m gpu: the lock-step CuPy path and
# the fused kernel, backend="cuda") and pbad-bench fig4 (CPU, lock-step GPU and fused GPU side by side).
#
#   scripts/device_check.sh OUTDIR        on the GPU machine, from the repository root
#   scripts/device_check.sh --fetch-wheels   here (with network), once: the pure-Python wheels the GPU machine lacks
#
# Writes into OUTDIR (7 files, fig4/ one folder down): nvidia-smi.txt, device_check.log (versions, the pytest and
# fig4 output, a summary), junit-gpu.xml, fig4/fig4.png, fig4/fig4.md (tables for BENCHMARKS.md),
# fig4/fig4_chain.csv, fig4/fig4_envs.csv.
#
# Installs nothing from the network beyond the package registry: CuPy is used where it imports (the GPU image has
# cupy-cuda13x); otherwise, where nvidia-smi sees a GPU, `pip install cupy-cuda12x` is tried. The fused kernel needs
# numba.cuda to see the GPU (the image has numba-cuda); otherwise `pip install numba-cuda==0.30.4` is tried (its
# wheel may also travel in ./.whl). Compiled fused kernels are cached on disk for the run (PBAD_CUDA_CACHE=1:
# the tests compile them, fig4 loads them). The project is
# installed with `pip install --no-deps --no-build-isolation -e .` (its `[gpu]` extra names the `cupy` source distribution, which
# pip would try to build even where a cupy-cuda1Nx wheel is installed), and its missing pure-Python dependencies
# (gymnasium, cma, Farama-Notifications) come from ./.whl when present (made by --fetch-wheels, travelling with the
# working tree: name `.whl` in the device tool's `carry`).
#
# SKIP_INSTALL=1 leaves the project uninstalled (the working tree goes on PYTHONPATH; for a dry run on a CPU).
# Time limits (seconds, overridable): T_TESTS (pytest, 250), FIG4_BUDGET (fig4's own budget, 155) and T_FIG4 (its
# hard limit, 200); with the installs about 8 minutes at most. Exit status: 0 when the tests and fig4 both succeeded, else the first failure's status.
set -u

WHEELS=(gymnasium==1.4.0 cma==4.5.0 farama-notifications==0.0.6)

if [ "${1:-}" = "--fetch-wheels" ]; then
    mkdir -p .whl .git/info
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: -d .whl "${WHEELS[@]}" || exit $?
    ls -l .whl
    exit 0
fi

OUT=${1:?usage: scripts/device_check.sh OUTDIR | --fetch-wheels}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/device_check.log"
PY=${PYTHON:-python3}
T_TESTS=${T_TESTS:-250}
FIG4_BUDGET=${FIG4_BUDGET:-155}
T_FIG4=${T_FIG4:-200}
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/pbad_cupy_cache} MPLBACKEND=Agg
export PBAD_CUDA_CACHE=${PBAD_CUDA_CACHE:-1}
export NUMBA_THREADING_LAYER=${NUMBA_THREADING_LAYER:-workqueue}
start=$(date +%s)
say() { echo "[device_check +$(( $(date +%s) - start ))s] $*" | tee -a "$LOG"; }

: > "$LOG"
say "start $(date -u +%FT%TZ) in $(pwd), python $($PY -V 2>&1)"
(nvidia-smi; echo; nvidia-smi -q -d CLOCK,MEMORY,COMPUTE 2>/dev/null | head -80) > "$OUT/nvidia-smi.txt" 2>&1 \
    || say "nvidia-smi failed (see nvidia-smi.txt)"

# --- dependencies ------------------------------------------------------------------------------------------------
if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/pbad_site \
        .whl/*.whl >> "$LOG" 2>&1 && export PYTHONPATH=/tmp/pbad_site${PYTHONPATH:+:$PYTHONPATH}
    say "installed carried wheels: $(ls .whl | tr '\n' ' ')"
fi
if ! $PY -c "import cupy" 2>/dev/null && nvidia-smi > /dev/null 2>&1; then  # no GPU, no CuPy install
    say "CuPy does not import: trying pip install cupy-cuda12x"
    $PY -m pip install -q cupy-cuda12x >> "$LOG" 2>&1 || say "pip install cupy-cuda12x failed"
fi
numba_cuda_ok() { timeout 60 $PY -c "from numba import cuda; assert cuda.is_available()" > /dev/null 2>&1; }
if ! numba_cuda_ok && nvidia-smi > /dev/null 2>&1; then  # the fused kernel's compiler and driver binding
    say "numba.cuda does not see the GPU: trying pip install numba-cuda==0.30.4"
    $PY -m pip install -q "numba-cuda==0.30.4" >> "$LOG" 2>&1 || say "pip install numba-cuda failed"
    numba_cuda_ok || say "numba.cuda still sees no GPU: the fused-kernel tests skip and fig4 marks its columns"
fi
if [ -n "${SKIP_INSTALL:-}" ]; then
    say "SKIP_INSTALL set: the project is not installed, the working tree goes on PYTHONPATH"
elif $PY -m pip install -q --no-deps --no-build-isolation -e . >> "$LOG" 2>&1; then
    say "installed the project (pip install --no-deps -e .)"
else
    say "pip install -e . failed: using the working tree on PYTHONPATH"
fi
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
$PY - >> "$LOG" 2>&1 <<'EOF'
import importlib
for name in ("numpy", "scipy", "gymnasium", "cma", "cupy", "torch", "numba", "matplotlib", "pytest"):
    try:
        mod = importlib.import_module(name)
        print(f"  {name} {getattr(mod, '__version__', '?')}")
    except Exception as err:  # noqa: BLE001
        print(f"  {name}: NOT importable ({type(err).__name__}: {err})")
try:
    import cupy
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    print("  CUDA devices:", cupy.cuda.runtime.getDeviceCount(), name.decode() if isinstance(name, bytes) else name,
          "runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
except Exception as err:  # noqa: BLE001
    print("  no CUDA device through CuPy:", err)
from pbad_gym.arrays import gpu_available
from pbad_gym.kernels.cuda import unavailable_reason
from pbad_gym.simulator import BACKENDS
print("  pbad_gym.arrays.gpu_available():", gpu_available(), "; Simulator backends:", BACKENDS)
try:
    import numba_cuda
    print("  numba-cuda", getattr(numba_cuda, "__version__", "?"))
except ImportError:
    print("  numba-cuda: not installed (numba's own numba.cuda, if any)")
print("  fused kernel (backend='cuda'):", unavailable_reason("cuda") or "can run")
EOF
tail -n 17 "$LOG"

# --- GPU tests -----------------------------------------------------------------------------------------------------
say "pytest -m gpu (limit ${T_TESTS}s)"
per_test=()
$PY -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=120)  # a hung test fails alone, junit still written
timeout -k 10 "$T_TESTS" $PY -m pytest -m gpu tests/test_gpu.py -q -rfEs -p no:cacheprovider "${per_test[@]}" \
    --junitxml="$OUT/junit-gpu.xml" 2>&1 | tee -a "$LOG"
rc_tests=${PIPESTATUS[0]}
say "pytest exit status $rc_tests"

say "fused-kernel properties (junit): $(grep -oE \
    'name="(regs_per_thread|local_mem_per_thread|equal_iteration_share|max_dq|blocking_runtime_calls)" value="[^"]*"' \
    "$OUT/junit-gpu.xml" 2>/dev/null | tr '\n' ' ')"

# --- fig4 ----------------------------------------------------------------------------------------------------------
say "pbad-bench fig4 (budget ${FIG4_BUDGET}s, limit ${T_FIG4}s)"
timeout -k 10 "$T_FIG4" $PY -m pbad_gym.cli fig4 --out "$OUT" --budget "$FIG4_BUDGET" \
    --links 5 10 20 40 --trajectories 10 30 100 300 1000 3000 --steps 10 \
    --env-batches 256 1024 4096 16384 65536 --cpu-max-envs 1024 --env-seconds 1.5 2>&1 | tee -a "$LOG"
rc_fig4=${PIPESTATUS[0]}
say "fig4 exit status $rc_fig4"

say "summary: pytest $rc_tests, fig4 $rc_fig4, $(( $(date +%s) - start ))s in all; files: $(cd "$OUT" && find . -type f | sort | tr '\n' ' ')"
[ "$rc_tests" -ne 0 ] && exit "$rc_tests"
exit "$rc_fig4"
