"""Deterministic policies given by flat parameter vectors, batched over rows (one parameter vector per row).

Kinds (a :class:`PolicySpec` fixes the layout of the flat vector θ, all entries 0 at the start of a search):
- ``linear``: u = tanh(W·ô + b), W (act_dim, obs_dim) row-major then b (act_dim,);
- ``mlp``: tanh layers of sizes ``hidden``, then a tanh output layer; per layer W (out, in) row-major then b;
- ``oscillator``: open loop, u_j = clip(A_j·sin(2π f t + φ_j), −1, 1) with θ = (A (act_dim), φ (act_dim), θ_f)
  and f = frequency·exp(θ_f) [Hz]; t [s] is the time since the row's episode started. No offsets: a constant
  bend makes a swimmer circle, and random offsets of a search's first iterations mostly do that.
ô is the observation normalised by the policy's :class:`RunningStats` (clipped to ±clip_obs), and the output
u ∈ [−1, 1] is mapped affinely onto the action space's bounds (used as is where they are infinite).

The PPO trainer's deterministic policy (:class:`PPOPolicy`: the actor's mean, in NumPy) lives here too, so that
loading any run's policy needs neither torch nor the trainer.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .runio import RunFileError, read_run_pickle
from .stats import RunningStats

KINDS = ("linear", "mlp", "oscillator")


@dataclass(frozen=True)
class PolicySpec:
    """Architecture of a flat-parameter policy: ``kind`` (one of KINDS), observation and action sizes, ``hidden``
    layer sizes (mlp), oscillator base ``frequency`` [Hz] and the environment step ``dt`` [s]."""

    kind: str
    obs_dim: int
    act_dim: int
    hidden: tuple = ()
    frequency: float = 0.5
    dt: float = 1.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"policy kind must be one of {list(KINDS)}, got {self.kind!r}")

    @property
    def layer_sizes(self) -> list[int]:
        """Sizes [obs_dim, *hidden, act_dim] of the network kinds (linear: no hidden layer)."""
        hidden = tuple(self.hidden) if self.kind == "mlp" else ()
        return [self.obs_dim, *hidden, self.act_dim]

    @property
    def n_params(self) -> int:
        if self.kind == "oscillator":
            return 2 * self.act_dim + 1
        sizes = self.layer_sizes
        return sum(o * i + o for i, o in zip(sizes[:-1], sizes[1:]))


def policy_outputs(spec: PolicySpec, theta, obs, t) -> np.ndarray:
    """Outputs u (n, act_dim) in [−1, 1] of parameters theta (n, n_params) on normalised observations
    obs (n, obs_dim) at episode times t (n,) [s]."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim != 2 or theta.shape[1] != spec.n_params:
        raise ValueError(f"theta must have shape (n, {spec.n_params}), got {theta.shape}")
    if spec.kind == "oscillator":
        m = spec.act_dim
        amp, phase, log_f = theta[:, :m], theta[:, m:2 * m], theta[:, 2 * m:]
        freq = spec.frequency * np.exp(np.clip(log_f, -10.0, 10.0))
        t = np.asarray(t, dtype=np.float64)[:, None]
        return np.clip(amp * np.sin(2 * np.pi * freq * t + phase), -1.0, 1.0)
    x = np.asarray(obs, dtype=np.float64)
    k = 0
    sizes = spec.layer_sizes
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        W = theta[:, k:k + n_out * n_in].reshape(-1, n_out, n_in)
        b = theta[:, k + n_out * n_in:k + n_out * n_in + n_out]
        k += n_out * n_in + n_out
        x = np.tanh(np.einsum("noi,ni->no", W, x) + b)
    return x


class FlatPolicy:
    """A batch of deterministic flat-parameter policies.

    ``params``: (n_params,) shared by every row, or (n, n_params) one vector per row; ``obs_stats``: the
    observation statistics (None: no normalisation); ``low`` / ``high``: the action bounds (act_dim,).
    :meth:`reset` ``(n)`` starts n rows' episodes (oscillator time 0); :meth:`act` ``(obs (n, obs_dim))`` returns
    actions (n, act_dim) in the bounds' dtype and advances each row's time by ``spec.dt``.
    """

    def __init__(self, spec: PolicySpec, params, obs_stats: RunningStats | None = None, clip_obs: float = 10.0,
                 low=None, high=None, dtype=np.float32):
        self.spec = spec
        self.params = np.asarray(params, dtype=np.float64)
        if self.params.shape[-1] != spec.n_params or self.params.ndim not in (1, 2):
            raise ValueError(f"params must have shape ({spec.n_params},) or (n, {spec.n_params}), "
                             f"got {self.params.shape}")
        self.obs_stats, self.clip_obs = obs_stats, float(clip_obs)
        inf = np.full(spec.act_dim, np.inf)
        self.low = -inf if low is None else np.asarray(low, dtype=np.float64)
        self.high = inf if high is None else np.asarray(high, dtype=np.float64)
        self.dtype = dtype
        self._steps = np.zeros(0, dtype=np.int64)

    def reset(self, n: int) -> None:
        self._steps = np.zeros(int(n), dtype=np.int64)

    def act(self, obs) -> np.ndarray:
        obs = np.asarray(obs)
        n = obs.shape[0]
        if self._steps.shape != (n,):
            self.reset(n)
        theta = np.broadcast_to(self.params, (n, self.spec.n_params))
        if self.obs_stats is not None:
            obs = self.obs_stats.normalize(obs, clip=self.clip_obs)
        u = policy_outputs(self.spec, theta, obs, self._steps * self.spec.dt)
        self._steps += 1
        bounded = np.isfinite(self.low) & np.isfinite(self.high)
        low = np.where(bounded, self.low, -1.0)  # unbounded components: the identity map of [-1, 1]
        span = np.where(bounded, self.high - self.low, 2.0)
        return (low + 0.5 * (u + 1.0) * span).astype(self.dtype)

    def to_dict(self) -> dict:
        """Plain picklable form (``kind`` is the policy kind), loaded back by :func:`load_policy`."""
        return {"kind": self.spec.kind, "spec": asdict(self.spec), "params": self.params.copy(),
                "obs_stats": None if self.obs_stats is None else self.obs_stats.state_dict(),
                "clip_obs": self.clip_obs, "low": self.low.copy(), "high": self.high.copy(),
                "dtype": np.dtype(self.dtype).str}

    @classmethod
    def from_dict(cls, d: dict) -> "FlatPolicy":
        spec = d["spec"]
        spec = PolicySpec(**{**spec, "hidden": tuple(spec["hidden"])})
        stats = None if d["obs_stats"] is None else RunningStats.from_state_dict(d["obs_stats"])
        return cls(spec, d["params"], stats, d["clip_obs"], d["low"], d["high"], np.dtype(d["dtype"]))


class PPOPolicy:
    """Deterministic actor of PPO or SHAC in NumPy (no torch needed): the actor's mean action on normalised
    observations (tanh hidden layers; SHAC's output squashed by tanh, ``squash``).

    ``act(obs (n, obs_dim)) -> (n, act_dim)`` clipped to the action bounds; ``reset(n)`` does nothing (no state).
    """

    def __init__(self, layers, obs_stats: RunningStats | None, clip_obs: float, low, high, squash: bool = False):
        self.squash = bool(squash)
        self.layers = [(np.asarray(W, np.float64), np.asarray(b, np.float64)) for W, b in layers]
        self.obs_stats, self.clip_obs = obs_stats, clip_obs
        self.low, self.high = np.asarray(low, np.float64), np.asarray(high, np.float64)

    def reset(self, n: int) -> None:
        pass

    def act(self, obs) -> np.ndarray:
        h = np.asarray(obs, np.float64)
        if self.obs_stats is not None:
            h = self.obs_stats.normalize(h, self.clip_obs)
        for W, b in self.layers[:-1]:
            h = np.tanh(h @ W.T + b)
        W, b = self.layers[-1]
        u = h @ W.T + b
        return np.clip(np.tanh(u) if self.squash else u, self.low, self.high)

    def to_dict(self) -> dict:
        """Picklable description (``kind``: "ppo", or "shac" for a squashed output), loaded back by
        :func:`load_best`."""
        return {"kind": "shac" if self.squash else "ppo", "layers": self.layers, "clip_obs": self.clip_obs,
                "action_low": self.low, "action_high": self.high,
                "obs_stats": None if self.obs_stats is None else self.obs_stats.state_dict()}


def load_best(obj: dict) -> PPOPolicy:
    """The policy of a ``best_policy.pkl`` written by ``agents.ppo.train`` or ``agents.shac.train`` (a dict with
    ``kind`` "ppo" or "shac")."""
    if obj.get("kind") not in ("ppo", "shac"):
        raise ValueError(f"not a PPO or SHAC policy: kind {obj.get('kind')!r}, expected 'ppo' or 'shac'")
    stats = None if obj["obs_stats"] is None else RunningStats.from_state_dict(obj["obs_stats"])
    return PPOPolicy(obj["layers"], stats, obj["clip_obs"], obj["action_low"], obj["action_high"],
                     squash=obj["kind"] == "shac")


def load_policy(run_dir):
    """The best policy of a run folder (``best_policy.pkl``), dispatched on its ``kind``: a :class:`FlatPolicy`
    for linear / mlp / oscillator, :func:`load_best` (a :class:`PPOPolicy`) for ppo and shac. The result has
    ``reset(n)`` and ``act(obs (n, obs_dim)) -> (n, act_dim)``. A missing file raises FileNotFoundError; an
    empty, truncated or malformed one :class:`runio.RunFileError` (a ValueError) naming it."""
    path = Path(run_dir) / "best_policy.pkl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (no iteration of the run has finished yet?)")
    obj = read_run_pickle(path)
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if kind not in KINDS + ("ppo", "shac"):
        raise RunFileError(f"{path}: unknown policy kind {kind!r}; expected one of "
                           f"{list(KINDS) + ['ppo', 'shac']}")
    try:
        return load_best(obj) if kind in ("ppo", "shac") else FlatPolicy.from_dict(obj)
    except (KeyError, TypeError, ValueError) as exc:  # a pickle that loads but lacks the policy's fields
        raise RunFileError(f"{path} is not a complete policy ({type(exc).__name__}: {exc})") from None
