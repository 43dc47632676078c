"""Environment throughput: env-steps/s and simulated seconds per wall second of the Swimmer and the Spider for
num_envs in {1, 16, 64, 256, 1024} under uniformly random actions (native vector envs, NumPy on CPU), and —
when the optional ``mujoco`` extra is installed — Gymnasium's Swimmer-v5 and Ant-v5 in the same run (one env,
and ``make_vec(..., vectorization_mode="sync")`` with 16 envs), compared as ratios.
"""
from __future__ import annotations

import time

import numpy as np

from .common import machine, mujoco_available, out_dir, print_table, stamp, write_csv

BATCHES = (1, 16, 64, 256, 1024)
PAIRS = (("Swimmer", "pbad_gym/Swimmer-v0", "Swimmer-v5"), ("Spider", "pbad_gym/Spider-v0", "Ant-v5"),
         ("Swimmer-v1", "pbad_gym/Swimmer-v1", "Swimmer-v5"), ("Spider-v1", "pbad_gym/Spider-v1", "Ant-v5"))
SEED_PAPER_STEPS_PER_S = 20 * 1000 / 12.0  # PBAD paper: 20 swimmer trajectories x 1000 steps in 12 s per iteration


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="short timings and batches up to 64 (smoke test)")
    p.add_argument("--seconds", type=float, default=3.0, help="wall seconds spent timing each case")
    p.add_argument("--batches", type=int, nargs="+", default=None, help=f"num_envs values (default {BATCHES})")
    p.add_argument("--no-mujoco", action="store_true", help="skip Gymnasium's MuJoCo envs even if installed")
    p.add_argument("--envs", nargs="+", choices=[name for name, _, _ in PAIRS], default=None,
                   help="which pbad_gym envs to time (default all)")


def _time(step, reset, batch, seconds, min_steps=3):
    """Run ``step()`` (one batched env step) until ``seconds`` pass; returns (env-steps/s, extra list)."""
    reset()
    for _ in range(2):
        step()
    n, t0 = 0, time.perf_counter()
    extras = []
    while True:
        extras.append(step())
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and n >= min_steps:
            return n * batch / elapsed, extras


def time_pbad(env_id, batch, seconds, seed=0):
    """(env-steps/s, dt, mean LM iterations per step) of a native pbad_gym vector env under random actions."""
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the ids)

    env = gymnasium.make_vec(env_id, num_envs=batch, vectorization_mode="vector_entry_point")
    rng = np.random.default_rng(seed)
    shape = env.action_space.shape

    def step():
        _, _, _, _, info = env.step(rng.uniform(-1, 1, shape).astype(np.float32))
        return float(np.mean(info["iterations"])), int(np.max(info["iterations"]))

    rate, extras = _time(step, lambda: env.reset(seed=seed), batch, seconds)
    dt = env.unwrapped.dt
    env.close()
    return rate, dt, float(np.mean([e[0] for e in extras])), int(max(e[1] for e in extras))


def time_mujoco(env_id, batch, seconds, seed=0):
    """(env-steps/s, dt) of a Gymnasium MuJoCo env: ``gymnasium.make`` for batch 1, sync make_vec otherwise."""
    import gymnasium

    if batch == 1:
        env = gymnasium.make(env_id)
        env.action_space.seed(seed)

        def step():
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
    else:
        env = gymnasium.make_vec(env_id, num_envs=batch, vectorization_mode="sync")
        env.action_space.seed(seed)

        def step():
            env.step(env.action_space.sample())

    rate, _ = _time(step, lambda: env.reset(seed=seed), batch, seconds)
    dt = env.unwrapped.dt if batch == 1 else env.envs[0].unwrapped.dt
    env.close()
    return rate, dt


def run(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = out_dir(args.out, "throughput")
    batches = tuple(args.batches) if args.batches else ((1, 16, 64) if args.quick else BATCHES)
    seconds = 0.5 if args.quick else args.seconds
    print(f"pbad-bench throughput on {machine()}, {stamp()}; {seconds:g} s per case, random actions, float64 numpy")
    rows = []
    have_mj = not args.no_mujoco and mujoco_available()
    ref = {}
    pairs = [p for p in PAIRS if args.envs is None or p[0] in args.envs]
    for name, pid, mid in pairs:
        for b in batches:
            rate, dt, it, it_max = time_pbad(pid, b, seconds)
            rows.append((name, "pbad", b, rate, rate * dt, dt, it, it_max))
            print(f"  {name:8s} pbad   num_envs {b:5d}: {rate:10.0f} env-steps/s  {rate * dt:9.1f} sim-s/s  "
                  f"LM iterations {it:.2f} (max {it_max})", flush=True)
        if have_mj:
            for b in (1, 16):
                if (mid, b) in ref:  # one MuJoCo reference per id, shared by the pbad_gym versions
                    ref[(name, b)] = ref[(mid, b)]
                    continue
                rate, dt = time_mujoco(mid, b, seconds)
                ref[(name, b)] = ref[(mid, b)] = rate
                rows.append((mid, "mujoco" if b == 1 else "mujoco sync", b, rate, rate * dt, dt, 0.0, 0))
                print(f"  {mid:8s} mujoco num_envs {b:5d}: {rate:10.0f} env-steps/s  {rate * dt:9.1f} sim-s/s",
                      flush=True)
    header = ["env", "engine", "num_envs", "env_steps_per_s", "sim_s_per_wall_s", "dt_s", "mean_lm_iterations",
              "max_lm_iterations"]
    write_csv(out / "throughput.csv", rows, header)
    print_table(rows, ["env", "engine", "num_envs", "env-steps/s", "sim-s/wall-s", "dt [s]", "LM it.", "max it."],
                "Throughput")

    ratio_rows = []
    for name, _, mid in pairs:
        for r in rows:
            if r[0] == name:
                line = [name, r[2], r[3]]
                if have_mj:
                    line += [r[3] / ref[(name, 1)], r[3] / ref[(name, 16)],
                             r[4] / (ref[(name, 1)] * [x for x in rows if x[0] == mid][0][5])]
                ratio_rows.append(tuple(line))
    rh = ["env", "num_envs", "env-steps/s"]
    if have_mj:
        rh += ["/ MuJoCo 1 env", "/ MuJoCo sync 16", "sim-s/s / MuJoCo 1 env"]
    write_csv(out / "ratios.csv", ratio_rows, rh)
    print_table(ratio_rows, rh, "PBAD vs Gymnasium MuJoCo (Swimmer-v5 for the Swimmer, Ant-v5 for the Spider)"
                if have_mj else "PBAD (mujoco extra not installed: no MuJoCo reference)")

    def rate_of(name, b):
        return next((r[3] for r in rows if r[0] == name and r[2] == b), None)

    sw = rate_of("Swimmer", 256)
    if sw is not None:
        target = 10 * SEED_PAPER_STEPS_PER_S
        print(f"target: Swimmer at num_envs 256 >= 10 x the seed paper's {SEED_PAPER_STEPS_PER_S:.0f} env-steps/s "
              f"= {target:.0f}: measured {sw:.0f} ({'met' if sw >= target else 'NOT met'})")
    sp = rate_of("Spider", 256)
    if sp is not None and have_mj:
        print(f"target: Spider at num_envs 256 >= Ant-v5 single env {ref[('Spider', 1)]:.0f} env-steps/s: measured "
              f"{sp:.0f} ({'met' if sp >= ref[('Spider', 1)] else 'NOT met'})")

    fig, axes = plt.subplots(1, len(pairs), figsize=(6 * len(pairs), 4.5), squeeze=False)
    for ax, (name, _, mid) in zip(axes[0], pairs):
        r = [x for x in rows if x[0] == name]
        ax.plot([x[2] for x in r], [x[3] for x in r], "o-", label=f"pbad_gym {name} (native vector env)")
        if have_mj:
            ax.axhline(ref[(name, 1)], color="C1", ls="--", label=f"{mid} (MuJoCo), 1 env")
            ax.axhline(ref[(name, 16)], color="C2", ls=":", label=f"{mid} (MuJoCo), sync 16 envs")
        if name == "Swimmer":
            ax.axhline(10 * SEED_PAPER_STEPS_PER_S, color="C3", ls="-.", label="10 x PBAD paper (1,700/s)")
        ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="env-steps/s", title=f"{name}, random actions")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)
    print(f"wrote {out}/throughput.png and CSVs")
    return 0
