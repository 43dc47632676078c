"""Learnability side by side: the same trainer and budget on each MJCF robot in PBAD and on its MuJoCo v5 peer.

Pairs: pbad_gym/Hopper-v0 | Hopper-v5, Walker2d-v0 | Walker2d-v5, HalfCheetah-v0 | HalfCheetah-v5, Ant-v0 | Ant-v5
(same XML, observations, rewards, terminations and control interval). Learners, each on both envs of a pair:

- ``cmaes``: the project's CMA-ES with a linear policy (``configs/locomotion_cmaes.yaml``: population 16, 1000-step
  episodes; ``--cma-iterations``);
- ``ppo``: the project's PPO (``configs/locomotion_ppo.yaml``: 16 envs x 128 steps; ``--ppo-steps`` env steps);
- ``sb3-ppo``: an independent learner, Stable-Baselines3's PPO with its defaults on 16 envs (n_steps 128) and
  VecNormalize, ``--ppo-steps`` env steps (when stable-baselines3 is installed).

Each trained policy (the run's best for the project's trainers, the last for SB3) is then evaluated on 16 fresh
reset seeds, deterministically, for one episode each (up to v5's 1000 steps): mean return, forward distance and
the share of episodes that fell (terminated). The ratios PBAD / MuJoCo of those are the learnability comparison.

Writes results/learnability/learnability.csv (one row per run), ratios.csv (PBAD / MuJoCo of the means over the
seeds), curves.png (training return against env steps, PBAD beside MuJoCo, one panel per robot and learner) and the
run folders under runs/. ``--dt10`` also replays each PBAD policy of the project's trainers at Δt/10 (dt10.csv).
``--report`` trains nothing and rebuilds those files from a learnability.csv already in ``--out`` (for instance
the rows of runs with different ``--seeds`` concatenated).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from .common import machine, mujoco_available, out_dir, print_table, stamp, write_csv
from .fig5 import CONFIGS, _metrics_rows, _train

PAIRS = {"Hopper": ("pbad_gym/Hopper-v0", "Hopper-v5"), "Walker2d": ("pbad_gym/Walker2d-v0", "Walker2d-v5"),
         "HalfCheetah": ("pbad_gym/HalfCheetah-v0", "HalfCheetah-v5"), "Ant": ("pbad_gym/Ant-v0", "Ant-v5")}
LEARNERS = ("cmaes", "ppo", "sb3-ppo")
EVAL_EPISODES, EVAL_SEED = 16, 10_000  # unseen by every learner: training seeds count up from the config's seed
HEADER = ["robot", "engine", "env", "learner", "seed", "env_steps", "wall_s", "eval_return", "eval_distance",
          "eval_terminated", "eval_length", "run_dir"]


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="tiny budgets on the Hopper pair (smoke test)")
    p.add_argument("--robots", nargs="+", choices=tuple(PAIRS), default=None, help="which pairs (default all)")
    p.add_argument("--learners", nargs="+", choices=LEARNERS, default=None,
                   help="which learners (default all; sb3-ppo only when stable-baselines3 is installed)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (default 0)")
    p.add_argument("--ppo-steps", type=int, default=200_000, help="env steps of each PPO run (default 200000)")
    p.add_argument("--cma-iterations", type=int, default=30, help="CMA-ES iterations (default 30)")
    p.add_argument("--no-mujoco", action="store_true", help="train on the PBAD envs only")
    p.add_argument("--dt10", action="store_true",
                   help="also replay each PBAD policy of the project's trainers at Δt/10 (the gait's convergence)")
    p.add_argument("--report", action="store_true",
                   help="train nothing: rebuild ratios.csv and curves.png (and with --dt10 the replay) from the "
                        "learnability.csv in --out, e.g. the rows of several runs' tables concatenated")


def _positive(args):
    for name in ("ppo_steps", "cma_iterations"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")


def project_config(learner, env_id, seed, args):
    """The TrainConfig of the project's ``learner`` (cmaes | ppo) on ``env_id`` at the bench's budget."""
    from ..agents.config import load_config

    name = f"{env_id.split('/')[-1]}_{learner}_s{seed}"
    cfg = load_config(CONFIGS / f"locomotion_{learner}.yaml", [f"env.id={env_id}", f"seed={seed}", f"name={name}"])
    if learner == "cmaes":
        c = (dataclasses.replace(cfg.cmaes, popsize=4, iterations=2, episode_steps=30) if args.quick
             else dataclasses.replace(cfg.cmaes, iterations=args.cma_iterations))
        return dataclasses.replace(cfg, cmaes=c)
    p = cfg.ppo
    if args.quick:
        env = dataclasses.replace(cfg.env, num_envs=2)
        p = dataclasses.replace(p, num_steps=16, total_timesteps=64, num_minibatches=2, update_epochs=1,
                                eval_episodes=2, eval_every=1)
        return dataclasses.replace(cfg, env=env, ppo=p, checkpoint_every=1)
    batch = cfg.env.num_envs * p.num_steps
    return dataclasses.replace(cfg, ppo=dataclasses.replace(
        p, total_timesteps=max(batch, args.ppo_steps // batch * batch)))


class SB3Policy:
    """An SB3 model behind the trainers' policy interface (``reset(n)``, ``act(obs)``), deterministic, with the
    VecNormalize observation statistics it was trained with."""

    def __init__(self, model, vecnorm):
        self.model, self.vecnorm = model, vecnorm

    def reset(self, n):
        pass

    def act(self, obs):
        return self.model.predict(self.vecnorm.normalize_obs(np.asarray(obs)), deterministic=True)[0]


def train_sb3(env_id, seed, steps, run_dir, quick=False):
    """SB3 PPO (defaults, 16 envs x 128 steps, VecNormalize) for ``steps`` env steps on ``env_id``; returns
    (policy, metrics rows with env_steps / return_mean, wall seconds). The PBAD env runs as one native vector env
    (``pbad_gym.envs.SB3VecEnv``), the MuJoCo peer as SB3's DummyVecEnv."""
    import gymnasium
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    import torch

    torch.set_num_threads(1)  # as the project's PPO (torch_threads 1): the envs use the other cores
    n, n_steps, batch = (2, 16, 32) if quick else (16, 128, 64)
    if env_id.startswith("pbad_gym/"):
        from ..envs import SB3VecEnv

        venv = VecMonitor(SB3VecEnv(env_id, num_envs=n))
    else:
        venv = make_vec_env(lambda: gymnasium.make(env_id), n_envs=n, seed=seed)
    venv = VecNormalize(venv)
    rows = []

    class Curve(BaseCallback):
        def _on_rollout_end(self):
            buf = self.model.ep_info_buffer
            if buf:
                rows.append({"env_steps": self.num_timesteps, "return_mean": float(np.mean([e["r"] for e in buf]))})

        def _on_step(self):
            return True

    t0 = time.perf_counter()
    model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=batch, seed=seed, device="cpu", verbose=0)
    model.learn(steps, callback=Curve())
    wall = time.perf_counter() - t0
    venv.training = False
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_csv(Path(run_dir) / "metrics.csv", [(r["env_steps"], r["return_mean"]) for r in rows],
              ["env_steps", "return_mean"])
    policy = SB3Policy(model, venv)
    return policy, rows, wall


def run_one(robot, engine, env_id, learner, seed, args, runs):
    """Train one learner on one env and evaluate its policy on the unseen seeds; returns (csv row, curve)."""
    from ..agents.config import EnvConfig
    from ..agents.episodes import evaluate_policy
    from ..agents.policies import load_policy

    if learner == "sb3-ppo":
        run_dir = runs / f"{env_id.split('/')[-1]}_sb3-ppo_s{seed}"
        policy, rows, wall = train_sb3(env_id, seed, 64 if args.quick else args.ppo_steps, run_dir, args.quick)
        steps = int(rows[-1]["env_steps"]) if rows else 0
    else:
        run_dir, rows = _train(project_config(learner, env_id, seed, args), runs)
        policy, wall, steps = load_policy(run_dir), float(rows[-1]["wall_time"]), int(rows[-1]["env_steps"])
    ev = evaluate_policy(policy, EnvConfig(id=env_id), 2 if args.quick else EVAL_EPISODES, EVAL_SEED)
    curve = _curve(rows, learner)
    row = [robot, engine, env_id, learner, seed, steps, round(wall, 1), ev["return"], ev["distance"],
           ev["terminated"], ev["length"], str(run_dir)]
    print(f"  {robot:11s} {engine:6s} {learner:8s} seed {seed}: {steps:8d} env steps in {wall:7.1f} s; eval return "
          f"{ev['return']:9.1f}, distance {ev['distance']:7.2f} m, fell {ev['terminated']:.0%}", flush=True)
    return row, curve


def ratio_rows(table):
    """PBAD / MuJoCo of the mean eval return and distance over the seeds, per robot and learner: rows of (robot,
    learner, seeds, return PBAD, return MuJoCo, ratio, distance PBAD, distance MuJoCo, ratio, fell PBAD,
    fell MuJoCo, wall ratio)."""
    out = []
    for robot in PAIRS:
        for learner in LEARNERS:
            sel = {e: [r for r in table if r[0] == robot and r[3] == learner and r[1] == e] for e in ("PBAD", "MuJoCo")}
            if not sel["PBAD"] or not sel["MuJoCo"]:
                continue
            # columns of a table row: 6 wall_s, 7 eval_return, 8 eval_distance, 9 eval_terminated
            (rp, dp, fp, wp), (rm, dm, fm, wm) = ([np.mean([r[c] for r in sel[e]]) for c in (7, 8, 9, 6)]
                                                  for e in ("PBAD", "MuJoCo"))
            out.append((robot, learner, len(sel["PBAD"]), rp, rm, _ratio(rp, rm), dp, dm, _ratio(dp, dm), fp, fm,
                        _ratio(wp, wm)))
    return out


DT10_HEADER = ["robot", "learner", "seed", "dt_s", "return", "distance", "terminated", "return_dt10",
               "distance_dt10", "terminated_dt10", "distance_kept"]


def dt10_rows(table, quick=False):
    """The PBAD policies of the project's trainers (rows of ``table``) replayed at the env's Δt and at Δt/10
    (frame_skip x 10, the same control times) on the same unseen reset seeds: what share of the forward distance
    the gait keeps when the physics step is refined, and whether it falls more."""
    import gymnasium

    from ..agents.config import EnvConfig
    from ..agents.episodes import evaluate_policy
    from ..agents.policies import load_policy

    out = []
    for r in table:
        if r[1] != "PBAD" or r[3] not in ("cmaes", "ppo"):
            continue
        policy, n = load_policy(r[11]), 2 if quick else EVAL_EPISODES
        env = gymnasium.make(r[2])
        dt = float(env.unwrapped.vec.sim.dt)  # the physics step (env.dt is the control interval)
        env.close()
        at = {k: evaluate_policy(policy, EnvConfig(id=r[2], kwargs={"dt": dt / k}), n, EVAL_SEED) for k in (1, 10)}
        kept = _ratio(at[10]["distance"], at[1]["distance"])
        out.append((r[0], r[3], r[4], dt, at[1]["return"], at[1]["distance"], at[1]["terminated"],
                    at[10]["return"], at[10]["distance"], at[10]["terminated"], kept))
        print(f"  {r[0]:11s} {r[3]:6s} seed {r[4]}: distance {at[1]['distance']:7.2f} m at Δt {dt:g} s, "
              f"{at[10]['distance']:7.2f} m at Δt/10 ({kept:.0%}); fell {at[1]['terminated']:.0%} -> "
              f"{at[10]['terminated']:.0%}", flush=True)
    return out


def _read_table(path):
    """The rows of a learnability.csv, typed as :func:`run_one` makes them."""
    import csv

    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    return [[r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), float(r[6])] + [float(x) for x in r[7:11]] + [r[11]]
            for r in rows if r]


def _ratio(a, b):
    # A ratio over a non-positive peer figure (a policy that walks backwards, a negative return) reads as its
    # opposite: leave it undefined and let the table show both figures.
    return a / b if b > 0 else float("nan")


def _plot(curves, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    robots = [r for r in PAIRS if any(k[0] == r for k in curves)]
    learners = [lr for lr in LEARNERS if any(k[2] == lr for k in curves)]
    fig, axes = plt.subplots(len(learners), len(robots), figsize=(4.5 * len(robots), 3.4 * len(learners)),
                             squeeze=False)
    for i, learner in enumerate(learners):
        for j, robot in enumerate(robots):
            ax = axes[i][j]
            for (rb, engine, lr, seed), pts in curves.items():
                if rb == robot and lr == learner and pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color="C0" if engine == "PBAD" else "C1",
                            label=f"{engine} seed {seed}", alpha=0.9)
            ax.set_title(f"{robot}: {learner}")
            ax.set_xlabel("env steps")
            ax.set_ylabel("best return" if learner == "cmaes" else "mean training return")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def run(args):
    _positive(args)
    out = out_dir(args.out, "learnability")
    if args.report:
        return report(out, args)
    runs = out / "runs"
    robots = ["Hopper"] if args.quick and args.robots is None else (args.robots or list(PAIRS))
    learners = list(args.learners or LEARNERS)
    if "sb3-ppo" in learners:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            if args.learners:
                raise ValueError("--learners sb3-ppo needs stable-baselines3: pip install 'pbad_gym[sb3]'") from None
            learners.remove("sb3-ppo")
    have_mj = not args.no_mujoco and mujoco_available()
    print(f"pbad-bench learnability on {machine()}, {stamp()}: robots {', '.join(robots)}; learners "
          f"{', '.join(learners)}; PPO {args.ppo_steps} env steps, CMA-ES {args.cma_iterations} iterations; "
          f"seeds {args.seeds}; MuJoCo peers {'yes' if have_mj else 'no'}")
    table, curves = [], {}
    for robot in robots:
        engines = [("PBAD", PAIRS[robot][0])] + ([("MuJoCo", PAIRS[robot][1])] if have_mj else [])
        for learner in learners:
            for seed in args.seeds:
                for engine, env_id in engines:
                    row, curve = run_one(robot, engine, env_id, learner, seed, args, runs)
                    table.append(row)
                    curves[(robot, engine, learner, seed)] = curve
                    write_csv(out / "learnability.csv", table, HEADER)  # after every run: a long run keeps its rows
    _write_tables(out, table, curves)
    return _write_dt10(out, table, args.quick) if args.dt10 else 0


def report(out, args):
    """``--report``: the tables and plot (and with ``--dt10`` the replay) of the learnability.csv in ``out``."""
    if not (out / "learnability.csv").exists():
        raise ValueError(f"--report needs an earlier run's {out / 'learnability.csv'}")
    table = _read_table(out / "learnability.csv")
    curves = {}
    for r in table:
        metrics = Path(r[11]) / "metrics.csv"
        if metrics.exists():
            curves[(r[0], r[1], r[3], r[4])] = _curve(_metrics_rows(r[11]), r[3])
    _write_tables(out, table, curves)
    return _write_dt10(out, table, args.quick) if args.dt10 else 0


def _write_tables(out, table, curves):
    print_table([r[:-1] for r in table], HEADER[:-1], "Learnability (evaluation on 16 unseen reset seeds)")
    ratios = ratio_rows(table)
    if ratios:
        rh = ["robot", "learner", "seeds", "return PBAD", "return MuJoCo", "return ratio", "distance PBAD",
              "distance MuJoCo", "distance ratio", "fell PBAD", "fell MuJoCo", "wall PBAD/MuJoCo"]
        write_csv(out / "ratios.csv", ratios, rh)
        print_table(ratios, rh, "PBAD / MuJoCo v5 under the same learner and budget (means over the seeds)")
    _plot(curves, out / "curves.png")
    print(f"wrote {out}/learnability.csv, ratios.csv and curves.png")


def _curve(rows, learner):
    """(env steps, return) points of a training log: CMA-ES's best-so-far, PPO's mean training return."""
    y = "return_best" if learner == "cmaes" else "return_mean"
    return [(int(float(r["env_steps"])), float(r[y])) for r in rows if r.get(y) not in (None, "")]


def _write_dt10(out, table, quick):
    rows = dt10_rows(table, quick)
    write_csv(out / "dt10.csv", rows, DT10_HEADER)
    print_table(rows, DT10_HEADER, "PBAD policies replayed at Δt/10 (same control times and reset seeds)")
    print(f"wrote {out}/dt10.csv")
    return 0
