"""The evaluator: a population × episodes as the rows of ONE vector environment.

Candidate i owns rows i·E … i·E + E − 1 (E episodes per candidate). Every row runs exactly one episode: it stops
accumulating when its episode terminates or truncates (the vector env's NEXT_STEP autoreset restarts it on the
next step; those steps are ignored) or after ``max_steps`` steps. The vector env comes from
``vecenv.make_vec_env`` (``gymnasium.make_vec``), so any registered Box-action environment works.

Observation statistics are accumulated per row and reduced over the rows only at the end, so a population split
over Ray actors (``agents/distributed.py``: each evaluates a slice of the rows) and merged with
:func:`merge_results` gives the same sums bit for bit as one vector env holding every row.
"""
from __future__ import annotations

from dataclasses import dataclass

import gymnasium
import numpy as np

from .stats import RunningStats


def env_dt(envs) -> float:
    """The control time step [s] of a vector env (its own ``dt``, or its sub-environments')."""
    dt = getattr(envs.unwrapped, "dt", None)
    if dt is None and hasattr(envs, "get_attr"):
        try:
            dt = envs.get_attr("dt")[0]
        except AttributeError:
            dt = None
    if dt is None:
        raise ValueError("the environment exposes no dt; time-based (oscillator) policies need one")
    return float(dt)


def action_bounds(envs):
    """(low, high) of a vector env's single Box action space, each (act_dim,) float64."""
    space = envs.single_action_space
    if not isinstance(space, gymnasium.spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"the trainers need a 1-D Box action space, got {space}")
    return np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)


def _info_array(info, key, n):
    """(values (n,), present (n,) bool) of ``info[key]`` (Gymnasium's ``_key`` mask when there is one)."""
    if key not in info:
        return None, np.zeros(n, dtype=bool)
    values = np.asarray(info[key]).reshape(n)
    present = np.asarray(info.get("_" + key, np.ones(n, dtype=bool)), dtype=bool).reshape(n)
    return values, present


@dataclass
class RolloutResult:
    """Per-candidate results of :func:`evaluate` (C candidates, E episodes each).

    returns (C,): mean episode return; distances (C,): mean forward distance [m] (``info["x_position"]`` at the
    episode's end minus at its start; NaN when the environment reports no x_position); diverged (C,) bool: any of
    the candidate's episodes ended with ``info["diverged"]``; env_steps: steps taken inside episodes; obs_stats:
    statistics of the observations the policy acted on (merged into the running statistics by the caller);
    row_returns / row_distances (C·E,): per episode.
    """

    returns: np.ndarray
    distances: np.ndarray
    diverged: np.ndarray
    env_steps: int
    obs_stats: RunningStats
    row_returns: np.ndarray
    row_distances: np.ndarray
    row_diverged: np.ndarray | None = None
    row_obs: tuple | None = None
    """per-row observation statistics (count (n,), sum (n, *obs), sum of squares (n, *obs)) the row slices of
    :func:`merge_results` concatenate before reducing"""


def _result(E, row_returns, row_distances, row_diverged, env_steps, row_obs) -> RolloutResult:
    """The per-candidate :class:`RolloutResult` of rows grouped E per candidate; the observation statistics are
    the per-row sums reduced over the rows (one fixed summation order, whichever actors ran the rows)."""
    C = len(row_returns) // E
    count, total, sumsq = row_obs
    stats = RunningStats(total.shape[1:])
    stats.count, stats.sum, stats.sumsq = float(count.sum()), total.sum(axis=0), sumsq.sum(axis=0)
    return RolloutResult(returns=row_returns.reshape(C, E).mean(1), distances=row_distances.reshape(C, E).mean(1),
                         diverged=row_diverged.reshape(C, E).any(1), env_steps=int(env_steps), obs_stats=stats,
                         row_returns=row_returns, row_distances=row_distances, row_diverged=row_diverged,
                         row_obs=row_obs)


def merge_results(parts, episodes_per_candidate: int) -> RolloutResult:
    """One :class:`RolloutResult` from the results of consecutive row slices (each a whole number of candidates),
    equal bit for bit to evaluating all the rows in one vector env when the environment's rows are independent."""
    parts = list(parts)
    cat = [np.concatenate([getattr(p, k) for p in parts]) for k in ("row_returns", "row_distances", "row_diverged")]
    row_obs = tuple(np.concatenate([p.row_obs[i] for p in parts]) for i in range(3))
    return _result(int(episodes_per_candidate), *cat, sum(p.env_steps for p in parts), row_obs)


def evaluate(envs, policy, episodes_per_candidate: int, max_steps: int, seeds) -> RolloutResult:
    """Run one episode in every row of ``envs`` under ``policy`` (``reset(n)``, ``act(obs (n, obs_dim))``),
    rows grouped by candidate (``envs.num_envs`` must be a multiple of ``episodes_per_candidate``); ``seeds``:
    the reset seed of each row (list of num_envs ints) or an int (row i gets seed + i). A vector env sharded over
    Ray actors (``distributed.RayVectorEnv``) evaluates slices of whole candidates on its actors instead."""
    n = envs.num_envs
    E = int(episodes_per_candidate)
    if n % E:
        raise ValueError(f"num_envs ({n}) must be a multiple of episodes_per_candidate ({E})")
    if hasattr(envs, "evaluate_population"):
        seeds = [int(seeds) + i for i in range(n)] if isinstance(seeds, (int, np.integer)) else list(seeds)
        return envs.evaluate_population(policy, E, max_steps, seeds)
    obs, info = envs.reset(seed=seeds)
    policy.reset(n)
    x_start, has_x = _info_array(info, "x_position", n)
    x_last = None if x_start is None else x_start.astype(np.float64).copy()
    obs_shape = envs.single_observation_space.shape
    row_count = np.ones(n)
    row_sum = np.asarray(obs, dtype=np.float64).copy().reshape((n,) + obs_shape)
    row_sumsq = np.square(row_sum)
    active = np.ones(n, dtype=bool)
    returns = np.zeros(n)
    diverged = np.zeros(n, dtype=bool)
    steps = 0
    for _ in range(int(max_steps)):
        obs, reward, terminated, truncated, info = envs.step(policy.act(obs))
        returns += np.where(active, reward, 0.0)
        steps += int(active.sum())
        div, present = _info_array(info, "diverged", n)
        row_div = active & present & div.astype(bool) if div is not None else np.zeros(n, dtype=bool)
        diverged |= row_div
        x, present = _info_array(info, "x_position", n)
        if x is not None and x_last is not None:
            # a diverged row reports its restored state's x as 0: keep the last finite step's
            x_last = np.where(active & present & ~row_div, x, x_last)
        active &= ~(np.asarray(terminated) | np.asarray(truncated))
        if not active.any():
            break
        o = np.asarray(obs, dtype=np.float64)[active]
        row_count[active] += 1
        row_sum[active] += o
        row_sumsq[active] += np.square(o)
    distances = np.full(n, np.nan) if x_last is None else np.where(has_x, x_last - x_start, np.nan)
    return _result(E, returns, distances, diverged, steps, (row_count, row_sum, row_sumsq))
