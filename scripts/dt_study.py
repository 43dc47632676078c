"""How the Spider's step length changes its physics: energy created per step, and open-loop gaits re-run at Δt/10.

    python scripts/dt_study.py energy [--env pbad_gym/Spider-v1] [--dt 0.05 0.025 0.01] [--rows 8] [--seconds 8]
        [--friction coulomb|viscous|none]
    python scripts/dt_study.py gait --dt 0.01 [--iterations 20] [--popsize 20] [--seconds 10] [--fine 10]
        [--friction coulomb|viscous|none] [--set KEY=VALUE ...]

``energy``: uniformly random actions, each held for 0.05 s, on ``rows`` sub-environments; per step the change of
the mechanical energy E (kinetic + joint-limit penalty + contact normal penalty + gravity, the divergence guard's
measure) minus the actuators' work W = τ·(q_{k+1} ⊖ q_k). A step with ΔE − W > 0 created energy; damping, drag,
friction and implicit dissipation can only make it negative. ``gait``: pycma CMA-ES over open-loop oscillators
(pbad_gym.bench.search, the same parametrisation as ``pbad-bench search``) at step ``dt``; the best gait is then
run again on fresh reset seeds at ``dt`` and at ``dt / fine``; ``--env Ant-v5`` runs the same search on
Gymnasium's MuJoCo Ant (``--dt`` is then MuJoCo's timestep, the env step staying 0.05 s).
"""
from __future__ import annotations

import argparse
import time

import gymnasium
import numpy as np
import yaml

import pbad_gym  # noqa: F401  (registers the ids)
from pbad_gym.bench.search import cma_search, gait_speed
from pbad_gym.kinematics import difference


def make(env_id, dt, n, **kwargs):
    """A vector env of ``env_id`` stepping the physics at ``dt`` with the env step (control interval) kept at
    0.05 s (frame_skip = 0.05 / dt, at least 1): pbad_gym envs natively, Gymnasium's MuJoCo envs (e.g. Ant-v5)
    synchronously with MuJoCo's timestep = dt, as Ant-v5 does at its own timestep 0.01 s. (Until Spider-v2 the
    pbad_gym envs here stepped their actions at dt itself.)"""
    if env_id.startswith("pbad_gym/"):
        kwargs.setdefault("max_episode_steps", None)  # no time limit: every episode runs its seconds
        kwargs.setdefault("frame_skip", max(1, int(round(0.05 / dt))))
        return gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", dt=dt, **kwargs)
    env = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="sync", frame_skip=int(round(0.05 / dt)),
                             **kwargs)
    for sub in env.envs:
        sub.unwrapped.model.opt.timestep = dt
    return env


def energy_balance(env_id, dt, rows, seconds, **kwargs):
    """(ΔE − W) [J] per step and row (T, rows), and E before each step (T, rows)."""
    # one physics step per env step, so that every step is checked; the action is held for 0.05 s by hand
    env = make(env_id, dt, rows, max_episode_steps=None, terminate_when_unhealthy=False, frame_skip=1, **kwargs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    budget = env.energy_budget
    hold = max(1, int(round(0.05 / dt)))
    created, before = [], []
    for t in range(int(round(seconds / dt))):
        if t % hold == 0:
            a = rng.uniform(-1, 1, env.action_space.shape)
        q0, E0 = np.asarray(env.sim.q).copy(), budget.K.copy()
        env.step(a)
        dq = difference(env.body, q0, np.asarray(env.sim.q))
        work = np.sum(a * env.gear * dq[:, env.actuated], 1)
        created.append(budget.K - E0 - work)
        before.append(E0)
    env.close()
    return np.array(created), np.array(before)


def gait_accuracy(env_id, dt, iterations, popsize, seconds, fine, seed=0, **kwargs):
    """(best speed of a generation, re-evaluated mean and std at dt, mean and std at dt / fine) [m/s]."""
    env = make(env_id, dt, popsize, **kwargs)
    n_act = env.single_action_space.shape[0]
    x0 = np.concatenate([np.full(n_act, 0.5), [0.3], np.random.default_rng(seed).uniform(0, 1, n_act)])

    def evaluate(X, it):
        return gait_speed(env, X, seconds, seed + 1000 * it, 0.25, 3.0)

    best_x, best, _ = cma_search(evaluate, x0, 0.3, popsize, iterations, seed,
                                 log=lambda it, h: print(f"  generation {it + 1}: best {h[0]:.3f} m/s", flush=True))
    rows = np.tile(best_x, (popsize, 1))
    again = gait_speed(env, rows, seconds, seed + 10 ** 6, 0.25, 3.0)
    env.close()
    env = make(env_id, dt / fine, popsize, **kwargs)
    small = gait_speed(env, rows, seconds, seed + 10 ** 6, 0.25, 3.0)
    env.close()
    return best, again.mean(), again.std(), small.mean(), small.std()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("energy", "gait"))
    p.add_argument("--env", default="pbad_gym/Spider-v1")
    p.add_argument("--dt", type=float, nargs="+", default=[0.05, 0.025, 0.01])
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--seconds", type=float, default=None, help="simulated seconds (energy: 8, gait: 10)")
    p.add_argument("--friction", default=None, help="Spider friction model (default: the env's)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="more env keyword arguments, values parsed as YAML (e.g. limit_damping=0 "
                        "contact_stiffness=5e3)")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--popsize", type=int, default=20)
    p.add_argument("--fine", type=int, default=10)
    args = p.parse_args(argv)
    kwargs = {} if args.friction is None else {"friction": args.friction}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--set takes KEY=VALUE, got {item!r}")
        kwargs[key] = yaml.safe_load(value)
    for dt in args.dt:
        t0 = time.perf_counter()
        if args.what == "energy":
            created, before = energy_balance(args.env, dt, args.rows, args.seconds or 8.0, **kwargs)
            bad = created > 1e-9 * np.maximum(before, 1.0)
            print(f"{args.env} dt={dt}: {bad.sum()} of {created.size} steps created energy, most {created.max():.3g} J"
                  f" ({time.perf_counter() - t0:.0f} s)", flush=True)
        else:
            best, m, s, mf, sf = gait_accuracy(args.env, dt, args.iterations, args.popsize, args.seconds or 10.0,
                                               args.fine, **kwargs)
            print(f"{args.env} dt={dt}: best {best:.3f} m/s, re-evaluated {m:.3f} ± {s:.3f}, at dt/{args.fine} "
                  f"{mf:.3f} ± {sf:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
