"""The one place that picks numba's threading layer (DESIGN.md §11), before the first parallel launch.

Measured on the project's 2-core shared machines (BENCHMARKS.md, "Compiled CPU backend"): see CHOICE below.
A user's own ``NUMBA_THREADING_LAYER`` always wins; ``NUMBA_NUM_THREADS`` (numba's pool size) is respected as
numba reads it, and :func:`set_threads` caps the pool at run time (e.g. to a Ray actor's ``num_cpus``).
"""
from __future__ import annotations

import os

import numba

CHOICE = "workqueue"


def configure():
    """Apply the threading-layer choice unless the environment names one (idempotent; call before launching)."""
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = CHOICE
    if numba.config.THREADING_LAYER == "omp" or os.environ.get("NUMBA_THREADING_LAYER") == "omp":
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # OpenMP spin-waits burn shared cores otherwise


def num_threads() -> int:
    """Threads the kernel splits a batch over (numba's current setting)."""
    return numba.get_num_threads()


def set_threads(n: int):
    """Use ``n`` threads (at most the pool size, NUMBA_NUM_THREADS) for the following steps."""
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))


def threading_layer() -> str:
    """The layer in use ("workqueue", "omp", "tbb"), or the configured one before the first parallel launch."""
    try:
        return numba.threading_layer()
    except ValueError:  # not launched yet
        return str(numba.config.THREADING_LAYER)
