"""Environment throughput: env-steps/s and simulated seconds per wall second of the Swimmer, the Spider and the
MJCF robots (Hopper-v0, Walker2d-v0, HalfCheetah-v0, Ant-v0) for num_envs in {1, 16, 64, 256, 1024} under uniformly
random actions (native vector envs on CPU, for each step backend: ``--backends numpy numba``), and — when the
optional ``mujoco`` extra is installed — each one's Gymnasium v5 peer in the same run (one env,
``make_vec(..., vectorization_mode="sync")`` with 16 envs, and ``mujoco.rollout`` of random-control trajectories at
the largest batch up to 256 with ``--threads`` threads, by default the numba kernel's), compared as ratios.

``--workloads`` times instead the loops RL users run, side by side with their MuJoCo peers in one run (issue 11's
table): a CMA-ES Swimmer iteration (20 candidates x 1000 steps), PPO-style stepping (10k env steps on 16 envs) of
the Swimmer and the Spider, env-steps/s at 256 and at 1 env, and ``mujoco.rollout`` on Swimmer-v5 with
``--threads`` threads; with ``--compile-time`` also the numba kernel's first compile (fresh cache directory) and
cached load (a second process) times. ``--set KEY=VALUE``: keyword arguments of the pbad_gym envs of the sweep
(e.g. ``integrator=bdf2 penalty_springs=implicit dt=0.0025``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .common import add_set_argument, env_settings, machine, mujoco_available, out_dir, print_table, stamp, write_csv

BATCHES = (1, 16, 64, 256, 1024)
PAIRS = (("Swimmer", "pbad_gym/Swimmer-v0", "Swimmer-v5"), ("Spider", "pbad_gym/Spider-v0", "Ant-v5"),
         ("Swimmer-v1", "pbad_gym/Swimmer-v1", "Swimmer-v5"), ("Spider-v1", "pbad_gym/Spider-v1", "Ant-v5"),
         ("Spider-v2", "pbad_gym/Spider-v2", "Ant-v5"), ("Spider-v3", "pbad_gym/Spider-v3", "Ant-v5"),
         ("Spider-v4", "pbad_gym/Spider-v4", "Ant-v5"), ("Spider-v5", "pbad_gym/Spider-v5", "Ant-v5"),
         ("Hopper", "pbad_gym/Hopper-v0", "Hopper-v5"), ("Walker2d", "pbad_gym/Walker2d-v0", "Walker2d-v5"),
         ("HalfCheetah", "pbad_gym/HalfCheetah-v0", "HalfCheetah-v5"), ("Ant-v0", "pbad_gym/Ant-v0", "Ant-v5"))
SEED_PAPER_STEPS_PER_S = 20 * 1000 / 12.0  # PBAD paper: 20 swimmer trajectories x 1000 steps in 12 s per iteration


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="short timings and batches up to 64 (smoke test)")
    p.add_argument("--seconds", type=float, default=3.0, help="wall seconds spent timing each case")
    p.add_argument("--batches", type=int, nargs="+", default=None, help=f"num_envs values (default {BATCHES})")
    p.add_argument("--no-mujoco", action="store_true", help="skip Gymnasium's MuJoCo envs even if installed")
    p.add_argument("--envs", nargs="+", choices=[name for name, _, _ in PAIRS], default=None,
                   help="which pbad_gym envs to time (default all)")
    p.add_argument("--backends", nargs="+", choices=("numpy", "numba"), default=None,
                   help="step backends of the pbad_gym envs (default: numpy and, when it imports, numba)")
    p.add_argument("--workloads", action="store_true",
                   help="time the RL workloads of issue 11 against their MuJoCo peers instead of the num_envs sweep")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of mujoco.rollout (default: the numba kernel's thread count, so both engines use "
                        "the same threads)")
    add_set_argument(p)
    p.add_argument("--compile-time", action="store_true",
                   help="with --workloads: also time the numba kernel's first compile (minutes) and cached load")


def _backends(args):
    if args.backends:
        return tuple(args.backends)
    try:
        import numba  # noqa: F401
    except ImportError:
        return ("numpy",)
    return ("numpy", "numba")


def _time(step, reset, batch, seconds, min_steps=3):
    """Run ``step()`` (one batched env step) until ``seconds`` pass; returns (env-steps/s, extra list)."""
    reset()
    for _ in range(6):  # compile, thread pool, and the kernel's launch choice (2 trial launches of each kind)
        step()
    n, t0 = 0, time.perf_counter()
    extras = []
    while True:
        extras.append(step())
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and n >= min_steps:
            return n * batch / elapsed, extras


def _make_pbad(env_id, batch, backend=None, **settings):
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the ids)

    kw = {} if backend is None else {"backend": backend}
    return gymnasium.make_vec(env_id, num_envs=batch, vectorization_mode="vector_entry_point", **kw, **settings)


def time_pbad(env_id, batch, seconds, seed=0, backend=None, settings=None):
    """(env-steps/s, dt, mean LM iterations per step) of a native pbad_gym vector env (made with the keyword
    arguments ``settings``) under random actions."""
    env = _make_pbad(env_id, batch, backend, **(settings or {}))
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


def _rollout_threads(args) -> int:
    """mujoco.rollout's threads: ``--threads``, else the numba kernel's own thread count."""
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be a positive integer, got {args.threads}")
        return args.threads
    try:
        import numba
    except ImportError:
        return 1
    return numba.get_num_threads()


def time_rollout_for(env_id, n_traj, seconds, threads):
    """env-steps/s of :func:`time_rollout` with ``n_traj`` trajectories, their length chosen (from a short first
    rollout) so that the timed one lasts about ``seconds``."""
    probe = time_rollout(env_id, n_traj, 10, threads)
    return time_rollout(env_id, n_traj, max(10, int(probe * seconds / n_traj)), threads)


def run(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = out_dir(args.out, "throughput")
    batches = tuple(args.batches) if args.batches else ((1, 16, 64) if args.quick else BATCHES)
    seconds = 0.5 if args.quick else args.seconds
    threads = _rollout_threads(args)
    if args.workloads:
        return run_workloads(args, out, threads)
    backends = _backends(args)
    settings = env_settings(args)
    print(f"pbad-bench throughput on {machine()}, {stamp()}; {seconds:g} s per case, random actions, float64, "
          f"backends {', '.join(backends)}" + (f"; pbad_gym envs with {settings}" if settings else ""))
    rows = []
    have_mj = not args.no_mujoco and mujoco_available()
    ref = {}
    pairs = [p for p in PAIRS if args.envs is None or p[0] in args.envs]
    for name, pid, mid in pairs:
        for backend in backends:
            for b in batches:
                rate, dt, it, it_max = time_pbad(pid, b, seconds, backend=backend, settings=settings)
                rows.append((name, f"pbad {backend}", b, rate, rate * dt, dt, it, it_max))
                print(f"  {name:8s} pbad {backend:5s} num_envs {b:5d}: {rate:10.0f} env-steps/s  "
                      f"{rate * dt:9.1f} sim-s/s  LM iterations {it:.2f} (max {it_max})", flush=True)
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
            if (mid, "rollout") not in ref:  # mujoco.rollout at the largest batch (up to 256), same threads
                b = min(max(batches), 256)
                rate = ref[(mid, "rollout")] = time_rollout_for(mid, b, seconds, threads)
                dt = [x for x in rows if x[0] == mid][0][5]
                rows.append((mid, f"mujoco.rollout {threads} thr", b, rate, rate * dt, dt, 0.0, 0))
                print(f"  {mid:8s} mujoco.rollout {threads} thr num_envs {b:5d}: {rate:10.0f} env-steps/s", flush=True)
            ref[(name, "rollout")] = ref[(mid, "rollout")]
    header = ["env", "engine", "num_envs", "env_steps_per_s", "sim_s_per_wall_s", "dt_s", "mean_lm_iterations",
              "max_lm_iterations"]
    write_csv(out / "throughput.csv", rows, header)
    print_table(rows, ["env", "engine", "num_envs", "env-steps/s", "sim-s/wall-s", "dt [s]", "LM it.", "max it."],
                "Throughput")

    ratio_rows = []
    for name, _, mid in pairs:
        for r in rows:
            if r[0] == name:
                line = [name, r[1], r[2], r[3]]
                if have_mj:
                    line += [r[3] / ref[(name, 1)], r[3] / ref[(name, 16)],
                             r[4] / (ref[(name, 1)] * [x for x in rows if x[0] == mid][0][5]),
                             r[3] / ref[(name, "rollout")]]
                ratio_rows.append(tuple(line))
    rh = ["env", "engine", "num_envs", "env-steps/s"]
    if have_mj:
        rh += ["/ MuJoCo 1 env", "/ MuJoCo sync 16", "sim-s/s / MuJoCo 1 env", f"/ mujoco.rollout {threads} thr"]
    write_csv(out / "ratios.csv", ratio_rows, rh)
    print_table(ratio_rows, rh, "PBAD vs Gymnasium MuJoCo (Swimmer-v5 for the Swimmer, Ant-v5 for the Spider)"
                if have_mj else "PBAD (mujoco extra not installed: no MuJoCo reference)")

    def rate_of(name, b):
        return max((r[3] for r in rows if r[0] == name and r[2] == b), default=None)

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
        for backend in backends:
            r = [x for x in rows if x[0] == name and x[1] == f"pbad {backend}"]
            ax.plot([x[2] for x in r], [x[3] for x in r], "o-", label=f"pbad_gym {name}, {backend} (native vector env)")
        if have_mj:
            ax.axhline(ref[(name, 1)], color="C1", ls="--", label=f"{mid} (MuJoCo), 1 env")
            ax.axhline(ref[(name, 16)], color="C2", ls=":", label=f"{mid} (MuJoCo), sync 16 envs")
            ax.axhline(ref[(name, "rollout")], color="C4", ls="--",
                       label=f"{mid}, mujoco.rollout {threads} threads")
        if name == "Swimmer":
            ax.axhline(10 * SEED_PAPER_STEPS_PER_S, color="C3", ls="-.", label="10 x PBAD paper (1,700/s)")
        ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="env-steps/s", title=f"{name}, random actions")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)
    print(f"wrote {out}/throughput.png and CSVs")
    return 0


# --- the RL users' workloads (issue 11) ------------------------------------------------------------------------
# Spider-v2 (0.01 s physics, 5 substeps per env step, as Ant-v5's MuJoCo timestep and frame_skip) and Spider-v1
# (one 0.05 s step per env step), each beside Ant-v5
# Spider-v0 is the Spider issue 11's table measured (Δt 0.02 s, one physics step per env step); Spider-v2 is the
# Ant-like one (five 0.01 s physics steps per env step, as Ant-v5)
WORKLOAD_ENVS = {"Swimmer": ("pbad_gym/Swimmer-v1", "Swimmer-v5"), "Spider-v5": ("pbad_gym/Spider-v5", "Ant-v5"),
                 "Spider-v2": ("pbad_gym/Spider-v2", "Ant-v5"),
                 "Spider-v1": ("pbad_gym/Spider-v1", "Ant-v5"), "Spider-v0": ("pbad_gym/Spider-v0", "Ant-v5")}


def _steps_time(env, n_steps, seed=0):
    """Wall seconds of reset + ``n_steps`` batched steps under uniformly random actions."""
    rng = np.random.default_rng(seed)
    shape = env.action_space.shape
    t0 = time.perf_counter()
    env.reset(seed=seed)
    for _ in range(n_steps):
        env.step(rng.uniform(-1, 1, shape).astype(np.float32))
    return time.perf_counter() - t0


def _mujoco_vec(env_id, n):
    import gymnasium

    return gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="sync")


def time_rollout(env_id, n_traj, n_env_steps, threads, seed=0):
    """env-steps/s of ``mujoco.rollout`` on the env's model: n_traj open-loop random-control trajectories of
    n_env_steps env steps (frame_skip physics steps each) on ``threads`` MjData."""
    import gymnasium
    import mujoco
    from mujoco import rollout

    env = gymnasium.make(env_id)
    env.reset(seed=seed)
    model, skip = env.unwrapped.model, env.unwrapped.frame_skip
    data = [mujoco.MjData(model) for _ in range(threads)]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, env.unwrapped.data, state0, spec)
    nstep = n_env_steps * skip
    rng = np.random.default_rng(seed)
    lo, hi = model.actuator_ctrlrange.T
    ctrl = rng.uniform(lo, hi, (n_traj, n_env_steps, model.nu)).repeat(skip, axis=1)
    init = np.tile(state0, (n_traj, 1))
    rollout.rollout(model, data, init[:2], ctrl[:2, :skip], nstep=skip)  # warm-up (thread pool, allocations)
    t0 = time.perf_counter()
    rollout.rollout(model, data, init, ctrl, nstep=nstep)
    el = time.perf_counter() - t0
    env.close()
    return n_traj * n_env_steps / el


def kernel_load_times(compile_too=False):
    """(first-compile seconds or None, cached-load seconds), each a pair (serial entry: 1 trajectory, parallel
    entry: 16): the first step of a fresh process, with an empty numba cache directory (compile) and then with
    the package's own cache (load)."""
    code = ("import time, numpy as np\n"
            "from pbad_gym.model import swimmer\n"
            "from pbad_gym.energies import make_force_model\n"
            "from pbad_gym.kernels.numba import pbad_step_numba\n"
            "b = swimmer(); f = make_force_model(b, gravity=(0, 0, 0), drag=(0.1, 10.0))\n"
            "q = np.tile(b.q0(), (B, 1)); t = time.perf_counter()\n"
            "pbad_step_numba(b, q, q, np.zeros((B, b.nv)), 0.05, f, max_iter=50, tol=1e-7)\n"
            "print(time.perf_counter() - t)\n")

    def first_step(env=None):
        times = []
        for B in (1, 16):  # the serial and the parallel entry point
            out = subprocess.run([sys.executable, "-c", f"B = {B}\n" + code], capture_output=True, text=True,
                                 env=env, check=True)
            times.append(float(out.stdout.strip().splitlines()[-1]))
        return tuple(times)

    compile_s = None
    if compile_too:
        with tempfile.TemporaryDirectory() as cache:
            compile_s = first_step(dict(os.environ, NUMBA_CACHE_DIR=cache))
    first_step()  # make sure the package's cache holds both entries
    return compile_s, first_step()


def run_workloads(args, out, threads):
    """Issue 11's table: each pbad_gym workload per backend beside its MuJoCo peer, from one run."""
    quick = args.quick
    backends = _backends(args)
    have_mj = not args.no_mujoco and mujoco_available()
    cma_steps, ppo_steps, rate_seconds = (100, 125, 0.5) if quick else (1000, 625, args.seconds)
    print(f"pbad-bench throughput --workloads on {machine()}, {stamp()}; backends {', '.join(backends)}; "
          f"MuJoCo peers: {'yes' if have_mj else 'not installed'}")
    rows = []  # (workload, engine, value, unit, goal_ratio or None, peer value or None)

    def add(workload, engine, value, unit):
        rows.append([workload, engine, value, unit])
        print(f"  {workload:34s} {engine:22s} {value:12.4g} {unit}", flush=True)

    name_cma = f"CMA-ES iteration 20 x {cma_steps} (s)"
    for backend in backends:
        env = _make_pbad(WORKLOAD_ENVS["Swimmer"][0], 20, backend)
        _steps_time(env, 6)
        add(name_cma, f"Swimmer-v1 {backend}", _steps_time(env, cma_steps), "s")
        env.close()
    if have_mj:
        env = _mujoco_vec("Swimmer-v5", 20)
        add(name_cma, "Swimmer-v5 sync", _steps_time(env, cma_steps), "s")
        env.close()
    for key, (pid, mid) in WORKLOAD_ENVS.items():
        name_ppo = f"PPO 16 envs, {16 * ppo_steps} steps {key} (s)"
        for backend in backends:
            env = _make_pbad(pid, 16, backend)
            _steps_time(env, 6)
            add(name_ppo, f"{pid.split('/')[1]} {backend}", _steps_time(env, ppo_steps), "s")
            env.close()
        if have_mj:
            env = _mujoco_vec(mid, 16)
            add(name_ppo, f"{mid} sync", _steps_time(env, ppo_steps), "s")
            env.close()
        for b in (256, 1):
            for backend in backends:
                rate = time_pbad(pid, b, rate_seconds, backend=backend)[0]
                add(f"env-steps/s {key}, {b} env{'s' if b > 1 else ''}", f"{pid.split('/')[1]} {backend}", rate, "1/s")
        if have_mj:
            add(f"env-steps/s {key}, 1 env", f"{mid} 1 env", time_mujoco(mid, 1, rate_seconds)[0], "1/s")
        if have_mj and key in ("Swimmer", "Spider-v5"):  # per simulated second: both envs step 0.05 s
            n_traj = 64 if quick else 256
            add(f"env-steps/s {key}, {n_traj} envs", f"{mid} rollout {threads} thr",
                time_rollout(mid, n_traj, 100 if quick else 1000, threads), "1/s")
    if "numba" in backends and args.compile_time:
        compile_s, load_s = kernel_load_times(compile_too=True)
        for k, entry in enumerate(("serial (1 env)", "parallel (16)")):
            add("numba first compile (s)", f"{entry}, empty cache", compile_s[k], "s")
    else:
        load_s = kernel_load_times()[1] if "numba" in backends else ()
    for k, entry in enumerate(("serial (1 env)", "parallel (16)")[:len(load_s)]):
        add("numba first step, cached (s)", f"{entry}, new process", load_s[k], "s")
    write_csv(out / "workloads.csv", rows, ["workload", "engine", "value", "unit"])
    print_table(rows, ["workload", "engine", "value", "unit"], "Workloads (time: lower is better; rate: higher)")
    print(f"wrote {out}/workloads.csv")
    return 0
