"""PBAD paper Figure 2: energy behaviour and cost of PBAD order 2 vs explicit baselines on swinging chains.

(a) total energy over time, 10-link chain released horizontal at rest, dt = 0.0025 s: PBAD order 2 and order 3
    (collocation), explicit Euler, semi-implicit Euler, RK4; (b) the same with 100 links (2.5 s by default); (c) wall
    time to simulate 10 s of the 10-link chain for dt in {0.001, ..., 0.05}, PBAD vs
    semi-implicit Euler, marking unstable runs (semi-implicit Euler's dt is
    halved further until it is stable, to find its largest stable dt); plus PBAD's energy loss at each dt
    and env-steps/s of the 10-link chain at batch 1, 256 and 1024.
"""
from __future__ import annotations

import time

import numpy as np

from .common import PAPER_SOLVER, machine, out_dir, print_table, stamp, write_csv

INTEGRATORS = ("pbad", "pbad3", "euler", "semi_implicit_euler", "rk4")  # pbad3: collocation order 3
DTS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05)


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="short runs (1 s, fewer cases) for a smoke test")
    p.add_argument("--duration", type=float, default=10.0, help="simulated seconds for (a) and (c)")
    p.add_argument("--duration-100", type=float, default=2.5, help="simulated seconds for (b), 100 links")


def _unstable(e, e0, scale):
    return (not np.isfinite(e)) or e - e0 > 0.1 * scale


def energy_trace(body, integrator, dt, seconds, sample=0.05):
    """Total energy every ``sample`` s; stops early (NaN-padded) once the run is unstable.
    Returns (times, energies, unstable, wall seconds spent in step())."""
    from ..simulator import Simulator

    order = 3 if integrator == "pbad3" else 2
    sim = Simulator(body, dt=dt, integrator="pbad" if order == 3 else integrator, order=order, **PAPER_SOLVER)
    scale = body.total_mass * 9.81 * _chain_length(body) / 2
    n, every = int(round(seconds / dt)), max(1, int(round(sample / dt)))
    e0 = float(sum(sim.energy())[0])
    times, energies, unstable, wall = [0.0], [e0], False, 0.0
    with np.errstate(all="ignore"):
        for k in range(1, n + 1):
            t0 = time.perf_counter()
            sim.step()
            wall += time.perf_counter() - t0
            if k % every == 0 or k == n:
                e = float(sum(sim.energy())[0])
                times.append(k * dt)
                energies.append(e)
                if _unstable(e, e0, scale):
                    unstable = True
                    break
    return np.array(times), np.array(energies), unstable, wall


def _chain_length(body):
    """Joint-to-tip length of a chain built by model.chain (placements plus the last link's segment)."""
    return float(sum(np.linalg.norm(lk.placement[1]) for lk in body.links[1:]) + 2 * np.linalg.norm(
        body.links[-1].com))


def throughput(body, dt, batch, steps):
    """PBAD env-steps/s of ``body`` at batch size ``batch`` (random initial velocities)."""
    from ..simulator import Simulator

    sim = Simulator(body, dt=dt, num_envs=batch, **PAPER_SOLVER)
    sim.reset(qd=np.random.default_rng(0).normal(scale=0.5, size=(batch, body.nv)))
    for _ in range(3):
        sim.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        sim.step()
    return steps * batch / (time.perf_counter() - t0)


def _plot_energy(ax, traces, scale):
    """Energy curves on limits taken from the stable runs (padded), so the data fills the panel; an unstable run
    that leaves the panel is drawn up to the edge and its exit marked with an arrow and its final value."""
    stable = [e[np.isfinite(e)] for _, _, e, unstable in traces if not unstable]
    values = np.concatenate(stable) if stable else np.array([-scale, scale])
    lo, hi = float(values.min()), float(values.max())
    pad = 0.1 * max(hi - lo, 1e-3 * scale)
    lo, hi = lo - pad, hi + pad
    exits = 0
    for integ, t, e, unstable in traces:
        line, = ax.plot(t, np.clip(e, lo, hi), label=integ + (" (unstable)" if unstable else ""))
        finite = np.isfinite(e)
        outside = finite & ((e > hi) | (e < lo))
        if outside.any():
            k = int(np.argmax(outside))
            edge = hi if e[k] > hi else lo
            exits += 1  # stagger the labels of runs that leave the panel at the same place
            offset = (14 * exits) * (-1 if edge == hi else 1)
            ax.annotate(f"{integ}: {e[finite][-1]:+.3g} J", (t[k], edge), xytext=(-30, offset),
                        textcoords="offset points", color=line.get_color(), fontsize=7, ha="center",
                        arrowprops=dict(arrowstyle="->", color=line.get_color()))
    ax.set_ylim(lo, hi)
    ax.legend(fontsize=8)


def _sparse_log_ticks(ax, dts):
    """x ticks at the time steps run (labelled plainly), y ticks at decades: no crowded minor labels."""
    from matplotlib.ticker import FixedLocator, LogLocator, NullFormatter

    ax.xaxis.set_major_locator(FixedLocator(sorted(dts)))
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:g}")
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=6))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)


def run(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..model import chain

    out = out_dir(args.out, "fig2")
    dur = 1.0 if args.quick else args.duration
    dur100 = 0.5 if args.quick else args.duration_100
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    print(f"pbad-bench fig2 on {machine()}, {stamp()}")

    for ax, n_links, seconds, tag in ((axes[0], 10, dur, "a"), (axes[1], 100, dur100, "b")):
        body, rows, traces = chain(n_links), [], []
        for integ in INTEGRATORS:
            t, e, unstable, wall = energy_trace(body, integ, 0.0025, seconds)
            rows += [(integ, float(ti), float(ei)) for ti, ei in zip(t, e)]
            traces.append((integ, t, e, unstable))
            print(f"  ({tag}) {n_links:3d} links {integ:20s} E0 {e[0]:+.4f} J  final {e[-1]:+.4g} J  "
                  f"max {np.nanmax(e):+.4g} J  {'UNSTABLE' if unstable else 'stable'}  wall {wall:.2f} s")
        write_csv(out / f"fig2{tag}.csv", rows, ["integrator", "time_s", "energy_J"])
        ax.set(title=f"({tag}) {n_links}-link chain, dt = 0.0025 s", xlabel="time [s]", ylabel="total energy [J]")
        scale = body.total_mass * 9.81 * _chain_length(body) / 2
        _plot_energy(ax, traces, scale)

    body, rows = chain(10), []
    dts = DTS[1::2] if args.quick else DTS
    for dt in dts:
        for integ in ("pbad", "semi_implicit_euler"):
            t, e, unstable, wall = energy_trace(body, integ, dt, dur)
            rows.append((integ, dt, wall, "unstable" if unstable else "stable", e[0] - e[-1]))
    dt = min(dts)
    while not args.quick and all(r[3] == "unstable" for r in rows if r[0] == "semi_implicit_euler") and dt > 1e-4:
        dt /= 2  # semi-implicit Euler unstable everywhere above: halve until it is stable, to find its limit
        t, e, unstable, wall = energy_trace(body, "semi_implicit_euler", dt, dur)
        rows.append(("semi_implicit_euler", dt, wall, "unstable" if unstable else "stable", e[0] - e[-1]))
    write_csv(out / "fig2c.csv", rows, ["integrator", "dt", "wall_s", "stability", "energy_loss_J"])
    print_table(rows, ["integrator", "dt [s]", "wall [s]", "stability", "energy lost [J]"],
                f"(c) wall time for {dur:g} s of the 10-link chain")
    stable_si = [r for r in rows if r[0] == "semi_implicit_euler" and r[3] == "stable"]
    pbad_big = [r for r in rows if r[0] == "pbad" and r[1] == max(dts)][0]
    if stable_si:
        best = max(stable_si, key=lambda r: r[1])
        print(f"semi-implicit Euler largest stable dt: {best[1]} s ({best[2]:.3f} s wall); PBAD at dt = "
              f"{pbad_big[1]} s: {pbad_big[2]:.3f} s wall; ratio {pbad_big[2] / best[2]:.3f} (paper: 0.21)")
    else:
        print("semi-implicit Euler was unstable at every dt tried")
    for integ, style in (("pbad", "o-"), ("semi_implicit_euler", "s--")):
        r = sorted((x for x in rows if x[0] == integ), key=lambda x: x[1])
        axes[2].plot([x[1] for x in r], [x[2] for x in r], style, label=integ)
        bad = [x for x in r if x[3] == "unstable"]
        axes[2].plot([x[1] for x in bad], [x[2] for x in bad], "rx", ms=12)
    axes[2].set(xscale="log", yscale="log", xlabel="dt [s]", ylabel="wall time [s]",
                title=f"(c) {dur:g} s of a 10-link chain (x: unstable)")
    _sparse_log_ticks(axes[2], {r[1] for r in rows})
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fig2.png", dpi=120)

    rows = []
    for batch, steps in ((1, 50 if args.quick else 400), (256, 5 if args.quick else 40),
                         (1024, 2 if args.quick else 10)):
        rows.append((batch, throughput(body, 0.0025, batch, steps)))
    write_csv(out / "throughput.csv", rows, ["batch", "env_steps_per_s"])
    print_table(rows, ["batch", "env-steps/s"], "PBAD order 2, 10-link chain, dt = 0.0025 s, float64, numpy")
    print(f"wrote {out}/fig2.png and CSVs")
    return 0
