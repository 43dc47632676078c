"""Training configuration: typed dataclasses (one docstring per field, CleanRL style) that YAML files override.

A YAML file holds a nested mapping with the fields of :class:`TrainConfig` (``env``, ``cmaes`` and ``ppo`` are
mappings of their own classes' fields); command-line overrides are dotted ``key=value`` strings whose value is
parsed with ``yaml.safe_load`` (``cmaes.popsize=10``, ``env.kwargs={gear: 40}``, ``ppo.target_kl=null``).
Unknown keys and bad values raise ``ValueError`` naming the key and the valid keys / values. dacite builds the
nested dataclasses from the mapping; the hooks below only make its type checks follow this module's rules.
"""
from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Literal, Optional

import dacite
import yaml


MAX_SEED = 2**32 - 2  # NumPy seeds the run with ``seed`` and pycma with ``seed + 1``, both below 2**32
_RAY_ADDRESS = re.compile(r"auto|(ray://)?[A-Za-z0-9_.\-]+:[0-9]{1,5}|(ray://)?\[[0-9A-Fa-f:]+\]:[0-9]{1,5}")


def _check_positive(obj, names, integer=True):
    for name in names:
        v = getattr(obj, name)
        if v is None:
            continue
        if not v > 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be a positive {'integer' if integer else 'number'},"
                             f" got {v!r}")


@dataclass(frozen=True)
class EnvConfig:
    id: str = "pbad_gym/Swimmer-v1"
    """registered Gymnasium id, made with ``gymnasium.make_vec`` (a native vector env when the id has one)"""
    kwargs: dict = field(default_factory=dict)
    """keyword arguments of the environment (e.g. ``{gear: 40.0, ctrl_cost_weight: 1e-4}``)"""
    num_envs: int = 16
    """PPO: parallel sub-environments; CMA-ES: unused (it runs popsize × episodes_per_candidate rows)"""

    def __post_init__(self):
        _check_positive(self, ["num_envs"])


@dataclass(frozen=True)
class CMAESConfig:
    policy: Literal["linear", "mlp", "oscillator"] = "linear"
    """linear: tanh(W·ô + b) on normalised observations; mlp: tanh layers of sizes ``hidden``; oscillator:
    open-loop a_j = A_j·sin(2π f t + φ_j) per actuator (one learned frequency f)"""
    hidden: tuple = (32,)
    """hidden layer sizes of the mlp policy"""
    popsize: int = 20
    """candidates per iteration (CMA-ES λ)"""
    sigma0: float = 0.5
    """initial step size of the search distribution (parameters start at 0)"""
    iterations: int = 100
    """CMA-ES iterations (generations)"""
    episodes_per_candidate: int = 1
    """episodes averaged per candidate; all candidates of an iteration share the same reset seeds"""
    episode_steps: int = 1000
    """steps per episode (an episode also ends when the environment terminates or truncates it)"""
    frequency: float = 0.5
    """oscillator: base frequency [Hz]; the learned frequency is frequency·exp(θ_f)"""
    norm_obs: bool = True
    """normalise observations by running statistics merged after each iteration (linear / mlp)"""
    clip_obs: float = 10.0
    """clip normalised observations to ±clip_obs"""

    def __post_init__(self):
        _check_positive(self, ["popsize", "iterations", "episodes_per_candidate", "episode_steps"])
        _check_positive(self, ["sigma0", "frequency", "clip_obs"], integer=False)
        if self.popsize < 2:
            raise ValueError(f"CMAESConfig.popsize must be at least 2, got {self.popsize}")
        if any(int(h) != h or h < 1 for h in self.hidden):
            raise ValueError(f"CMAESConfig.hidden must be positive layer sizes, got {self.hidden!r}")


@dataclass(frozen=True)
class PPOConfig:
    total_timesteps: int = 1_000_000
    """total environment steps of the run"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0"""
    num_steps: int = 2048
    """steps per sub-environment per rollout"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """λ of generalised advantage estimation"""
    num_minibatches: int = 32
    """minibatches per epoch"""
    update_epochs: int = 10
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss as in the PPO paper"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""
    target_kl: Optional[float] = None
    """stop an update's epochs early past this approximate KL (None: never)"""
    hidden: tuple = (64, 64)
    """hidden layer sizes of the actor and the critic"""
    norm_obs: bool = True
    """normalise observations by running statistics"""
    norm_reward: bool = True
    """scale rewards by the running std of the discounted return"""
    clip_obs: float = 10.0
    """clip normalised observations to ±clip_obs"""
    clip_reward: float = 10.0
    """clip scaled rewards to ±clip_reward"""
    eval_episodes: int = 0
    """deterministic evaluation episodes (one vector env, a fresh reset seed each time; 0: none). With
    evaluations the best policy is chosen by them (see select_max_terminated), else by the training return"""
    eval_every: int = 1
    """iterations between deterministic evaluations (the last iteration is always evaluated)"""
    select_max_terminated: float = 1.0
    """best-policy choice: the highest evaluation return among evaluations with at most this share of episodes
    ended by termination (e.g. the Spider falling); while none qualifies, the lowest terminated share"""
    init_log_std: float = 0.0
    """initial log standard deviation of the Gaussian policy (state-independent; 0: σ = 1 on [-1, 1] actions)"""
    torch_threads: int = 1
    """torch intra-op threads (1: the environments use the other cores)"""
    cost_limit: Optional[float] = None
    """PPO-Lagrangian (None: off). The target share of training episodes that end by termination (e.g. the Spider
    falling: unhealthy), each such ending costing 1 (truncations and divergences cost nothing); on, a cost critic
    learns the discounted cost, the policy ascends (A_r − λ·A_c)/(1 + λ) and λ ≥ 0 follows dual ascent on the
    measured fall rate (see lagrangian_lr). The environment's reward is unchanged (and is what metrics.csv reports)"""
    lagrangian_lr: float = 0.1
    """PPO-Lagrangian: dual-ascent step, λ ← max(0, λ + lagrangian_lr·(fall rate − cost_limit)) after every
    iteration in which training episodes ended (fall rate: terminated / ended among them)"""
    lagrangian_init: float = 0.0
    """PPO-Lagrangian: the Lagrange multiplier λ at the first iteration (≥ 0)"""

    def __post_init__(self):
        _check_positive(self, ["total_timesteps", "num_steps", "num_minibatches", "update_epochs", "torch_threads",
                               "eval_every"])
        _check_positive(self, ["learning_rate", "clip_coef", "max_grad_norm", "target_kl", "clip_obs",
                               "clip_reward", "lagrangian_lr"], integer=False)
        for name in ("gamma", "gae_lambda", "select_max_terminated", "cost_limit"):
            v = getattr(self, name)
            if v is not None and not 0 <= v <= 1:
                raise ValueError(f"PPOConfig.{name} must be in [0, 1], got {v!r}")
        if not self.lagrangian_init >= 0:
            raise ValueError(f"PPOConfig.lagrangian_init must be a non-negative number, got {self.lagrangian_init!r}")


@dataclass(frozen=True)
class SHACConfig:
    total_timesteps: int = 60_000
    """total environment steps of the run"""
    horizon: int = 32
    """env steps per short horizon: the actor's loss back-propagates through this many steps of every row"""
    gamma: float = 0.99
    """discount factor"""
    td_lambda: float = 0.95
    """λ of the critic's TD(λ) targets"""
    actor_lr: float = 2e-3
    """Adam learning rate of the actor (and its log std)"""
    critic_lr: float = 2e-3
    """Adam learning rate of the critic"""
    anneal_lr: bool = True
    """anneal both learning rates linearly to 0"""
    adam_beta1: float = 0.7
    """Adam's β1 for both networks (SHAC's choice)"""
    adam_beta2: float = 0.95
    """Adam's β2 for both networks"""
    critic_iterations: int = 16
    """critic epochs over each horizon's states"""
    critic_minibatches: int = 4
    """minibatches per critic epoch"""
    target_alpha: float = 0.2
    """target critic update: target ← α·target + (1 − α)·critic after each iteration"""
    hidden: tuple = (64, 64)
    """hidden layer sizes (tanh) of the actor and the critic"""
    init_log_std: float = -1.0
    """initial log standard deviation of the exploration noise before the tanh squashing"""
    max_grad_norm: float = 1.0
    """gradient clipping norm of either network"""
    clip_obs: float = 10.0
    """clip normalised observations to ±clip_obs"""
    eval_episodes: int = 0
    """deterministic evaluation episodes (the env itself, fresh reset seeds; 0: none); with them the best policy
    is chosen by them, else by the training return"""
    eval_every: int = 1
    """iterations between evaluations (the last iteration is always evaluated)"""
    torch_threads: int = 1
    """torch intra-op threads"""

    def __post_init__(self):
        _check_positive(self, ["total_timesteps", "horizon", "critic_iterations", "critic_minibatches",
                               "eval_every", "torch_threads"])
        _check_positive(self, ["actor_lr", "critic_lr", "max_grad_norm", "clip_obs"], integer=False)
        for name in ("gamma", "td_lambda", "target_alpha", "adam_beta1", "adam_beta2"):
            v = getattr(self, name)
            if not 0 <= v <= 1:
                raise ValueError(f"SHACConfig.{name} must be in [0, 1], got {v!r}")
        if self.eval_episodes < 0:
            raise ValueError(f"SHACConfig.eval_episodes must be a non-negative integer, got {self.eval_episodes!r}")


@dataclass(frozen=True)
class TrainConfig:
    name: str
    """run name: the run folder is out_dir/name (a numbered suffix is added when it exists)"""
    algo: Literal["cmaes", "ppo", "shac"] = "cmaes"
    """training algorithm"""
    seed: int = 0
    """run seed: environment reset seeds, NumPy's global generator (pycma) and torch are drawn from it"""
    env: EnvConfig = field(default_factory=EnvConfig)
    """environment"""
    cmaes: CMAESConfig = field(default_factory=CMAESConfig)
    """CMA-ES settings (algo: cmaes)"""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings (algo: ppo)"""
    shac: SHACConfig = field(default_factory=SHACConfig)
    """SHAC settings (algo: shac): first-order policy learning through the simulator's gradients"""
    out_dir: str = "runs"
    """folder holding the run folders"""
    checkpoint_every: int = 1
    """write checkpoint.pkl every this many iterations (and after the last)"""
    device: Literal["cpu", "cuda"] = "cpu"
    """torch device of PPO"""
    workers: int = 0
    """Ray actors that evaluate the population (CMA-ES) or step the sub-environments (PPO); 0: everything in this
    process. Same seed → same metrics whatever the number (``pip install -e ".[distributed]"``)"""
    ray_address: Optional[str] = None
    """Ray cluster to join when workers > 0: None starts a local one, "auto" joins the one ``ray start --head``
    started on this machine, "host:port" (or "ray://host:port") a remote head"""
    worker_cpus: int = 1
    """CPUs Ray reserves per actor; its numba / BLAS threads are capped to this"""

    def __post_init__(self):
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be an integer in [0, {MAX_SEED}], got {self.seed!r}")
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ValueError(f"TrainConfig.name must be a non-empty folder name without '/', got {self.name!r}")
        _check_positive(self, ["checkpoint_every", "worker_cpus"])
        if self.workers < 0:
            raise ValueError(f"TrainConfig.workers must be a non-negative integer (0: no Ray), got {self.workers!r}")
        if self.ray_address is not None and not _RAY_ADDRESS.fullmatch(self.ray_address):
            raise ValueError(f"TrainConfig.ray_address must be null (start a local Ray cluster), 'auto' or "
                             f"host:port, got {self.ray_address!r}")


def _reject(tp, value):
    # a DaciteFieldError: dacite prefixes it with the dotted path of the field as it unwinds the nesting
    raise dacite.WrongTypeError(field_type=tp, value=value)


def _integer(value):
    # bool is an int to isinstance (YAML's true is not a number here); not finite: int(.inf) would overflow
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or int(value) != value:
        _reject(int, value)
    return int(value)


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _reject(float, value)
    return float(value)


def _layer_sizes(value):
    value = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                       for v in value):
        _reject(tuple, value)
    return tuple(value)


# bool, str, Literal and nested dataclasses are dacite's own checks; these hooks make what it would let through
# (True as an int, 1 as a float, NaN) or refuse (4.0 as an int, 64 as (64,), null as {}) follow this module's rules
_HOOKS = {int: _integer, float: _number, tuple: _layer_sizes, dict: lambda value: {} if value is None else value}
_WANT = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string",
         tuple: "a list of integers", dict: "a mapping"}


def _want(tp) -> str:
    """What a field of annotated type ``tp`` takes, in words (for the error naming the field)."""
    if typing.get_origin(tp) is Literal:
        return f"one of {list(typing.get_args(tp))}"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return f"{_want(args[0])} or null" if args else _WANT.get(tp, str(tp))


def _check_keys(cls, data, prefix=""):
    """ValueError naming the unknown keys of ``data`` and the valid ones, nested mappings included (dacite's
    strict mode names neither the path nor the valid keys)."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ValueError(f"unknown key(s) {[prefix + k for k in unknown]}; valid keys: {[prefix + n for n in names]}")
    for name, tp in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(tp) and isinstance(data.get(name), dict):
            _check_keys(tp, data[name], f"{prefix}{name}.")


def _build(cls, data):
    """An instance of dataclass ``cls`` from mapping ``data`` (nested dataclasses from nested mappings), by
    dacite with this module's value checks; ValueError naming the field otherwise."""
    if not isinstance(data, dict):
        raise ValueError(f"the config must be a mapping, got {data!r}")
    _check_keys(cls, data)
    try:
        return dacite.from_dict(cls, data, dacite.Config(type_hooks=_HOOKS))
    except dacite.WrongTypeError as exc:
        raise ValueError(f"{exc.field_path} must be {_want(exc.field_type)}, got {exc.value!r}") from None
    except dacite.MissingValueError as exc:
        raise ValueError(f"{exc.field_path} is required; valid keys: "
                         f"{[f.name for f in dataclasses.fields(cls)]}") from None


def _set_dotted(data: dict, key: str, value) -> None:
    parts = key.split(".")
    node = data
    for i, p in enumerate(parts[:-1]):
        child = node.setdefault(p, {})
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            raise ValueError(f"override {key!r}: {'.'.join(parts[:i + 1])} is not a mapping")
        node = child
    node[parts[-1]] = value


def config_from_dict(data: dict, overrides=()) -> TrainConfig:
    """A :class:`TrainConfig` from a nested mapping and dotted ``key=value`` override strings."""
    data = yaml.safe_load(yaml.safe_dump(data))  # a deep copy of plain values
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} must have the form key=value (e.g. cmaes.popsize=10)")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"override {item!r}: the value is not valid YAML ({exc})") from None
        _set_dotted(data, key.strip(), value)
    return _build(TrainConfig, data)


def load_config(path, overrides=()) -> TrainConfig:
    """Read the YAML file ``path`` and apply the dotted ``key=value`` ``overrides`` (see the module docstring)."""
    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML ({exc})") from None
    return config_from_dict(data or {}, overrides)


def config_to_dict(cfg) -> dict:
    """Plain nested dict of a config (tuples as lists), ready for ``yaml.safe_dump``."""
    def plain(v):
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(cfg)


def dump_config(cfg) -> str:
    """The config as YAML text (loads back to an equal config with :func:`config_from_dict`)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
