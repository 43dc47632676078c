"""Episode bookkeeping on a vector env with NEXT_STEP autoreset, and a deterministic evaluation of a policy.

``python -m pbad_gym.agents.episodes RUN_DIR [--episodes N] [--seed S]`` replays a run's best policy (any kind
``load_policy`` reads) for N episodes, one per row of one vector env, and prints the mean return, forward
distance, forward speed and how many episodes terminated (e.g. the Spider falling: unhealthy) or diverged.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import NamedTuple

import numpy as np
import yaml

from .config import load_config
from .policies import load_policy
from .rollout import env_dt
from .vecenv import make_vec_env


class Episode(NamedTuple):
    """One finished episode: return (sum of raw rewards), forward distance [m], length [steps], how it ended."""
    ret: float
    distance: float
    length: int
    terminated: bool
    diverged: bool


class EpisodeTracker:
    """Per-row running return, length and forward position of a vector env; collects the episodes that end.

    The distance is ``info["x_position"]`` at the episode's last step minus after its first step (NaN when the
    env reports no x_position): the reset step of a NEXT_STEP autoreset need not report the reset state's
    position, so the first step's displacement is not counted.
    """

    def __init__(self, n: int):
        self.ret = np.zeros(n)
        self.length = np.zeros(n, dtype=np.int64)
        self.x_first = np.full(n, np.nan)
        self.x_last = np.full(n, np.nan)
        self.finished: list[Episode] = []

    def step(self, reward, terminated, ended, valid, info) -> list[int]:
        """Account one step: reward (n,), terminated / ended (n,) bool, valid (n,) bool (False on reset steps);
        returns the rows whose episode ended (their :class:`Episode` appended to ``finished``)."""
        n = len(reward)
        x = np.asarray(info["x_position"], np.float64) if "x_position" in info else np.full(n, np.nan)
        diverged = np.asarray(info.get("diverged", np.zeros(n, bool)), bool)
        self.ret += np.where(valid, reward, 0.0)
        self.x_first = np.where(valid & (self.length == 0), x, self.x_first)
        # a diverged row reports its restored state: keep the last finite step's position
        self.x_last = np.where(valid & ~diverged, x, self.x_last)
        self.length += valid
        rows = np.flatnonzero(ended & valid)
        for i in rows:
            self.finished.append(Episode(float(self.ret[i]), float(self.x_last[i] - self.x_first[i]),
                                         int(self.length[i]), bool(terminated[i]), bool(diverged[i])))
            self.ret[i], self.length[i] = 0.0, 0
        return rows.tolist()

    def pop(self) -> list[Episode]:
        done, self.finished = self.finished, []
        return done


def episode_summary(episodes) -> dict:
    """return_best, return_mean, distance_best, distance_mean over finished :class:`Episode` s (the distances
    None when the env reports no x_position)."""
    rets, dists = np.array([e.ret for e in episodes]), np.array([e.distance for e in episodes])
    no_x = np.isnan(dists).all()
    return {"return_best": rets.max(), "return_mean": rets.mean(),
            "distance_best": None if no_x else np.nanmax(dists), "distance_mean": None if no_x else np.nanmean(dists)}


def evaluate_policy(policy, env_cfg, episodes: int, seed: int) -> dict:
    """Run one episode per row of a fresh ``make_vec_env(env_cfg, episodes)`` reset with ``seed`` under
    ``policy`` (``reset(n)``, ``act(obs (n, obs_dim))``); the rows run until each has ended once. Returns means
    over the episodes: return, distance [m], speed [m/s] (distance over the episode's duration), length [steps],
    and the fractions terminated and diverged."""
    env = make_vec_env(env_cfg, episodes)
    try:
        dt = env_dt(env)
        obs, _ = env.reset(seed=seed)
        policy.reset(episodes)
        tracker = EpisodeTracker(episodes)
        active = np.ones(episodes, bool)
        while active.any():
            obs, reward, term, trunc, info = env.step(policy.act(obs).astype(env.single_action_space.dtype))
            ended = np.asarray(term, bool) | np.asarray(trunc, bool)
            tracker.step(np.asarray(reward, np.float64), np.asarray(term, bool), ended, active, info)
            active &= ~ended
        eps = tracker.pop()
    finally:
        env.close()
    return {"episodes": len(eps), "return": float(np.mean([e.ret for e in eps])),
            "distance": float(np.mean([e.distance for e in eps])),
            "speed": float(np.mean([e.distance / (e.length * dt) for e in eps])),
            "length": float(np.mean([e.length for e in eps])),
            "terminated": float(np.mean([e.terminated for e in eps])),
            "diverged": float(np.mean([e.diverged for e in eps]))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pbad_gym.agents.episodes",
                                     description="Deterministic evaluation of a run's best policy.")
    parser.add_argument("run_dir")
    parser.add_argument("--episodes", type=int, default=20, help="episodes, one per vector-env row (default 20)")
    parser.add_argument("--seed", type=int, default=12345, help="reset seed (default 12345)")
    parser.add_argument("--env", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override the run's env kwargs (values as YAML), e.g. dt=0.001 frame_skip=50: the "
                             "policy under finer physics at the same control interval")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be positive")
    overrides = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env takes KEY=VALUE, got {item!r}")
        overrides[key] = yaml.safe_load(value)
    cfg = load_config(f"{args.run_dir}/config.yaml")
    env_cfg = dataclasses.replace(cfg.env, kwargs={**cfg.env.kwargs, **overrides})
    r = evaluate_policy(load_policy(args.run_dir), env_cfg, args.episodes, args.seed)
    print(f"{cfg.env.id}: {r['episodes']} episodes: return {r['return']:.2f}, distance {r['distance']:.3f} m, "
          f"speed {r['speed']:.3f} m/s, length {r['length']:.0f} steps, terminated {r['terminated']:.0%}, "
          f"diverged {r['diverged']:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
