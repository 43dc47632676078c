"""CMA-ES on Ray actors: iteration time with workers = 0, 1, 2 on this machine, Ray's measured overheads, and a
projection to 8, 64 and 512 workers written from those measurements (needs the ``distributed`` extra).

Measured, in this order, on one local Ray cluster:
1. start-up: ``ray.init`` of a local cluster, and the start of W actors up to their first answer (each builds
   its vector env; numba / BLAS threads capped to one CPU per actor);
2. round trip of an empty actor call (median), and the driver's cost per call with many calls in flight;
3. per-actor throughput: one actor evaluating r rows (a random linear policy, Swimmer-v1), its own wall and CPU
   time per step for r in ROWS; the CPU time (what the actor takes on a core of its own, whatever else runs on a
   shared host) fitted as t(r) = a + b·r (non-negative a, b; least squares on the relative error);
4. CMA-ES iterations (``agents.cmaes.train`` on ``configs/swimmer_cmaes.yaml``'s setting: population 20, 1000-step
   episodes, oscillator policy) with workers = 0, 1, 2: wall time per iteration from metrics.csv (the first
   iteration, which starts the actors, separately), the evaluation's wall and CPU time (the driver's with 0
   workers, the busiest actor's otherwise), the Ray overhead per iteration = the driver's evaluation time − the
   slowest actor's own, and pycma's ask + tell time.

Projection (one CPU per actor, every node as fast per core as this one, this host's loopback round trip — a
network adds its latency once per iteration): iteration(W, P) = S·t(⌈P/W⌉) + overhead(W) + ask/tell(P), with
overhead(W) = the measured per-iteration overhead at 2 workers + (W − 2)·(driver cost per call), for populations
P = 20 (the paper's) and 1,000 at S = 1000 steps; start-up = ray.init + actor start (actors start in parallel on
their own nodes; here measured for 1 and 2).
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from .common import machine, out_dir, print_table, stamp, write_csv

ROWS = (1, 2, 5, 10, 20, 50, 125)
PROJECT_WORKERS = (8, 64, 512)
PROJECT_POPS = (20, 1000)


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="population 4, 40-step episodes, 2 iterations (smoke test)")
    p.add_argument("--iterations", type=int, default=3, help="CMA-ES iterations per workers setting (default 3)")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="workers settings (default 0 1 2)")
    p.add_argument("--ray-address", default=None, help="join this Ray cluster instead of starting a local one")


def _ray_start(address):
    from ..agents.distributed import import_ray, init_ray

    ray = import_ray()
    if ray.is_initialized():
        return ray, float("nan")
    if address is None:  # a local cluster with this machine's CPUs (the default init, no dashboard)
        return ray, init_ray(None)
    return ray, init_ray(address)


def _pool(env_cfg, rows, workers, address):
    from ..agents.distributed import RayVectorEnv

    t0 = time.perf_counter()
    env = RayVectorEnv(env_cfg, rows, workers, ray_address=address)
    env.actor_threads()  # every actor has answered
    return env, time.perf_counter() - t0


def _policy(env, rows, seed=0):
    from ..agents.policies import FlatPolicy, PolicySpec

    space = env.single_action_space
    spec = PolicySpec("linear", int(np.prod(env.single_observation_space.shape)), space.shape[0])
    theta = np.random.default_rng(seed).normal(0, 0.5, (rows, spec.n_params))
    return FlatPolicy(spec, theta, None, 10.0, space.low, space.high, space.dtype)


def measure_overheads(env_cfg, address, calls=200):
    """Round trip of an empty call (median, s) and the driver's cost per call with ``calls`` in flight over 2
    actors (s); also returns the 2-actor pool's start-up time."""
    ray = __import__("ray")
    env, start2 = _pool(env_cfg, 2, 2, address)
    a = env._actors
    for _ in range(10):
        ray.get(a[0].ping.remote(None))
    rt = []
    for _ in range(calls):
        t0 = time.perf_counter()
        ray.get(a[0].ping.remote(None))
        rt.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    ray.get([a[i % 2].ping.remote(None) for i in range(calls)])
    per_call = (time.perf_counter() - t0) / calls
    env.close()
    return float(np.median(rt)), per_call, start2


def measure_actor_throughput(env_cfg, address, rows_list, steps):
    """(wall, CPU) seconds per step of one actor evaluating r rows (its own times, the second of two
    evaluations), for r in ``rows_list``; and the 1-actor pool's start-up time."""
    from ..agents.cmaes import with_episode_steps

    ray = __import__("ray")
    env, start1 = _pool(with_episode_steps(env_cfg, steps), 1, 1, address)
    actor = env._actors[0]
    out = {}
    for r in rows_list:
        pol, seeds = _policy(env, r), list(range(r))
        ray.get(actor.evaluate.remote(pol, 1, steps, seeds))  # builds the r-row env
        _, wall, cpu = ray.get(actor.evaluate.remote(pol, 1, steps, seeds))
        out[r] = (wall / steps, cpu / steps)
    env.close()
    return out, start1


def run_cmaes(workers, iterations, popsize, steps, address, root):
    """Per-iteration wall times of a CMA-ES run with ``workers``, and per evaluation: its wall time in the driver,
    the slowest actor's own wall time and the CPU time of the evaluating process(es) (the driver's with 0 workers,
    the busiest actor's otherwise)."""
    from ..agents import cmaes, distributed
    from ..agents.config import config_from_dict
    from ..agents.runio import MetricsLog

    cfg = config_from_dict({"name": f"w{workers}", "seed": 0, "workers": workers, "ray_address": address,
                            "env": {"id": "pbad_gym/Swimmer-v1"},
                            "cmaes": {"policy": "oscillator", "popsize": popsize, "sigma0": 1.0,
                                      "iterations": iterations, "episode_steps": steps}})
    evals, actor_wall, cpu = [], [], []
    real_pop, real_local = distributed.RayVectorEnv.evaluate_population, cmaes.evaluate

    def timed_pop(self, *a, **k):
        t0 = time.perf_counter()
        res = real_pop(self, *a, **k)
        evals.append(time.perf_counter() - t0)
        actor_wall.append(max(self.compute_seconds))
        cpu.append(max(self.cpu_seconds))
        return res

    def timed_local(envs, *a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        res = real_local(envs, *a, **k)
        if workers == 0:
            evals.append(time.perf_counter() - t0)
            actor_wall.append(evals[-1])
            cpu.append(time.process_time() - c0)
        return res

    distributed.RayVectorEnv.evaluate_population, cmaes.evaluate = timed_pop, timed_local
    try:
        run_dir = Path(root) / f"w{workers}"
        cmaes.train(cfg, run_dir, progress=False)
    finally:
        distributed.RayVectorEnv.evaluate_population, cmaes.evaluate = real_pop, real_local
    walls = [float(r["wall_time"]) for r in MetricsLog(run_dir / "metrics.csv", cmaes.FIELDS).rows()]
    return np.diff([0.0] + walls), evals, actor_wall, cpu


def asktell_seconds(n_params, popsize, reps=5):
    import cma

    es = cma.CMAEvolutionStrategy(np.zeros(n_params), 1.0, {"popsize": popsize, "verbose": -9, "seed": 1,
                                                             "verb_log": 0})
    t0 = time.perf_counter()
    for _ in range(reps):
        X = es.ask()
        es.tell(X, [float(np.sum(np.square(x))) for x in X])
    return (time.perf_counter() - t0) / reps


def run(args):
    from ..agents.config import EnvConfig

    out = out_dir(args.out, "scaling")
    popsize, steps = (4, 40) if args.quick else (20, 1000)
    iterations = 2 if args.quick else args.iterations
    rows_list = (1, 2, 4) if args.quick else ROWS
    load = os.getloadavg()[0]
    print(f"pbad-bench scaling on {machine()}, {stamp()}; load average {load:.1f} at the start; CMA-ES population "
          f"{popsize} x {steps} steps, {iterations} iterations per setting", flush=True)
    ray, t_init = _ray_start(args.ray_address)
    env_cfg = EnvConfig(id="pbad_gym/Swimmer-v1")
    print(f"  ray.init (local cluster start-up): {t_init:.2f} s", flush=True)
    rt, per_call, start2 = measure_overheads(env_cfg, args.ray_address)
    print(f"  round trip of an empty call: {rt * 1e3:.2f} ms (median); driver cost per call in flight: "
          f"{per_call * 1e3:.3f} ms; 2 actors started in {start2:.2f} s", flush=True)
    t_row, start1 = measure_actor_throughput(env_cfg, args.ray_address, rows_list, 100 if args.quick else 200)
    for r, (w, c) in t_row.items():
        print(f"  one actor, {r:3d} rows: {w * 1e3:.3f} ms per step wall ({r / w:7.0f} env-steps/s), {c * 1e3:.3f} ms "
              f"CPU ({r / c:7.0f} env-steps per CPU-second)", flush=True)
    from scipy.optimize import nnls

    rs = np.array(list(t_row), float)
    ts = np.array([c for _, c in t_row.values()])  # CPU time: what an actor on a core of its own takes
    (a_fit, b_fit), _ = nnls(np.stack([np.ones_like(rs), rs], axis=1) / ts[:, None], np.ones_like(ts))  # relative
    print(f"  fit of the CPU time per step t(r) = {a_fit * 1e3:.3f} ms + {b_fit * 1e3:.4f} ms per row; 1 actor "
          f"started in {start1:.2f} s", flush=True)

    rows = []
    with tempfile.TemporaryDirectory() as root:
        for w in args.workers:
            per_it, evals, actor_wall, cpu = run_cmaes(w, iterations, popsize, steps, args.ray_address, root)
            k = slice(1, None) if len(per_it) > 1 else slice(None)  # the first iteration starts the actors
            overhead = float(np.mean([e - a for e, a in zip(evals[k], actor_wall[k])])) if w else float("nan")
            rows.append((w, float(per_it[0]), float(np.mean(per_it[k])), popsize * steps / float(np.mean(per_it[k])),
                         float(np.mean(actor_wall[k])), float(np.mean(cpu[k])), overhead))
            print(f"  workers {w}: first iteration {per_it[0]:.2f} s, then {rows[-1][2]:.2f} s per iteration "
                  f"({rows[-1][3]:.0f} env-steps/s); evaluation {rows[-1][4]:.2f} s wall, {rows[-1][5]:.2f} s CPU of "
                  f"the busiest process; Ray overhead {overhead * 1e3:.1f} ms per iteration", flush=True)
    header = ["workers", "first_iteration_s", "iteration_s", "env_steps_per_s", "evaluation_wall_s",
              "evaluation_cpu_s", "ray_overhead_per_iteration_s"]
    write_csv(out / "measured.csv", rows, header)
    print_table(rows, header, f"CMA-ES, population {popsize} x {steps} steps (load average {load:.1f})")

    # the projection
    n_osc = 2 * 3 + 1  # Swimmer-v1 oscillator: amplitude and phase per hinge actuator (3) + one frequency
    o2 = next((r[6] for r in rows if r[0] == 2 and np.isfinite(r[6])), rt)
    proj = []
    for P in PROJECT_POPS:
        at = asktell_seconds(n_osc, P)
        t_local = 1000 * (a_fit + b_fit * P)
        for W in PROJECT_WORKERS:
            r = math.ceil(P / W)
            compute = 1000 * (a_fit + b_fit * r)
            overhead = o2 + max(W - 2, 0) * per_call
            total = compute + overhead + at
            proj.append((P, W, r, compute, overhead, at, total, t_local / total, P * 1000 / total))
    ph = ["population", "workers", "rows_per_actor", "actor_s", "ray_overhead_s", "ask_tell_s", "iteration_s",
          "speedup_vs_one_actor", "env_steps_per_s"]
    write_csv(out / "projection.csv", proj, ph)
    print_table(proj, ph, f"Projection, 1000-step episodes (CPU t(r) = {a_fit * 1e3:.3f} ms + {b_fit * 1e3:.4f} ms·r "
                f"per step; overhead {o2 * 1e3:.1f} ms at 2 workers + {per_call * 1e3:.3f} ms per further worker; "
                f"start-up {t_init:.1f} s ray.init + {start1:.1f} s actor start)")
    write_csv(out / "overheads.csv", [(t_init, start1, start2, rt, per_call, a_fit, b_fit, load)],
              ["ray_init_s", "actor_start_1_s", "actor_start_2_s", "round_trip_s", "per_call_s", "t_step_cpu_a_s",
               "t_step_cpu_b_s_per_row", "load_average"])
    write_csv(out / "actor_steps.csv", [(r, w, c) for r, (w, c) in t_row.items()],
              ["rows", "wall_s_per_step", "cpu_s_per_step"])
    _plot(out, rows, proj)
    print(f"wrote {out}/measured.csv, projection.csv, overheads.csv, scaling.png")
    return 0


def _plot(out, rows, proj):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].bar([str(r[0]) for r in rows], [r[2] for r in rows])
    axes[0].set(xlabel="workers (0: in-process)", ylabel="s per CMA-ES iteration", title="measured on this machine")
    for P in PROJECT_POPS:
        pr = [p for p in proj if p[0] == P]
        axes[1].plot([p[1] for p in pr], [p[6] for p in pr], "o-", label=f"population {P}")
    axes[1].set(xscale="log", yscale="log", xlabel="workers", ylabel="s per iteration (1000 steps)",
                title="projection")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=110)
    plt.close(fig)
