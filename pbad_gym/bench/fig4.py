"""PBAD paper Figure 4: GPU acceleration of batched PBAD trajectories, plus large-batch environment throughput.

Workload: N-link hinge chains (``model.chain``) released from random poses (one per trajectory), PBAD order 2 with
LM, dt = 0.01 s, float64; each case times ``--steps`` steps (10) of B trajectories after one warm-up step, on the
CPU (the fastest CPU backend registered: numba when the Simulator has it, else NumPy) and on the GPU
(``device="cuda"``) by both GPU paths: the lock-step NumPy code on CuPy arrays (backend "numpy": many small kernels
per LM iteration for the whole batch) and the fused kernel (backend "cuda": one thread per trajectory, one launch
per step; where numba.cuda sees the device).

(a) GPU-over-CPU speed-up vs number of links N, one curve per number of trajectories B;
(b) the speed-up vs B, one curve per N;
(c) time for 100 trajectories x 10 steps vs N, CPU and GPU (the paper: under 1 s on the GPU for N <= 40);
(d) time vs B for N = 10 (the paper's GPU curve is flat from 100 to 300 trajectories on a 3,584-core GPU);
(e) env-steps/s of the Swimmer and the Spider native vector envs for num_envs 256 ... 65,536 under random actions,
    CPU and GPU, beside MJX's reported ~1M physics steps/s for Ant-class bodies on an A100 (a reported figure,
    not measured here).

Without CuPy and a CUDA device only the CPU side runs; the GPU columns are marked "needs a device" (the fused
path's say why numba.cuda cannot run it where a device is present) and the exit status is still 0 (table, CSV
and PNG are written for what ran). ``--budget`` bounds the whole run: cases left when it is spent are recorded as
skipped.
"""
from __future__ import annotations

import time

import numpy as np

from .common import PAPER_SOLVER, machine, out_dir, print_table, stamp, write_csv

LINKS = (5, 10, 20, 40)
TRAJECTORIES = (10, 30, 100, 300, 1000)
ENV_BATCHES = (256, 1024, 4096, 16384, 65536)
ENVS = ("pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1")
MJX_ANT_A100 = 1.0e6  # MJX's reported physics steps/s for Ant-class bodies on an A100 (not measured here)
PAPER = "PBAD paper (Titan X vs 4-core i7): speed-up 3-6x, rising with N and B; 100 x 10 steps < 1 s for N <= 40"
NEEDS_DEVICE = "needs a device"
GPU_BACKENDS = ("numpy", "cuda")  # the lock-step CuPy path, the fused kernel


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="tiny grid (N 3, 5; B 4, 16; 2 steps; num_envs 16, 64) "
                   "for a smoke test")
    p.add_argument("--links", type=int, nargs="+", default=None, help=f"chain lengths N (default {LINKS})")
    p.add_argument("--trajectories", type=int, nargs="+", default=None,
                   help=f"batch sizes B (default {TRAJECTORIES}; 100 and N = 10 feed panels (c), (d))")
    p.add_argument("--steps", type=int, default=None, help="timed steps per case (default 10)")
    p.add_argument("--env-batches", type=int, nargs="+", default=None,
                   help=f"num_envs for panel (e) (default {ENV_BATCHES}); 0 skips (e)")
    p.add_argument("--envs", nargs="+", default=None, help=f"env ids for panel (e) (default {ENVS})")
    p.add_argument("--cpu-max-envs", type=int, default=4096,
                   help="largest num_envs timed on the CPU in (e) (default 4096: larger batches take minutes)")
    p.add_argument("--env-seconds", type=float, default=2.0, help="wall seconds per case in (e) (at least 2 steps)")
    p.add_argument("--budget", type=float, default=None, help="wall-clock budget [s] of the whole run (panels a-d "
                   "get half of it); cases left when it is spent are recorded as skipped")
    p.add_argument("--no-gpu", action="store_true", help="CPU side only, even where a GPU is present")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--cpu-backend", default=None, help="Simulator backend of the CPU side (default: numba "
                   "when registered, else numpy)")


def _cpu_backend():
    """The fastest CPU step implementation the Simulator registers."""
    from ..simulator import BACKENDS

    return "numba" if "numba" in BACKENDS else "numpy"


def sides(cpu_backend, have_gpu):
    """[(device, backend, None or why it cannot run)]: the CPU side and both GPU paths."""
    out = [("cpu", cpu_backend, None)]
    for backend in GPU_BACKENDS:
        why = None if have_gpu else NEEDS_DEVICE
        if why is None and backend == "cuda":
            from ..kernels.cuda import unavailable_reason

            why = unavailable_reason("cuda")
        out.append(("cuda", backend, why))
    return out


def _sync(device):
    if device == "cuda":
        import cupy

        cupy.cuda.Device().synchronize()


class Budget:
    """Wall-clock budget of the whole run (None: unlimited)."""

    def __init__(self, seconds):
        self.end = None if seconds is None else time.perf_counter() + float(seconds)

    def spent(self):
        return self.end is not None and time.perf_counter() >= self.end


def time_chain(n_links, batch, steps, device, backend, dtype, seed=0):
    """(seconds for ``steps`` steps of ``batch`` N-link chains after one warm-up step, mean LM iterations)."""
    from ..model import chain
    from ..simulator import Simulator

    body = chain(n_links)
    sim = Simulator(body, dt=0.01, num_envs=batch, device=device, backend=backend, dtype=dtype, **PAPER_SOLVER)
    rng = np.random.default_rng(seed)
    sim.reset(q=rng.uniform(-0.5, 0.5, (batch, body.nq)), qd=rng.uniform(-0.5, 0.5, (batch, body.nv)))
    sim.step()  # warm-up: compiles kernels (numba, CuPy) and fills caches
    _sync(device)
    its = []
    t0 = time.perf_counter()
    for _ in range(steps):
        its.append(sim.step()["iterations"])
    _sync(device)
    wall = time.perf_counter() - t0
    from ..arrays import to_numpy

    return wall, float(np.mean([to_numpy(i).mean() for i in its]))


def time_env(env_id, batch, seconds, device, seed=0, backend=None):
    """(env-steps/s, mean LM iterations per step) of a native vector env under uniformly random actions."""
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the ids)

    env = gymnasium.make_vec(env_id, num_envs=batch, vectorization_mode="vector_entry_point", device=device,
                             backend=backend)
    rng = np.random.default_rng(seed)
    shape = env.action_space.shape
    env.reset(seed=seed)
    env.step(rng.uniform(-1, 1, shape).astype(np.float32))  # warm-up
    _sync(device)
    n, its, t0 = 0, [], time.perf_counter()
    while True:
        _, _, _, _, info = env.step(rng.uniform(-1, 1, shape).astype(np.float32))
        its.append(float(np.mean(info["iterations"])))
        n += 1
        _sync(device)
        elapsed = time.perf_counter() - t0
        if n >= 2 and elapsed >= seconds:
            break
    env.close()
    return n * batch / elapsed, float(np.mean(its))


def _attempt(fn, *args):
    """fn(*args), or the exception's one-line text (a GPU case that fails is recorded, not fatal)."""
    try:
        return fn(*args), None
    except Exception as err:  # noqa: BLE001 - recorded in the table and CSV
        return None, f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"


def chain_grid(links, trajs, steps, sides, dtype, budget, log=print, save=None):
    """Rows (N, B, steps, device, backend, seconds or None, LM iterations or None, status) for every case; each
    (N, B) runs on every side of ``sides`` ((device, backend, None or why not) as :func:`sides` gives them) before
    the next, so a spent budget leaves whole groups. ``save(rows)`` is called after each (N, B), so a run stopped
    from outside keeps what it measured."""
    rows = []
    for n in links:
        for b in trajs:
            if save is not None and rows:
                save(rows)
            for dev, backend, why in sides:
                if why is not None:
                    rows.append((n, b, steps, dev, backend, None, None, why))
                    continue
                if budget.spent():
                    rows.append((n, b, steps, dev, backend, None, None, "skipped: budget spent"))
                    continue
                res, err = _attempt(time_chain, n, b, steps, dev, backend, dtype)
                if err:
                    rows.append((n, b, steps, dev, backend, None, None, err))
                    log(f"  N {n:3d} B {b:5d} {dev:4s} ({backend}): failed ({err})")
                else:
                    rows.append((n, b, steps, dev, backend, res[0], res[1], "ok"))
                    log(f"  N {n:3d} B {b:5d} {dev:4s} ({backend}): {res[0]:8.3f} s for {steps} steps, "
                        f"LM iterations {res[1]:.2f}", flush=True)
    return rows


def env_grid(envs, batches, seconds, sides, cpu_max, budget, log=print, save=None):
    """Rows (env, num_envs, device, backend, env-steps/s or None, LM iterations or None, status); ``sides`` and
    ``save(rows)`` as in :func:`chain_grid`."""
    rows = []
    for env_id in envs:
        for b in batches:
            if save is not None and rows:
                save(rows)
            for dev, backend, why in sides:
                if why is not None:
                    rows.append((env_id, b, dev, backend, None, None, why))
                elif dev == "cpu" and b > cpu_max:
                    rows.append((env_id, b, dev, backend, None, None,
                                 f"skipped: num_envs > --cpu-max-envs {cpu_max}"))
                elif budget.spent():
                    rows.append((env_id, b, dev, backend, None, None, "skipped: budget spent"))
                else:
                    res, err = _attempt(time_env, env_id, b, seconds, dev, 0, backend)
                    rows.append((env_id, b, dev, backend, None, None, err) if err else
                                (env_id, b, dev, backend, res[0], res[1], "ok"))
                    log(f"  {env_id} num_envs {b:6d} {dev:4s} ({backend}): " + (f"failed ({err})" if err else
                        f"{res[0]:12.0f} env-steps/s, LM iterations {res[1]:.2f}"), flush=True)
    return rows


def speedups(rows, gpu_backend="numpy"):
    """{(N, B): cpu seconds / gpu seconds} for the cases measured on the CPU and by the GPU path ``gpu_backend``
    ("numpy": lock-step CuPy, "cuda": fused kernel)."""
    t = {(r[0], r[1], r[3], r[4] if r[3] == "cuda" else "cpu"): r[5] for r in rows if r[5] is not None}
    return {(n, b): t[(n, b, "cpu", "cpu")] / t[(n, b, d, be)] for (n, b, d, be) in t
            if d == "cuda" and be == gpu_backend and (n, b, "cpu", "cpu") in t}


def _side_label(dev, backend):
    return "cpu" if dev == "cpu" else ("GPU fused" if backend == "cuda" else "GPU lock-step")


def _seconds(rows):
    """{(N, B, side label): seconds} of the measured chain rows."""
    return {(r[0], r[1], _side_label(r[3], r[4])): r[5] for r in rows if r[5] is not None}


def _speedup_curves(ax, sps, curves, xs_all, key, name):
    """One GPU/CPU speed-up line per value c of ``curves`` (colour) and GPU path (style) over ``xs_all``, from
    ``sps[backend][key(c, x)]``, plus the paper's 3-6x band; ``name`` labels the curves (B or N)."""
    for k, c in enumerate(curves):
        for be, style in (("cuda", "^-"), ("numpy", "s--")):
            sp = sps[be]
            xs = [x for x in xs_all if key(c, x) in sp]
            if xs:
                ax.plot(xs, [sp[key(c, x)] for x in xs], style, color=f"C{k}",
                        label=f"{name} = {c} {_side_label('cuda', be)[4:]}")
    ax.axhspan(3, 6, color="0.9", label="paper: 3-6x")


def plot(path, chain_rows, env_rows, links, trajs, have_gpu, steps=10):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sps = {be: speedups(chain_rows, be) for be in GPU_BACKENDS}
    sec = _seconds(chain_rows)
    labels = ("cpu", "GPU lock-step", "GPU fused")
    styles = {"cpu": "o-", "GPU lock-step": "s--", "GPU fused": "^-"}
    fig, axes = plt.subplots(1, 5, figsize=(27, 4.8))
    note = "" if have_gpu else "\n(GPU side needs a device: not run here)"
    ax = axes[0]
    _speedup_curves(ax, sps, trajs, links, lambda b, n: (n, b), "B")
    ax.set(xlabel="links N", ylabel="GPU / CPU speed-up", title="(a) speed-up vs links" + note)
    ax = axes[1]
    _speedup_curves(ax, sps, links, trajs, lambda n, b: (n, b), "N")
    ax.set(xscale="log", xlabel="trajectories B", ylabel="GPU / CPU speed-up",
           title="(b) speed-up vs trajectories" + note)
    ax = axes[2]
    b100 = 100 if 100 in trajs else trajs[len(trajs) // 2]
    for side in labels:
        xs = [n for n in links if (n, b100, side) in sec]
        if xs:
            ax.plot(xs, [sec[(n, b100, side)] for n in xs], styles[side], label=side)
    ax.axhline(1.0, color="C3", ls=":", label="paper GPU: < 1 s for N <= 40")
    ax.set(yscale="log", xlabel="links N", ylabel="seconds", title=f"(c) {b100} trajectories x {steps} steps")
    ax = axes[3]
    n10 = 10 if 10 in links else links[0]
    for side in labels:
        xs = [b for b in trajs if (n10, b, side) in sec]
        if xs:
            ax.plot(xs, [sec[(n10, b, side)] for b in xs], styles[side], label=side)
    ax.set(xscale="log", yscale="log", xlabel="trajectories B", ylabel="seconds", title=f"(d) N = {n10}, {steps} steps")
    ax = axes[4]
    for k, env_id in enumerate(sorted({r[0] for r in env_rows})):
        for side in labels:
            pts = [(r[1], r[4]) for r in env_rows
                   if r[0] == env_id and _side_label(r[2], r[3]) == side and r[4] is not None]
            if pts:
                ax.plot(*zip(*pts), styles[side], color=f"C{k}", label=f"{env_id.split('/')[-1]} {side}")
    ax.axhline(MJX_ANT_A100, color="C3", ls=":", label="MJX Ant, A100 (reported ~1M/s)")
    ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="env-steps/s", title="(e) env throughput" + note)
    if not any(sps.values()):
        for ax in axes[:2]:
            ax.text(0.5, 0.5, "no GPU measurement:\nneeds a device", transform=ax.transAxes, ha="center")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(title, chain_rows, env_rows, links, trajs, steps):
    """The results as Markdown tables (for BENCHMARKS.md)."""
    sec = _seconds(chain_rows)
    sps = {be: speedups(chain_rows, be) for be in GPU_BACKENDS}

    def cell(v, fmt="{:.3g} s"):
        return "–" if v is None else fmt.format(v)

    def speedup(n, b, be):
        return f" ({sps[be][(n, b)]:.2g}x)" if (n, b) in sps[be] else ""

    lines = [f"{title}", "", f"Seconds for {steps} steps of B N-link chains, CPU / GPU lock-step (speed-up) / "
             "GPU fused (speed-up):", "",
             "| N \\ B | " + " | ".join(str(b) for b in trajs) + " |", "|---" * (len(trajs) + 1) + "|"]
    for n in links:
        lines.append(f"| {n} | " + " | ".join(
            f"{cell(sec.get((n, b, 'cpu')))} / {cell(sec.get((n, b, 'GPU lock-step')))}{speedup(n, b, 'numpy')} / "
            f"{cell(sec.get((n, b, 'GPU fused')))}{speedup(n, b, 'cuda')}" for b in trajs) + " |")
    if env_rows:
        batches = sorted({r[1] for r in env_rows})
        rate = {(r[0], r[1], _side_label(r[2], r[3])): r[4] for r in env_rows}
        lines += ["", "Env-steps/s under random actions, CPU / GPU lock-step / GPU fused:", "",
                  "| env | " + " | ".join(str(b) for b in batches) + " |", "|---" * (len(batches) + 1) + "|"]
        for env_id in sorted({r[0] for r in env_rows}):
            lines.append(f"| {env_id} | " + " | ".join(" / ".join(
                cell(rate.get((env_id, b, side)), "{:,.0f}") for side in ("cpu", "GPU lock-step", "GPU fused"))
                for b in batches) + " |")
    return "\n".join(lines) + "\n"


def run(args):
    from ..arrays import gpu_available

    out = out_dir(args.out, "fig4")
    quick = args.quick
    links = tuple(args.links or ((3, 5) if quick else LINKS))
    trajs = tuple(args.trajectories or ((4, 16) if quick else TRAJECTORIES))
    steps = args.steps or (2 if quick else 10)
    env_batches = tuple(b for b in (args.env_batches or ((16, 64) if quick else ENV_BATCHES)) if b > 0)
    envs = tuple(args.envs or ENVS)
    env_seconds = 0.2 if quick else args.env_seconds
    have_gpu = not args.no_gpu and gpu_available()
    cpu_backend = args.cpu_backend or _cpu_backend()
    grid_sides = sides(cpu_backend, have_gpu)
    fused = grid_sides[-1][2] is None
    budget = Budget(args.budget)
    gpu_name = ""
    if have_gpu:
        import cupy

        gpu_name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        gpu_name = gpu_name.decode() if isinstance(gpu_name, bytes) else str(gpu_name)
    threads = ""
    if cpu_backend == "numba":
        import numba

        threads = f" ({numba.get_num_threads()} threads)"
    print(f"pbad-bench fig4 on {machine()}, {stamp()}; {args.dtype}; CPU backend {cpu_backend}{threads}, GPU "
          + (f"{gpu_name}: lock-step CuPy (backend numpy) and fused kernel (backend cuda): "
             + ("runs" if fused else f"not run ({grid_sides[-1][2]})") if have_gpu else "none"))
    if not have_gpu:
        print(f"NOTE: no GPU here (CuPy and a CUDA device are needed{'; --no-gpu given' if args.no_gpu else ''}): "
              "only the CPU side runs; the GPU columns and the speed-ups need a device "
              "(scripts/device_check.sh runs them).")

    header = ["n_links", "trajectories", "steps", "device", "backend", "seconds", "mean_lm_iterations", "status"]
    env_header = ["env", "num_envs", "device", "backend", "env_steps_per_s", "mean_lm_iterations", "status"]
    # the chain grid gets half the budget, so that a long grid cannot crowd out panel (e)
    chain_budget = Budget(None if args.budget is None else 0.5 * args.budget)
    chain_rows = chain_grid(links, trajs, steps, grid_sides, np.dtype(args.dtype), chain_budget,
                            save=lambda rows: write_csv(out / "fig4_chain.csv", rows, header))
    write_csv(out / "fig4_chain.csv", chain_rows, header)
    sps = {be: speedups(chain_rows, be) for be in GPU_BACKENDS}
    sec = _seconds(chain_rows)
    gone = NEEDS_DEVICE if not have_gpu else "-"

    def get(table, key):
        return table[key] if key in table else gone

    table = [(n, b, sec.get((n, b, "cpu"), "-"), get(sec, (n, b, "GPU lock-step")), get(sps["numpy"], (n, b)),
              get(sec, (n, b, "GPU fused")), get(sps["cuda"], (n, b))) for n in links for b in trajs]
    print_table(table, ["N", "B", f"CPU s ({steps} steps)", "GPU lock-step s", "speed-up", "GPU fused s", "speed-up"],
                f"(a-d) N-link chains, {steps} steps of B trajectories; {PAPER}")

    env_rows = env_grid(envs, env_batches, env_seconds, grid_sides, args.cpu_max_envs, budget,
                        save=lambda rows: write_csv(out / "fig4_envs.csv", rows, env_header)) if env_batches else []
    write_csv(out / "fig4_envs.csv", env_rows, env_header)
    if env_rows:
        print_table([(r[0], r[1], r[2], r[3], r[4] if r[4] is not None else r[6], r[5] if r[5] is not None else "-")
                     for r in env_rows], ["env", "num_envs", "device", "backend", "env-steps/s", "LM it."],
                    f"(e) env throughput, random actions; MJX reports ~{MJX_ANT_A100:.0e} physics steps/s for "
                    "Ant-class bodies on an A100 (reported, not measured here)")
    plot(out / "fig4.png", chain_rows, env_rows, links, trajs, have_gpu, steps)
    title = (f"`pbad-bench fig4` on {machine()}, GPU {gpu_name or 'none'}, {stamp()}, {args.dtype}, CPU backend "
             f"{cpu_backend}{threads}, GPU backends: lock-step CuPy"
             + (", fused kernel" if fused else f" (fused kernel not run: {grid_sides[-1][2]})"))
    (out / "fig4.md").write_text(markdown(title, chain_rows, env_rows, links, trajs, steps))
    if not have_gpu:
        print("GPU columns: needs a device (not run here).")
    print(f"wrote {out}/fig4.png, fig4.md, fig4_chain.csv, fig4_envs.csv")
    return 0
