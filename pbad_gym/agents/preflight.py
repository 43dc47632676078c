"""Checks ``pbad-train`` runs before it writes anything, so a start that fails leaves nothing on disk.

- :func:`check_env`: the environment of the config is built once (one row) and its spaces checked: an unknown or
  mistyped ``env.kwargs`` entry, an id whose dependencies are missing or a discrete action space is a
  :class:`ConfigError` naming the key, not a traceback from inside the trainer.
- :func:`check_resume_overrides`: ``--resume`` keeps what the checkpoint's shapes and the task depend on.
- :func:`check_pool`: a Ray pool the cluster cannot hold is refused before the run folder exists.
- :func:`kernel_cache_cold`: whether the first step will compile the numba kernel (about a minute, once).

Every error message is one line.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import sys

import gymnasium

from .config import TrainConfig

# what --resume must not change: the checkpoint holds arrays of these shapes (population, policy, networks,
# rollout buffers, pickled environments), or the run would continue on another task than its metrics so far
RESUME_FIXED = ("algo", "env.id", "env.kwargs", "env.num_envs", "cmaes.policy", "cmaes.popsize", "cmaes.hidden",
                "ppo.hidden", "ppo.cost_limit", "shac.hidden")
ENV_ERRORS = (ValueError, TypeError, ImportError, AssertionError, gymnasium.error.Error)


class ConfigError(ValueError):
    """A config or command line that cannot start a run; the message is one line naming the key or file."""


def one_line(text) -> str:
    """``text`` with its whitespace runs (newlines included) collapsed to single spaces."""
    return " ".join(str(text).split())


def _get(cfg, dotted: str):
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _applies(key: str, algo: str) -> bool:
    """Whether a RESUME_FIXED key matters to ``algo`` (CMA-ES ignores env.num_envs and the other sections)."""
    section = key.split(".")[0]
    if section in ("cmaes", "ppo", "shac"):
        return section == algo
    return key != "env.num_envs" or algo != "cmaes"


def _same(key, old, new) -> bool:
    if key == "ppo.cost_limit":  # the cost critic exists or not; the limit itself may change
        return (old is None) == (new is None)
    return old == new


def check_resume_overrides(saved: TrainConfig, new: TrainConfig) -> None:
    """Raise :class:`ConfigError` when the overrides of a resumed run change a key of RESUME_FIXED."""
    for key in RESUME_FIXED:
        if not _applies(key, saved.algo):
            continue
        old, value = _get(saved, key), _get(new, key)
        if not _same(key, old, value):
            raise ConfigError(f"--resume cannot change {key} ({old!r} -> {value!r}): the checkpoint was made with "
                              f"{old!r}; start a fresh run with the config instead")


def check_budget(cfg: TrainConfig) -> None:
    """Raise :class:`ConfigError` when PPO's or SHAC's timesteps do not fill one rollout (no iteration would run)."""
    n = cfg.env.num_envs
    for algo, steps in (("ppo", "num_steps"), ("shac", "horizon")):
        p = getattr(cfg, algo)
        if cfg.algo == algo and p.total_timesteps < n * getattr(p, steps):
            raise ConfigError(f"{algo}.total_timesteps ({p.total_timesteps}) must be at least env.num_envs × "
                              f"{algo}.{steps} ({n} × {getattr(p, steps)} = {n * getattr(p, steps)})")


def training_env_config(cfg: TrainConfig):
    """The EnvConfig the trainer builds its environments from (CMA-ES: time limit at episode_steps)."""
    if cfg.algo == "cmaes":
        from .cmaes import with_episode_steps

        return with_episode_steps(cfg.env, cfg.cmaes.episode_steps)
    return cfg.env


def _entry_defaults(env_id: str) -> dict:
    """Keyword defaults of the id's (vector) entry point and its base classes ({} when they cannot be read)."""
    from gymnasium.envs.registration import load_env_creator

    spec = gymnasium.spec(env_id)
    entry = spec.vector_entry_point or spec.entry_point
    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except ENV_ERRORS:
        return {}  # reported by check_env when it builds the env
    functions = [c.__init__ for c in inspect.getmro(creator)] if inspect.isclass(creator) else [creator]
    defaults = {}
    for fn in functions:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            continue
        for p in params:
            if p.default is not p.empty:
                defaults.setdefault(p.name, p.default)
    return defaults


def _type_error(name, value, default):
    """None, or why ``value`` cannot stand where the entry point's default is ``default`` (bool, int, float, str).
    YAML gives '40' for a quoted number and 2.0 for an integer written with a point: both are mistakes here. A
    float default may still take a list (e.g. one gear per actuator): the environment checks those."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, bool):
        ok, want = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, want = number and isinstance(value, int), "an integer"
    elif isinstance(default, float):
        ok, want = (math.isfinite(value) if number else not isinstance(value, (str, bool))), "a finite number"
    elif isinstance(default, str):
        ok, want = isinstance(value, str), "a string"
    else:
        return None
    return None if ok else f"env.kwargs.{name} must be {want}, got {value!r}"


def check_kwarg_types(env_id: str, kwargs: dict) -> None:
    """Raise :class:`ConfigError` for an ``env.kwargs`` value whose type differs from the entry point's default
    (a string where a number is expected, a float where an integer is)."""
    defaults = _entry_defaults(env_id)
    for name, value in kwargs.items():
        if value is not None and name in defaults:
            why = _type_error(name, value, defaults[name])
            if why:
                raise ConfigError(why)


def _check_spaces(cfg: TrainConfig, envs) -> None:
    act, obs = envs.single_action_space, envs.single_observation_space
    Box = gymnasium.spaces.Box
    if not isinstance(act, Box) or len(act.shape) != 1 or act.dtype.kind != "f":
        raise ConfigError(f"env.id {cfg.env.id!r} has actions {act}; the trainers need continuous actions "
                          f"(a 1-D float Box)")
    if cfg.algo in ("ppo", "shac") and (not isinstance(obs, Box) or len(obs.shape) != 1):
        raise ConfigError(f"env.id {cfg.env.id!r} has observations {obs}; {cfg.algo.upper()} needs a flat Box")


def check_env(cfg: TrainConfig) -> None:
    """Build the config's environment with one row and check it suits the trainer; :class:`ConfigError` (one
    line naming env.id / env.kwargs) otherwise."""
    from .vecenv import make_vec_env

    env_cfg = dataclasses.replace(training_env_config(cfg), num_envs=1)
    check_kwarg_types(cfg.env.id, cfg.env.kwargs)
    try:
        envs = make_vec_env(env_cfg, 1)
    except ENV_ERRORS as exc:
        raise ConfigError(f"env.id {cfg.env.id!r} with env.kwargs {dict(cfg.env.kwargs)}: "
                          f"{type(exc).__name__}: {one_line(exc)}") from None
    try:
        _check_spaces(cfg, envs)
    finally:
        envs.close()
    if cfg.algo == "shac":
        _check_differentiable(cfg)


def _check_differentiable(cfg: TrainConfig) -> None:
    """SHAC steps the env's differentiable form: refuse an env it does not cover, naming the ones it does."""
    try:
        from ..diff import DiffVecEnv

        DiffVecEnv(cfg.env.id, 1, **cfg.env.kwargs)
    except ImportError as exc:
        raise ConfigError(one_line(exc)) from None
    except ValueError as exc:
        raise ConfigError(f"algo shac on env.id {cfg.env.id!r}: {one_line(exc)}") from None


def train_rows(cfg: TrainConfig) -> int:
    """Rows of the trainer's vector env: popsize × episodes_per_candidate (CMA-ES), env.num_envs (PPO)."""
    if cfg.algo == "cmaes":
        return cfg.cmaes.popsize * cfg.cmaes.episodes_per_candidate
    return cfg.env.num_envs


def check_pool(cfg: TrainConfig) -> None:
    """With ``workers > 0``: join / start Ray and refuse (:class:`ConfigError`) a pool the cluster cannot hold."""
    if not cfg.workers:
        return
    from .distributed import check_pool_fits, import_ray

    try:
        import_ray()
        actors = min(cfg.workers, train_rows(cfg))
        check_pool_fits(actors, cfg.worker_cpus, gpus_per_actor=_gpus(cfg), address=cfg.ray_address)
    except (ImportError, ValueError, ConnectionError) as exc:
        raise ConfigError(one_line(exc)) from None


def _gpus(cfg) -> int:
    return 1 if str(cfg.env.kwargs.get("device", "cpu")).startswith("cuda") else 0


def kernel_cache_cold() -> bool:
    """True when the numba kernel is in use (imported by a built env) and its on-disk cache holds no valid entry
    for either step entry point, so the first step compiles it (about a minute, once per source version)."""
    entries = sys.modules.get("pbad_gym.kernels.numba.entries")
    if entries is None:
        return False
    for name in ("step_batch", "step_batch_serial"):
        try:
            # numba's index is {} when missing or stale (the source changed since it was written)
            if getattr(entries, name)._cache._cache_file._load_index():
                return False
        except Exception:  # noqa: BLE001 — a numba without these internals: say nothing rather than guess
            return False
    return True
