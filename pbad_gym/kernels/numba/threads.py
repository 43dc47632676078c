"""The one place that picks numba's threading layer (DESIGN.md §11), before the first parallel launch.

Measured on the project's 2-core shared machines (BENCHMARKS.md, "Compiled CPU backend", kernel steps/s, median of
repeated calls, paired runs): OpenMP with ``OMP_WAIT_POLICY=PASSIVE`` matched or beat workqueue in every pair
(Swimmer 256 trajectories 34-50k vs 33-47k steps/s, Spider-v1 16 trajectories 14-21k vs 13-20k), while OpenMP's
default spin-waiting was erratic (Spider-v1 at 16 trajectories: 2k steps/s). OpenMP is also thread-safe (parallel
regions launched from several Python threads), which workqueue is not. So: OpenMP, passive waits, then tbb, then
workqueue when OpenMP is missing. A user's own ``NUMBA_THREADING_LAYER`` / ``OMP_WAIT_POLICY`` always win;
``NUMBA_NUM_THREADS`` (numba's pool size) is respected as numba reads it, and :func:`set_threads` caps the threads
used at run time (e.g. to a Ray actor's ``num_cpus``).
"""
from __future__ import annotations

import logging
import os

import numba

PRIORITY = ["omp", "tbb", "workqueue"]
log = logging.getLogger(__name__)
_POOL_PID = None  # the process that launched the kernel's first parallel batch


def configure():
    """Apply the threading-layer choice unless the environment names one (call before the first launch)."""
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER_PRIORITY = list(PRIORITY)
        numba.config.THREADING_LAYER = "default"
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when libgomp starts: spin-waits burn shared cores


def num_threads() -> int:
    """Threads the kernel splits a batch over (numba's current setting)."""
    return numba.get_num_threads()


def set_threads(n: int):
    """Use ``n`` threads (at most the pool size, NUMBA_NUM_THREADS) for the following steps."""
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))


def threading_layer() -> str:
    """The layer in use ("omp", "tbb", "workqueue"), or the configured one before the first parallel launch."""
    try:
        return numba.threading_layer()
    except ValueError:  # not launched yet
        return str(numba.config.THREADING_LAYER)


def parallel_allowed() -> bool:
    """Whether this process may launch a parallel batch: False in a process forked (``multiprocessing``'s "fork",
    Gymnasium's AsyncVectorEnv on Linux) from one whose GNU OpenMP pool was already started — OpenMP is not
    fork-safe there and numba would terminate the child. Such a child then steps on the calling thread (the
    serial entry, the same numbers), and says so once. Call it right before a parallel launch."""
    global _POOL_PID
    pid = os.getpid()
    if _POOL_PID is None:
        _POOL_PID = pid
    if _POOL_PID == pid:
        return True
    if threading_layer() != "omp":  # tbb and workqueue pools survive a fork
        _POOL_PID = pid
        return True
    if _POOL_PID > 0:
        log.warning("pbad_gym numba kernel: this process was forked after its parent started GNU OpenMP, which is "
                    "not fork-safe; stepping on one thread here (use the 'spawn' or 'forkserver' start method, or "
                    "NUMBA_THREADING_LAYER=workqueue, for parallel stepping in subprocesses)")
        _POOL_PID = -_POOL_PID  # warned
    return False
