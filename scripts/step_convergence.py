"""The physics step's own convergence: one set of trajectories re-run at shrinking Δt, compared with the finest.

    python scripts/step_convergence.py [--env pbad_gym/Spider-v5] [--dt 0.002 0.001 0.0005 0.00025 0.000125]
        [--reference 0.0000625] [--rows 32] [--seconds 0.5] [--seed 5] [--set KEY=VALUE ...]

Each of ``rows`` sub-environments is reset with ``seed`` and driven by the same uniformly random actions (one per
0.05 s control interval, frame_skip = 0.05 / Δt) for ``seconds``; the torso positions at the end are compared with
those of the ``--reference`` step. Printed per Δt: the median and largest torso position error over the rows [m]
and the observed order, log2 of the median's ratio to the next finer step (1: first order, 2: second order). The
horizon is short on purpose: over seconds a walker's trajectories part from each other whatever the step (they
are chaotic), and the error then measures that parting, not the step. Every run solves to ``tol`` 1e-12 (the
kernel's default 1e-9 rad per step is an acceleration error of up to tol/Δt², which moves the finest references).
The reset's drop lands within the first 0.2 s, so the landing is part of the horizon.
"""
from __future__ import annotations

import argparse
import warnings

import gymnasium
import numpy as np

import pbad_gym  # noqa: F401  (registers the ids)
from pbad_gym.bench.common import add_set_argument, env_settings

CONTROL_INTERVAL = 0.05  # [s], every Spider's and Ant-v5's


def end_positions(env_id, dt, actions, seed, settings):
    """Torso positions (rows, 3) [m] after the ``actions`` (steps, rows, 8), one per control interval, from the
    resets of ``seed``, at physics step ``dt`` [s]."""
    env = gymnasium.make_vec(env_id, num_envs=actions.shape[1], vectorization_mode="vector_entry_point",
                             max_episode_steps=None, **{"tol": 1e-12, **settings, "dt": dt,
                                                        "frame_skip": int(round(CONTROL_INTERVAL / dt))})
    env.reset(seed=seed)
    for a in actions:
        env.step(a)
    q = np.asarray(env.unwrapped.sim.q)[:, :3].copy()
    env.close()
    return q


def convergence(env_id, dts, reference, rows, seconds, seed, settings):
    """[(dt, median error [m], largest error [m])] of the torso positions at ``dts`` against ``reference``."""
    steps = max(1, int(round(seconds / CONTROL_INTERVAL)))
    actions = np.random.default_rng(seed).uniform(-1, 1, (steps, rows, 8))
    ref = end_positions(env_id, reference, actions, seed, settings)
    out = []
    for dt in dts:
        e = np.abs(end_positions(env_id, dt, actions, seed, settings) - ref).max(axis=1)
        out.append((dt, float(np.median(e)), float(e.max())))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="pbad_gym/Spider-v5")
    p.add_argument("--dt", type=float, nargs="+", default=[0.002, 0.001, 0.0005, 0.00025, 0.000125])
    p.add_argument("--reference", type=float, default=0.0000625, help="the reference step [s] (finest)")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--seconds", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=5)
    add_set_argument(p)
    args = p.parse_args(argv)
    if any(dt <= args.reference for dt in args.dt):
        p.error(f"--dt: every step must be coarser than --reference {args.reference:g}")
    settings = env_settings(args)
    print(f"{args.env} {settings}: {args.rows} rows x {args.seconds:g} s, reference dt={args.reference:g}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*out of date")
        rows = convergence(args.env, sorted(args.dt, reverse=True), args.reference, args.rows, args.seconds,
                           args.seed, settings)
    for i, (dt, med, top) in enumerate(rows):
        order = f"  order {np.log2(rows[i - 1][1] / med):.2f}" if i > 0 else ""
        print(f"dt={dt:g}: torso position error median {med:.2e} m, largest {top:.2e} m{order}", flush=True)
    return rows


if __name__ == "__main__":
    main()
