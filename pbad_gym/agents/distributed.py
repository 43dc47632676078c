"""The trainers past one process: a vector env whose rows are shared out over Ray actors (``workers > 0``).

Ray itself is imported only when a config asks for workers (``pip install -e ".[distributed]"``). EvoTorch's
split: the searcher (pycma, the PPO learner) stays in the driver; each actor owns vector envs it builds itself
from (env id, kwargs) — an environment is never pickled to start an actor — and returns only what the driver
merges.

:class:`RayVectorEnv` is a ``gymnasium.vector.VectorEnv`` of ``num_envs`` rows, actor k owning a contiguous block:

- **CMA-ES** (``rollout.evaluate`` sees :meth:`RayVectorEnv.evaluate_population`): the candidates are split into
  contiguous slices, one per actor; an actor runs ``rollout.evaluate`` on its slice (reset seeds per row, drawn
  from the run seed and the iteration by the trainer, so they do not depend on the number of workers) and returns
  per-row returns, distances, divergence flags and observation statistics (count, sum, sum of squares per row).
  ``rollout.merge_results`` concatenates the slices and reduces the sums in one fixed order, so the metrics equal
  a local run's bit for bit whenever the environment's rows are independent of the batch (PBAD's are).
- **PPO** (``reset`` / ``step``): PPO normalises observations and rewards with statistics updated at every step
  across all rows and samples actions from torch's one global generator, so the rows of a rollout are coupled
  step by step. The driver therefore keeps the networks, the statistics and the sampling, and the actors step
  their blocks in lock step (one round trip per step): the same numbers as a local run, not only to round-off.

Fault tolerance: an actor that dies (``RayActorError``: killed, node lost) is replaced by a new one. A population
slice is simply evaluated again (it starts from its reset seeds). A PPO block is rebuilt from its last snapshot
(taken at reset and every ``SNAPSHOT_EVERY`` steps) and the calls since are replayed, which reproduces its state
exactly. ``RayVectorEnv`` pickles (the blocks' states), so PPO checkpoints and ``--resume`` work as locally. An
environment that does not pickle (a SyncVectorEnv of Gymnasium envs) gets no snapshots: its replay starts at the
last seeded reset, and it does not pickle either, so PPO resets it at checkpoint boundaries as in one process.

numba threads: an actor sets NUMBA_NUM_THREADS / OMP / MKL / OpenBLAS threads to its ``worker_cpus`` in its
environment when it starts, before it builds an env (the first import of numba in that process; Ray sets only
OMP_NUM_THREADS, and numba sizes its pool from the CPU count), or caps numba's running pool with
``numba.set_num_threads`` where numba is imported already. (A ``runtime_env`` with these variables would do the
same but costs a fresh worker process per actor, ~4 s each measured on a loaded 2-core host, against ~1 s for a
prestarted one.) An environment whose kwargs ask for ``device="cuda"`` gets one GPU per actor.
"""
from __future__ import annotations

import copy
import os
import pickle
import time

import gymnasium
import numpy as np
from gymnasium.vector.utils import batch_space

from .config import EnvConfig
from .rollout import env_dt, evaluate, merge_results
from .vecenv import make_vec_env

SNAPSHOT_EVERY = 256  # PPO: steps between snapshots of the actors' blocks (the replay after a failure is shorter)
MAX_REPLACEMENTS = 3  # replacements of one actor within one call before the error is raised
POOL_WAIT_S = 10.0  # seconds a joined cluster gets to show room for the pool before it is refused
THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def import_ray():
    """The ``ray`` module, or an ImportError saying how to install it."""
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name != "ray":
            raise
        raise ImportError('workers > 0 needs Ray: pip install -e ".[distributed]" (or set workers=0)') from None
    return ray


def ray_init_kwargs(address=None, num_cpus=None) -> dict:
    """``ray.init``'s arguments for ``address``. None: a new local cluster for this run (``address="local"``:
    never one a ``ray start --head`` left running, which would refuse ``num_cpus``), with max(this machine's CPUs,
    ``num_cpus``) CPUs — more actors than cores share them rather than wait forever — and no dashboard. "auto" or
    host:port: join that cluster, with no resource arguments (Ray refuses them when joining)."""
    if address is None:
        return {"address": "local", "num_cpus": max(os.cpu_count() or 1, int(num_cpus or 0)),
                "include_dashboard": False, "log_to_driver": True}
    return {"address": address, "log_to_driver": True}


def init_ray(address=None, num_cpus=None):
    """Connect to Ray once per process with :func:`ray_init_kwargs`. Returns the seconds it took (0 when Ray was
    already initialised).

    A local cluster's workers run at niceness 0 (``RAY_worker_niceness``, unless set): Ray's default, 15, keeps
    its daemons responsive on a cluster node but starves the actors on a shared host (measured, not in BENCHMARKS.md:
    an actor got ~40 % of a core beside other jobs while the driver got all of one)."""
    ray = import_ray()
    if ray.is_initialized():
        return 0.0
    t0 = time.perf_counter()
    if address is None:
        os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(**ray_init_kwargs(address, num_cpus))
    return time.perf_counter() - t0


def _pool_shortfall(actors, cpus_per_actor, gpus_per_actor, have) -> str | None:
    """None when cluster resources ``have`` hold the pool, else what is missing (one phrase)."""
    need_cpu, need_gpu = actors * cpus_per_actor, actors * gpus_per_actor
    if need_cpu <= have.get("CPU", 0) and need_gpu <= have.get("GPU", 0):
        return None
    return (f"workers={actors} × worker_cpus={cpus_per_actor} need {need_cpu} CPUs"
            f"{f' and {need_gpu} GPUs' if need_gpu else ''}; the Ray cluster has {have.get('CPU', 0):g} CPUs "
            f"and {have.get('GPU', 0):g} GPUs")


def check_pool_fits(actors, cpus_per_actor=1, gpus_per_actor=0, address=None, wait_s=None) -> None:
    """Start / join Ray (:func:`init_ray`) and raise ValueError when the cluster cannot hold ``actors`` actors
    (their reservations would wait forever). A joined cluster gets ``wait_s`` seconds (default POOL_WAIT_S) to
    show the room, for an autoscaler adding nodes; a local one is refused at once (it will not grow)."""
    ray = import_ray()
    init_ray(address, num_cpus=actors * cpus_per_actor)
    wait_s = (POOL_WAIT_S if wait_s is None else wait_s) if address is not None else 0.0
    deadline = time.monotonic() + wait_s
    while True:
        short = _pool_shortfall(actors, cpus_per_actor, gpus_per_actor, ray.cluster_resources())
        if short is None:
            return
        if time.monotonic() >= deadline:
            waited = f" (after {wait_s:g} s)" if wait_s else ""
            raise ValueError(f"{short}{waited}: lower workers / worker_cpus, or "
                             f"{'join a larger cluster with ray_address' if address is None else 'add nodes'}")
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))


class EnvWorker:
    """The actor (wrapped by ``ray.remote`` in :func:`_actor_class`): owns the vector envs of one block of rows."""

    def __init__(self, env_id, kwargs, threads):
        import sys

        for var in THREAD_VARS:  # before the env (and with it numba / BLAS) is first imported in this process
            os.environ[var] = str(threads)
        if "numba" in sys.modules:  # imported already (a reused worker): cap the running pool instead
            import numba

            numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
        self.env_id, self.kwargs = env_id, dict(kwargs)
        self.envs = {}  # rows -> vector env of population evaluation
        self.env = None  # the PPO block (reset / step)

    def _make(self, n):
        return make_vec_env(EnvConfig(id=self.env_id, kwargs=self.kwargs, num_envs=n), n)

    def _pop_env(self, n):
        if n not in self.envs:
            self.envs[n] = self._make(n)
        return self.envs[n]

    def describe(self, n):
        """Spaces, metadata and dt of the environment (building the n-row evaluation env)."""
        env = self._pop_env(n)
        try:
            dt = env_dt(env)
        except ValueError:
            dt = None
        return env.single_observation_space, env.single_action_space, dict(env.metadata), dt

    def pickles(self):
        """Whether this environment's vector envs pickle (PPO checkpoints and the snapshots need it)."""
        try:
            pickle.dumps(next(iter(self.envs.values())))
        except (pickle.PicklingError, TypeError, AttributeError):
            return False
        return True

    def threads(self):
        """What the thread caps are inside this actor (for tests and the benchmark)."""
        out = {var: os.environ.get(var) for var in THREAD_VARS}
        try:
            import numba

            out["numba_threads"] = numba.get_num_threads()  # the threads a parallel kernel of this actor uses
        except ImportError:
            out["numba_threads"] = None
        out["pid"] = os.getpid()
        return out

    def ping(self, payload=None):
        return payload

    def evaluate(self, policy, episodes_per_candidate, max_steps, seeds):
        """``rollout.evaluate`` of ``policy`` (its rows' slice) on a len(seeds)-row env; (result, wall seconds,
        CPU seconds of this process)."""
        t0, c0 = time.perf_counter(), time.process_time()
        res = evaluate(self._pop_env(len(seeds)), policy, episodes_per_candidate, max_steps, list(seeds))
        res.obs_stats = None  # the driver reduces the per-row sums
        return res, time.perf_counter() - t0, time.process_time() - c0

    # --- PPO block: lock-step reset / step, snapshots for fault tolerance -------------------------------------
    def open(self, n, state=None):
        if self.env is not None:
            self.env.close()
        self.env = self._make(n) if state is None else pickle.loads(state)
        return True

    def reset(self, seed, options):
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        return self.env.step(actions)

    def state(self):
        """The block pickled (its episodes in progress and reset generators), or None when it does not pickle."""
        try:
            return pickle.dumps(self.env)
        except (pickle.PicklingError, TypeError, AttributeError):
            return None

    def close(self):
        for env in [*self.envs.values(), self.env]:
            if env is not None:
                env.close()
        self.envs, self.env = {}, None
        return True


_ACTOR = None


def _actor_class():
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = import_ray().remote(EnvWorker)
    return _ACTOR


def _slice_policy(policy, rows):
    """The policy of rows ``rows`` (a slice): per-row parameter arrays are cut, everything else is shared."""
    params = getattr(policy, "params", None)
    sub = copy.copy(policy)
    if params is not None and np.ndim(params) == 2:
        sub.params = np.asarray(params)[rows]
    return sub


def _concat_infos(infos, sizes):
    """One vector-env info dict from the blocks' (keys missing in a block: zeros, and False in ``_key``)."""
    out = {}
    keys = [k for info in infos for k in info]
    for key in dict.fromkeys(keys):
        parts, template = [], next(np.asarray(info[key]) for info in infos if key in info)
        for info, n in zip(infos, sizes):
            if key in info:
                parts.append(np.asarray(info[key]))
            else:
                parts.append(np.zeros((n,) + template.shape[1:], template.dtype))
        out[key] = np.concatenate(parts)
    return out


class RayVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` rows of ``env_cfg`` (an :class:`agents.config.EnvConfig`: id and kwargs) on ``workers`` Ray
    actors (fewer when there are fewer rows), each reserving ``worker_cpus`` CPUs (its thread cap) and one GPU
    when the env's kwargs say ``device="cuda"``. Connects to Ray with :func:`init_ray` (``ray_address``).

    ``replacements`` counts the actors replaced after a failure; ``compute_seconds`` / ``cpu_seconds`` hold each
    actor's own wall / CPU time of the last population evaluation (the benchmark's per-actor throughput)."""

    on_submit = None  # called (as a method) once the calls of a round are submitted: tests kill an actor there

    def __init__(self, env_cfg, num_envs, workers, ray_address=None, worker_cpus=1):
        self.env_id, self.env_kwargs = env_cfg.id, dict(env_cfg.kwargs)
        self.num_envs, self.ray_address, self.worker_cpus = int(num_envs), ray_address, int(worker_cpus)
        if int(workers) < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        self.workers = min(int(workers), self.num_envs)
        self.blocks = [b for b in np.array_split(np.arange(self.num_envs), self.workers)]
        self.replacements = 0
        self.compute_seconds, self.cpu_seconds = [], []
        self._actors = None
        self._pending_states = None
        self._check_resources()
        self._ensure_actors()
        ray = import_ray()
        obs_space, act_space, metadata, dt = ray.get(self._actors[0].describe.remote(len(self.blocks[0])))
        self._set_spaces(obs_space, act_space, metadata, dt)
        self.env_pickles = ray.get(self._actors[0].pickles.remote())

    def _set_spaces(self, obs_space, act_space, metadata, dt):
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, self.num_envs)
        self.action_space = batch_space(act_space, self.num_envs)
        self.metadata = metadata
        if dt is not None:
            self.dt = dt

    # --- actors ---------------------------------------------------------------------------------------------
    def _gpus(self):
        return 1 if str(self.env_kwargs.get("device", "cpu")).startswith("cuda") else 0

    def _check_resources(self):
        """Start / join Ray, and refuse a pool the cluster cannot hold (its actors would wait forever)."""
        check_pool_fits(len(self.blocks), self.worker_cpus, self._gpus(), self.ray_address)

    def _spawn(self):
        init_ray(self.ray_address)
        gpus = self._gpus()
        return _actor_class().options(num_cpus=self.worker_cpus, num_gpus=gpus, max_restarts=0).remote(
            self.env_id, self.env_kwargs, self.worker_cpus)

    def _ensure_actors(self):
        if self._actors is not None:
            return
        self._actors = [self._spawn() for _ in self.blocks]
        self._snapshots = [None] * len(self.blocks)  # per block: pickled state the log replays from (None: fresh)
        self._logs = [[] for _ in self.blocks]  # per block: (method, args) since the snapshot
        self._steps_since_snapshot = 0
        if self._pending_states is not None:  # unpickled: restore the blocks' states
            states, self._pending_states = self._pending_states, None
            self._snapshots = list(states)
            import_ray().get([a.open.remote(len(b), s) for a, b, s in zip(self._actors, self.blocks, states)])
            self._block_open = True
        else:
            self._block_open = False

    def _replace(self, k):
        """A fresh actor for block k (the dead one is killed for good)."""
        ray = import_ray()
        try:
            ray.kill(self._actors[k], no_restart=True)
        except Exception:  # noqa: BLE001 — already gone
            pass
        self._actors[k] = self._spawn()
        self.replacements += 1

    def _gather(self, submit):
        """``submit(k, actor) -> ObjectRef`` for every block, then the results; a block whose actor died gets a
        new actor and ``submit`` again (up to MAX_REPLACEMENTS times)."""
        ray = import_ray()
        refs = [submit(k, a) for k, a in enumerate(self._actors)]
        if self.on_submit is not None:
            self.on_submit()
        out = []
        for k, ref in enumerate(refs):
            for attempt in range(MAX_REPLACEMENTS + 1):
                try:
                    out.append(ray.get(ref))
                    break
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                    if attempt == MAX_REPLACEMENTS:
                        raise
                    self._replace(k)
                    ref = submit(k, self._actors[k], recover=True)
        return out

    # --- population evaluation (CMA-ES) ------------------------------------------------------------------------
    def evaluate_population(self, policy, episodes_per_candidate, max_steps, seeds):
        """``rollout.evaluate`` of ``policy`` over the rows, candidates split into contiguous slices across the
        actors; the merged result equals the local one (see the module docstring)."""
        E = int(episodes_per_candidate)
        C = self.num_envs // E
        slices = [s for s in np.array_split(np.arange(C), len(self._actors)) if len(s)]
        rows = [slice(int(s[0]) * E, (int(s[-1]) + 1) * E) for s in slices]
        pol = [_slice_policy(policy, r) for r in rows]

        def submit(k, actor, recover=False):
            if k >= len(rows):
                return actor.ping.remote(None)
            return actor.evaluate.remote(pol[k], E, int(max_steps), list(seeds[rows[k]]))

        results = self._gather(submit)[:len(rows)]
        self.compute_seconds = [t for _, t, _ in results]
        self.cpu_seconds = [c for _, _, c in results]
        return merge_results([r for r, _, _ in results], E)

    # --- lock-step vector env (PPO) ----------------------------------------------------------------------------
    def _call_blocks(self, method, per_block_args):
        """Call ``method`` on every block with its args, logging the call for replay after a failure."""
        for k, args in enumerate(per_block_args):
            self._logs[k].append((method, args))

        def submit(k, actor, recover=False):
            if recover:  # rebuild the block from its snapshot and replay the calls since (the last is this one)
                actor.open.remote(len(self.blocks[k]), self._snapshots[k])
                refs = [getattr(actor, m).remote(*a) for m, a in self._logs[k]]
                return refs[-1]
            return getattr(actor, method).remote(*per_block_args[k])

        return self._gather(submit)

    def reset(self, *, seed=None, options=None):
        self._ensure_actors()
        ray = import_ray()
        if not self._block_open:
            ray.get([a.open.remote(len(b), None) for a, b in zip(self._actors, self.blocks)])
            self._block_open = True
        if seed is None:
            seeds = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):  # row i gets seed + i, as a native batch / SyncVectorEnv
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed must be an int, None or a list of {self.num_envs} ints/None, got {seed!r}")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        args = []
        for b in self.blocks:
            opts = dict(options)
            if mask is not None:
                opts["reset_mask"] = np.asarray(mask)[b]
            block_seeds = [seeds[i] for i in b]
            args.append((None if all(s is None for s in block_seeds) else block_seeds, opts or None))
        if mask is None and seed is not None:  # a seeded full reset fixes the state: replay from a fresh block
            self._snapshots = [None] * len(self.blocks)
            self._logs = [[] for _ in self.blocks]
            self._steps_since_snapshot = 0
        out = self._call_blocks("reset", args)
        obs = np.concatenate([o for o, _ in out])
        return obs, _concat_infos([i for _, i in out], [len(b) for b in self.blocks])

    def step(self, actions):
        self._ensure_actors()
        if not self._block_open:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        out = self._call_blocks("step", [(actions[b[0]:b[-1] + 1],) for b in self.blocks])
        self._steps_since_snapshot += 1
        if self._steps_since_snapshot >= SNAPSHOT_EVERY and self.env_pickles:
            self._snapshot()
        sizes = [len(b) for b in self.blocks]
        return (np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out]),
                np.concatenate([o[2] for o in out]), np.concatenate([o[3] for o in out]),
                _concat_infos([o[4] for o in out], sizes))

    def _snapshot(self):
        states = self._gather(lambda k, a, recover=False: (self._recover_block(k, a) if recover
                                                           else a.state.remote()))
        if all(s is not None for s in states):
            self._snapshots = states
            self._logs = [[] for _ in self.blocks]
        self._steps_since_snapshot = 0

    def _recover_block(self, k, actor):
        actor.open.remote(len(self.blocks[k]), self._snapshots[k])
        for m, a in self._logs[k]:
            getattr(actor, m).remote(*a)
        return actor.state.remote()

    def actor_threads(self):
        """Each actor's thread caps (:meth:`EnvWorker.threads`)."""
        self._ensure_actors()
        return import_ray().get([a.threads.remote() for a in self._actors])

    def close(self, **kwargs):
        ray = import_ray()
        if self._actors is not None and ray.is_initialized():
            for a in self._actors:
                try:
                    ray.kill(a, no_restart=True)
                except Exception:  # noqa: BLE001 — already gone
                    pass
        self._actors = None

    # --- pickling (PPO checkpoints): the blocks' states, not the actors -------------------------------------------
    def __getstate__(self):
        if not self.env_pickles:
            raise TypeError(f"the sub-environments of {self.env_id} do not pickle")
        self._ensure_actors()
        if self._block_open:
            states = self._gather(lambda k, a, recover=False: (self._recover_block(k, a) if recover
                                                               else a.state.remote()))
            if any(s is None for s in states):
                raise TypeError(f"the sub-environments of {self.env_id} do not pickle")
        else:
            states = [None] * len(self.blocks)
        keep = ("env_id", "env_kwargs", "num_envs", "ray_address", "worker_cpus", "workers", "blocks",
                "single_observation_space", "single_action_space", "metadata")
        d = {k: getattr(self, k) for k in keep}
        d["dt"] = getattr(self, "dt", None)
        d["env_pickles"] = self.env_pickles
        d["states"] = states
        d["block_open"] = self._block_open
        return d

    def __setstate__(self, d):
        for k in ("env_id", "env_kwargs", "num_envs", "ray_address", "worker_cpus", "workers", "blocks"):
            setattr(self, k, d[k])
        self._set_spaces(d["single_observation_space"], d["single_action_space"], d["metadata"], d["dt"])
        self.env_pickles = d["env_pickles"]
        self.replacements, self.compute_seconds, self.cpu_seconds = 0, [], []
        self._actors = None
        self._pending_states = d["states"] if d["block_open"] else None
        self._block_open = False
