"""PBAD paper Figure 5: controller optimisation on the simulator.

(a) the Swimmer optimised by CMA-ES at the paper's setting (population 20, 1000 steps at Δt = 0.05 s,
100 iterations; the paper: 12 s per iteration on a GPU) and (b) the Spider optimised by policy gradients (PPO;
the paper: 100 iterations of 27 s each), both through the project's trainers (``configs/swimmer_cmaes.yaml`` and
``configs/spider_v3_ppo.yaml`` by default, scaled by ``--fraction``). When the ``mujoco`` extra is installed the same
trainers run on Gymnasium's MuJoCo Swimmer-v5 / Ant-v5 with the same population (CMA-ES) or sub-environments (PPO)
and the same simulated time per episode (episode steps scaled by the Δt ratio), side by side.

Writes results/fig5/fig5.csv (one row per run: time per iteration, the last iteration's returns and distances),
fig5.png (learning curves) and every run folder under results/fig5/runs/. ``--tasks spider`` run after
``--tasks swimmer`` keeps the swimmer's rows (the panels can be run one at a time).
"""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

from .common import machine, mujoco_available, out_dir, print_table, stamp, write_csv

PAPER_SECONDS_PER_ITERATION = {"swimmer": 12.0, "spider": 27.0}
PANEL = {"swimmer": "a", "spider": "b"}  # the paper's Figure 5 panels
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MUJOCO_TWIN = {"Swimmer": ("Swimmer-v5", 0.04), "Spider": ("Ant-v5", 0.05)}  # id, dt [s]


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="a tiny run of every case (smoke test)")
    p.add_argument("--fraction", type=float, default=1.0,
                   help="fraction of the paper's iterations / of the PPO config's timesteps (default 1)")
    p.add_argument("--spider-fraction", type=float, default=None,
                   help="the spider's own fraction (default: --fraction)")
    p.add_argument("--swimmer-config", default=str(CONFIGS / "swimmer_cmaes.yaml"), help="CMA-ES swimmer config")
    p.add_argument("--spider-config", default=str(CONFIGS / "spider_v3_ppo.yaml"),
                   help="PPO spider config (default configs/spider_v3_ppo.yaml, the newest Spider)")
    p.add_argument("--no-mujoco", action="store_true", help="skip Gymnasium's MuJoCo twins even if installed")
    p.add_argument("--tasks", nargs="+", choices=("swimmer", "spider"), default=["swimmer", "spider"],
                   help="which panels to run (default: both)")


def _scaled(cfg, fraction, quick):
    """The config at ``fraction`` of its length (or the --quick size)."""
    if cfg.algo == "cmaes":
        c = cfg.cmaes
        c = (dataclasses.replace(c, popsize=4, iterations=2, episode_steps=20) if quick
             else dataclasses.replace(c, iterations=max(1, round(c.iterations * fraction))))
        return dataclasses.replace(cfg, cmaes=c)
    p = cfg.ppo
    n = cfg.env.num_envs
    if quick:
        env = dataclasses.replace(cfg.env, num_envs=2)
        p = dataclasses.replace(p, num_steps=16, total_timesteps=2 * 16 * 2, num_minibatches=2, update_epochs=1)
        return dataclasses.replace(cfg, env=env, ppo=p, checkpoint_every=1)
    batch = n * p.num_steps
    return dataclasses.replace(cfg, ppo=dataclasses.replace(
        p, total_timesteps=max(batch, int(p.total_timesteps * fraction) // batch * batch)))


def _mujoco_twin(cfg, pbad_dt):
    """The same training on the MuJoCo twin of ``cfg.env.id`` with the same simulated time per episode."""
    family = "Swimmer" if "Swimmer" in cfg.env.id else "Spider"
    twin_id, twin_dt = MUJOCO_TWIN[family]
    if cfg.algo == "cmaes":
        steps = max(1, round(cfg.cmaes.episode_steps * pbad_dt / twin_dt))
        return dataclasses.replace(cfg, name=cfg.name + "_mujoco",
                                   env=dataclasses.replace(cfg.env, id=twin_id, kwargs={}),
                                   cmaes=dataclasses.replace(cfg.cmaes, episode_steps=steps))
    steps = max(1, round(1000 * pbad_dt / twin_dt))
    return dataclasses.replace(cfg, name=cfg.name + "_mujoco",
                               env=dataclasses.replace(cfg.env, id=twin_id, kwargs={"max_episode_steps": steps}))


def _env_dt(env_id, kwargs):
    import gymnasium

    env = gymnasium.make(env_id, **kwargs)
    dt = float(env.unwrapped.dt)
    env.close()
    return dt


def _metrics_rows(run_dir):
    import csv

    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _train(cfg, runs):
    """Train ``cfg`` into runs/NAME (its resolved config.yaml beside); returns (run folder, metrics rows)."""
    from ..agents.config import dump_config
    from ..agents.runio import atomic_write_bytes

    run_dir = runs / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(run_dir / "config.yaml", dump_config(cfg).encode())
    importlib.import_module(f"pbad_gym.agents.{cfg.algo}").train(cfg, run_dir, progress=False)
    return run_dir, _metrics_rows(run_dir)


HEADER = ["task", "engine", "env", "algo", "iterations", "env_steps", "wall_s", "s_per_iteration",
          "paper_s_per_iteration", "return_best", "return_mean", "distance_best", "distance_mean", "run_dir"]


def _row(task, engine, cfg, run_dir, rows):
    last = rows[-1]
    wall = float(last["wall_time"])
    return [task, engine, cfg.env.id, cfg.algo, len(rows), int(last["env_steps"]), wall, wall / len(rows),
            PAPER_SECONDS_PER_ITERATION[task]] + [_f(last.get(k)) for k in HEADER[9:13]] + [str(run_dir)]


def _previous_rows(csv_path, tasks):
    """Rows of an earlier fig5.csv for the tasks not run now (so the panels can be run one at a time)."""
    import csv

    if not csv_path.exists():
        return []
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.reader(f)][1:]
    return [r for r in rows if r and r[0] not in tasks and Path(r[-1], "metrics.csv").exists()]


def _plot(table, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in PANEL if any(r[0] == t for r in table)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for r in table:
            if r[0] != task:
                continue
            y = "return_best" if r[3] == "cmaes" else "return_mean"
            pts = [(int(m["iteration"]), float(m[y])) for m in _metrics_rows(r[-1]) if m.get(y) not in (None, "")]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{r[1]}: {r[2]} ({r[3]}, {y})")
        ax.set_title(f"({PANEL[task]}) {task}")
        ax.set_xlabel("iteration")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def run(args):
    from ..agents.config import load_config

    fractions = {"swimmer": args.fraction,
                 "spider": args.fraction if args.spider_fraction is None else args.spider_fraction}
    for name, f in fractions.items():
        if not 0 < f <= 1:
            raise SystemExit(f"--fraction / --spider-fraction must be in (0, 1], got {f} for the {name}")
    d = out_dir(args.out, "fig5")
    runs = d / "runs"
    paths = {"swimmer": args.swimmer_config, "spider": args.spider_config}
    cases = [(task, load_config(paths[task])) for task in PANEL if task in args.tasks]
    mujoco = not args.no_mujoco and mujoco_available()
    table = []
    for task, cfg in cases:
        cfg = _scaled(cfg, fractions[task], args.quick)
        variants = [("pbad", cfg)]
        if mujoco:
            variants.append(("mujoco", _mujoco_twin(cfg, _env_dt(cfg.env.id, cfg.env.kwargs))))
        for engine, c in variants:
            print(f"fig5: {task} / {engine}: {c.algo} on {c.env.id} ...", flush=True)
            run_dir, rows = _train(c, runs)
            table.append(_row(task, engine, c, run_dir, rows))
    table = sorted(_previous_rows(d / "fig5.csv", args.tasks) + table, key=lambda r: list(PANEL).index(r[0]))
    write_csv(d / "fig5.csv", table, HEADER)
    print_table([r[:-1] for r in table], HEADER[:-1],
                title=f"PBAD Figure 5 — controller optimisation ({machine()}, {stamp()})")
    _plot(table, d / "fig5.png")
    print(f"\nwrote {d / 'fig5.csv'}, {d / 'fig5.png'} and the run folders under {runs}")
    return 0


def _f(x):
    return float("nan") if x in (None, "") else float(x)
