"""Threads that never hurt: an env step on one thread and with the default launch, idle host and loaded host.

    pbad-bench threads [--env Swimmer-v1] [--batches 1 4 16 64 256] [--seconds 6] [--no-policy]

For each batch size, the wall time of one env step (the compiled kernel's step plus the env's Python, and, when
PyTorch is installed, a small policy network — 2 x 64 tanh MLP — computing the actions from the observations, as
in an RL loop) under three launch settings of the kernel — ``one thread`` (every batch on the calling thread, as
``NUMBA_NUM_THREADS=1``), ``default`` (the "auto" launch: serial or parallel, whichever the process measured
faster for that batch) and ``always parallel`` (the launch rule before "auto": every batch of 4 rows or more on
the pool), taking turns block by block in one process — first on an idle host, then with two busy processes
(``while True: pass``) beside it. The goal: the
default is never slower than one thread (ratio <= 1.1), idle or loaded, and keeps the parallel speed on large
batches.

PyTorch's own intra-op threads are the other pool on the machine: the policy runs with ``torch.set_num_threads(1)``
here (a 64-unit MLP gains nothing from more); see README, "Performance notes".
"""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from .common import machine, out_dir, print_table, stamp, write_csv

SETTINGS = ("one thread", "default", "always parallel")


def add_arguments(p):
    p.add_argument("--env", default="Swimmer-v1", help="pbad_gym env id without prefix (default Swimmer-v1)")
    p.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16, 64, 256], help="num_envs values")
    p.add_argument("--seconds", type=float, default=6.0,
                   help="wall seconds timed per batch size, the three settings taking turns (default 6)")
    p.add_argument("--no-policy", action="store_true", help="zero actions instead of a torch policy")


def _policy(obs_dim, n_act, use_torch):
    """actions(obs) of a 2 x 64 tanh MLP (torch, one intra-op thread), or zeros without torch."""
    if use_torch:
        try:
            import torch
        except ImportError:
            use_torch = False
    if not use_torch:
        return lambda obs: np.zeros((obs.shape[0], n_act), np.float32), False
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(obs_dim, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                              torch.nn.Tanh(), torch.nn.Linear(64, n_act), torch.nn.Tanh())

    def act(obs):
        with torch.no_grad():
            return net(torch.from_numpy(np.asarray(obs, dtype=np.float32))).numpy()

    return act, True


def time_settings(env, act, seconds, settings, block_s=0.05, seed=0):
    """Per-step wall seconds of one env step (policy included) under each of ``settings`` (callables that switch
    the kernel's launch setting), taking turns block by block in a shuffled order each round, so that a change of
    the host's speed hits every setting alike; each block lasts about ``block_s`` (many scheduler slices on a
    loaded host). Runs until ``seconds`` have passed and there are 5 rounds. Returns (median seconds per setting,
    median over the rounds of each setting's time over the first setting's)."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=0)
    for setting in settings:  # warm-up: compile, thread pool, the launch chooser's first measurements
        setting()
        for _ in range(10):
            obs, *_ = env.step(act(obs))
    t0 = time.perf_counter()
    for _ in range(10):
        obs, *_ = env.step(act(obs))
    block = max(5, int(block_s / max((time.perf_counter() - t0) / 10, 1e-6)))
    rounds = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(rounds) < 5:
        row = [0.0] * len(settings)
        for k in rng.permutation(len(settings)):
            settings[k]()
            t0 = time.perf_counter()
            for _ in range(block):
                obs, *_ = env.step(act(obs))
            row[k] = (time.perf_counter() - t0) / block
        rounds.append(row)
    r = np.array(rounds)
    return np.median(r, axis=0).tolist(), np.median(r / r[:, :1], axis=0).tolist()


def _busy(n):
    """n processes spinning on a core each (the "loaded host"); terminate them when done."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def measure(env_id, batches, seconds, use_policy, loaded):
    """Rows (host, num_envs, ms per step for each of SETTINGS) on an idle or loaded host."""
    import gymnasium

    import pbad_gym  # noqa: F401
    from ..kernels.numba import threads

    procs = _busy(2) if loaded else []
    rows = []
    try:
        for B in batches:
            env = gymnasium.make_vec(f"pbad_gym/{env_id}", num_envs=B, vectorization_mode="vector_entry_point")
            act, _ = _policy(env.single_observation_space.shape[0], env.single_action_space.shape[0], use_policy)
            pool = threads.num_threads()

            def setting(n_threads, policy):
                def apply():
                    threads.set_threads(n_threads)
                    threads.set_launch_policy(policy)
                return apply

            try:
                med, ratio = time_settings(env, act, seconds, [setting(1, "auto"), setting(pool, "auto"),
                                                               setting(pool, "parallel")])
            finally:
                threads.set_threads(pool)
                threads.set_launch_policy("auto")
            env.close()
            out = [1e3 * t for t in med]
            rows.append(["loaded (2 busy)" if loaded else "idle", B] + out + [ratio[1], ratio[2]])
            print("  " + "  ".join(str(x) if not isinstance(x, float) else f"{x:.3f}" for x in rows[-1]), flush=True)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    return rows


def run(args):
    out = out_dir(args.out, "threads")
    from ..kernels.numba import threads

    policy = "none" if args.no_policy else "torch MLP"
    print(f"pbad-bench threads on {machine()}, {stamp()}: pbad_gym/{args.env}, numba pool {threads.num_threads()} "
          f"threads, layer {threads.threading_layer()}; ms per env step (policy: {policy})")
    rows = measure(args.env, args.batches, args.seconds, not args.no_policy, False)
    rows += measure(args.env, args.batches, args.seconds, not args.no_policy, True)
    header = ["host", "num_envs", "one_thread_ms", "default_ms", "always_parallel_ms", "default_over_one_thread",
              "always_parallel_over_one_thread"]
    write_csv(out / "threads.csv", rows, header)
    print_table(rows, header, title="median ms per env step (lower is better) and median paired ratios over the "
                                    "rounds; goal: default / one thread <= 1.1")
    worst = max(r[5] for r in rows)
    print(f"worst default / one thread: {worst:.2f} ({'met' if worst <= 1.1 else 'NOT met'})")
    _plot(rows, out / "threads.png")
    print(f"wrote {out}/threads.csv, {out}/threads.png")
    return 0


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, host in zip(axes, ("idle", "loaded (2 busy)")):
        sub = [r for r in rows if r[0] == host]
        x = np.arange(len(sub))
        for k, setting in enumerate(SETTINGS):
            ax.bar(x + (k - 1) * 0.27, [r[2 + k] for r in sub], 0.27, label=setting)
        ax.set_xticks(x, [str(r[1]) for r in sub])
        ax.set_yscale("log")
        ax.set_title(host)
        ax.set_xlabel("num_envs")
    axes[0].set_ylabel("ms per env step")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
