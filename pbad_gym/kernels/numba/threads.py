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
import sys

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


def torch_threads():
    """PyTorch's intra-op thread count when torch is imported (None otherwise), read before a parallel launch."""
    torch = sys.modules.get("torch")
    return None if torch is None else torch.get_num_threads()


def restore_torch_threads(n):
    """Give PyTorch back its thread count ``n`` after a parallel launch: numba's OpenMP layer sets the OpenMP
    thread count that torch shares (GNU OpenMP), so a user's ``torch.set_num_threads(1)`` turned into the kernel's
    pool size after the first parallel step."""
    if n is not None:
        torch = sys.modules["torch"]
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


LAUNCH_POLICIES = ("auto", "parallel", "serial")
_POLICY = ["auto"]


def set_launch_policy(policy: str):
    """How a batch of at least SERIAL_BELOW rows launches: "auto" (default: serial or parallel, whichever this
    process measured faster for that batch, see :class:`LaunchChooser`), "parallel" (always, the pool's threads)
    or "serial" (always on the calling thread). The numbers are the same either way (rows are independent)."""
    if policy not in LAUNCH_POLICIES:
        raise ValueError(f"launch policy must be one of {LAUNCH_POLICIES}, got {policy!r}")
    _POLICY[0] = policy


def launch_policy() -> str:
    """The current launch policy (:func:`set_launch_policy`)."""
    return _POLICY[0]


class LaunchChooser:
    """Serial or parallel launch of one kind of call (a key: model, batch size, substeps), by measurement.

    A parallel launch pays a wake-up of the pool and waits for its slowest thread: on a small batch, or with a busy
    neighbour on one of the cores (a passive OpenMP waiter then sleeps a scheduler slice), it is slower than the
    calling thread alone. So each key keeps an exponential average of the wall time of both kinds of launch: the
    first call of each kind warms up and is not counted, the next :attr:`WARMUP` of each are measured, then one kind
    runs until the other's average is below :attr:`SWITCH` times its own, and the other one is tried again every
    :attr:`PROBE` calls (every :attr:`PROBE_FAR` while it is more than :attr:`FAR` times slower), so a host whose
    load changes is followed within a few hundred calls."""

    WARMUP, PROBE, PROBE_FAR, FAR, ALPHA, SWITCH = 1, 64, 512, 1.5, 0.2, 0.9

    def __init__(self):
        self._stats = {}  # key -> [calls, n_serial, n_parallel, avg_serial, avg_parallel, current kind]

    def choose(self, key) -> bool:
        """True: launch this call in parallel."""
        s = self._stats.get(key)
        if s is None:
            if len(self._stats) > 256:
                self._stats.clear()
            s = self._stats[key] = [0, 0, 0, 0.0, 0.0, True]
        s[0] += 1
        if s[2] <= self.WARMUP:
            return True
        if s[1] <= self.WARMUP:
            return False
        # hysteresis: the other kind takes over only when clearly faster, so noise does not make it flip-flop
        cur, other = (s[4], s[3]) if s[5] else (s[3], s[4])
        if other < self.SWITCH * cur:
            s[5] = not s[5]
            cur, other = other, cur
        every = self.PROBE_FAR if other > self.FAR * cur else self.PROBE
        return s[5] != (s[0] % every == 0)

    def record(self, key, parallel: bool, seconds: float):
        """Account a call of ``key`` launched ``parallel`` that took ``seconds``."""
        s = self._stats[key]
        n, avg = (2, 4) if parallel else (1, 3)
        s[n] += 1
        if s[n] == 2:  # the first measured call sets the average (the one before warmed up)
            s[avg] = seconds
        elif s[n] > 2:
            s[avg] += self.ALPHA * (seconds - s[avg])

    def averages(self, key):
        """(serial, parallel) average wall seconds of ``key`` so far (0.0 where not measured yet)."""
        s = self._stats.get(key)
        return (0.0, 0.0) if s is None else (s[3], s[4])


CHOOSER = LaunchChooser()
