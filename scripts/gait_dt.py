"""Open-loop gaits re-run at several physics steps: mean speed, path speed, heading and falls over fresh resets.

    python scripts/gait_dt.py GAITS.csv [--env pbad_gym/Spider-v4] [--dt 0.001 0.0001] [--rows 20]
        [--seconds 10] [--seed 0] [--set KEY=VALUE ...]

GAITS.csv holds search vectors, one per line (as ``pbad-bench search`` prints its best gait); gait i runs on
``rows`` sub-environments reset with seed ``seed + i + 10**6`` (the search's re-evaluation seeds when ``seed`` is
the search's), the control interval kept at 0.05 s (frame_skip = 0.05 / dt). ``--set``: more env keyword
arguments (e.g. integrator=bdf2 penalty_springs=implicit). Printed per gait and step: the mean forward (x) speed
(the searches' score), the mean path speed (the (x, y) displacement's length over the episode time: how fast the
robot travels, whichever way it turns), the spread of the travel directions (circular standard deviation [deg]:
an open-loop gait has no feedback on its heading, so the heading drifts, and the forward speed carries that drift)
and the falls; each mean with its standard error over the resets (± one standard error): an open-loop gait's
trajectories part from each other within seconds, so two steps' means differ by about that much from the sampling
of the resets alone.
"""
from __future__ import annotations

import argparse
import time

import gymnasium
import numpy as np

import pbad_gym  # noqa: F401  (registers the ids)
from pbad_gym.bench.common import add_set_argument, env_settings, sem
from pbad_gym.bench.search import gait_speed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gaits", help="CSV of search vectors, one per line")
    p.add_argument("--env", default="pbad_gym/Spider-v4")
    p.add_argument("--dt", type=float, nargs="+", default=[0.001, 0.0001])
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    add_set_argument(p)
    args = p.parse_args(argv)
    gaits = np.atleast_2d(np.loadtxt(args.gaits, delimiter=","))
    settings = env_settings(args)
    print(f"{args.env} {settings}: {len(gaits)} gaits x {args.rows} resets x {args.seconds:g} s")
    for i, x in enumerate(gaits):
        for dt in args.dt:
            t0 = time.perf_counter()
            env = gymnasium.make_vec(args.env, num_envs=args.rows, vectorization_mode="vector_entry_point",
                                     max_episode_steps=None, **{**settings, "dt": dt,
                                                                "frame_skip": max(1, int(round(0.05 / dt)))})
            v, fell = gait_speed(env, np.tile(x, (args.rows, 1)), args.seconds, args.seed + i + 10 ** 6, 0.25,
                                 3.0, falls=True, planar=True)
            env.close()
            path = np.hypot(*v.T)
            print(f"gait {i} dt={dt:g}: {v[:, 0].mean():.3f} ± {sem(v[:, 0]):.3f} m/s forward, "
                  f"{path.mean():.3f} ± {sem(path):.3f} m/s path, "
                  f"directions spread {direction_spread(v):.0f} deg, {int(fell.sum())} of {args.rows} fell "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)


def direction_spread(v):
    """Circular standard deviation [deg] of the directions of planar velocities v (n, 2)."""
    u = v / np.maximum(np.hypot(*v.T), 1e-12)[:, None]
    r = np.hypot(*u.mean(axis=0))
    return float(np.degrees(np.sqrt(-2 * np.log(max(r, 1e-12)))))


if __name__ == "__main__":
    main()
