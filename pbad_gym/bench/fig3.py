"""PBAD paper Figure 3: LM vs L-BFGS iterations and cost per step, and PBAD at large time steps.

(a, b) iterations per step of LM and L-BFGS for chains of N = 5 … 100 links, order 2 (a) and order 3 (b);
(c) wall time per step vs N; (d) a 10-link chain at dt up to 0.128 s: average time per step and the fraction of
its mechanical energy dissipated over the run, vs dt. Every case starts from the same swinging state (a chain
released horizontally and simulated 0.2 s with LM), steps with tol = --tol rad and reports means over --steps
steps. "lbfgs" starts from the Gauss-Newton diagonal as its inverse Hessian (O(N) per iteration, as the paper),
"lbfgs_hessian" from the inverse Gauss-Newton step Hessian at the warm start (O(N²)); all stop on LM's measure.
"""
from __future__ import annotations

import time

import numpy as np

from .common import PAPER_SOLVER, machine, out_dir, print_table, stamp, write_csv

NS = (5, 10, 20, 40, 70, 100)
DTS = (0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128)


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="fewer chain sizes and steps")
    p.add_argument("--steps", type=int, default=5, help="steps measured per case")
    p.add_argument("--tol", type=float, default=1e-6, help="optimiser tolerance (scaled gradient, rad)")
    p.add_argument("--dt", type=float, default=0.01, help="time step for (a)-(c)")
    p.add_argument("--max-n-lbfgs3", type=int, default=20, help="largest N for L-BFGS on order 3 (slow)")


def swinging_state(n, dt, seconds=0.2):
    """(q, qd) of an n-link chain released horizontally, after ``seconds`` of LM order-2 simulation."""
    from ..model import chain
    from ..simulator import Simulator

    sim = Simulator(chain(n), dt=dt, **PAPER_SOLVER)
    for _ in range(int(round(seconds / dt))):
        sim.step()
    return sim.q.copy(), sim.qd.copy()


def measure(n, order, optimizer, dt, steps, tol, state):
    """Mean LM/L-BFGS iterations, mean wall time per step [s] and whether every step converged."""
    from ..model import chain
    from ..simulator import Simulator

    max_iter = 50 if optimizer == "lm" else (3000 if order == 2 else 300)
    sim = Simulator(chain(n), dt=dt, order=order, optimizer=optimizer, tol=tol, max_iter=max_iter, **PAPER_SOLVER)
    sim.reset(*state)
    its, ok, t0 = [], True, time.perf_counter()
    for _ in range(steps):
        info = sim.step()
        its.append(float(info["iterations"][0]))
        ok = ok and bool(info["converged"].all())
    return float(np.mean(its)), (time.perf_counter() - t0) / steps, ok


def large_dt(dts, seconds):
    """(dt, ms per step, fraction of the initial mechanical energy scale dissipated) for a 10-link chain."""
    from ..model import chain
    from ..simulator import Simulator

    body = chain(10)
    scale = body.total_mass * 9.81 * 0.5  # potential drop of the chain hanging straight down
    rows = []
    for dt in dts:
        sim = Simulator(body, dt=dt, **PAPER_SOLVER)
        e0, n = float(sum(sim.energy())[0]), max(1, int(round(seconds / dt)))
        t0 = time.perf_counter()
        for _ in range(n):
            sim.step()
        wall = (time.perf_counter() - t0) / n
        rows.append((dt, 1e3 * wall, (e0 - float(sum(sim.energy())[0])) / scale))
    return rows


def run(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = out_dir(args.out, "fig3")
    ns = NS[:3] if args.quick else NS
    steps = 2 if args.quick else args.steps
    print(f"pbad-bench fig3 on {machine()}, {stamp()}; dt = {args.dt} s, tol = {args.tol:g} rad, {steps} steps")
    rows = []
    for n in ns:
        state = swinging_state(n, args.dt)
        for order in (2, 3):
            for opt in ("lm", "lbfgs", "lbfgs_hessian"):
                if opt != "lm" and order == 3 and n > args.max_n_lbfgs3:
                    continue
                it, wall, ok = measure(n, order, opt, args.dt, steps, args.tol, state)
                rows.append((n, order, opt, it, 1e3 * wall, ok))
                print(f"  N={n:3d} order {order} {opt:6s} {it:8.1f} iterations/step {1e3 * wall:9.2f} ms/step"
                      f"{'' if ok else '  (did not converge)'}", flush=True)
    header = ["N", "order", "optimizer", "iterations_per_step", "ms_per_step", "converged"]
    write_csv(out / "fig3abc.csv", rows, header)
    print_table(rows, header, "(a-c) iterations and time per step")
    for order in (2, 3):
        lm = {r[0]: r[3] for r in rows if r[1] == order and r[2] == "lm"}
        for opt in ("lbfgs", "lbfgs_hessian"):
            lb = {r[0]: r[3] for r in rows if r[1] == order and r[2] == opt}
            ratios = [lb[n] / lm[n] for n in lb if lm.get(n)]
            if ratios:
                print(f"order {order}: {opt}/LM iteration ratio {min(ratios):.1f} … {max(ratios):.1f} "
                      "(paper: about 10)")
    drows = large_dt(DTS[:4] if args.quick else DTS, 1.0 if args.quick else 5.0)
    write_csv(out / "fig3d.csv", drows, ["dt", "ms_per_step", "energy_dissipated_fraction"])
    print_table(drows, ["dt [s]", "ms/step", "energy dissipated / mgL/2"], "(d) 10-link chain at large dt")

    fig, ax = plt.subplots(1, 4, figsize=(20, 4.5))
    for k, order in enumerate((2, 3)):
        for opt, style in (("lm", "o-"), ("lbfgs", "s--"), ("lbfgs_hessian", "^:")):
            r = [x for x in rows if x[1] == order and x[2] == opt]
            ax[k].plot([x[0] for x in r], [x[3] for x in r], style, label=opt)
            ax[2].plot([x[0] for x in r], [x[4] for x in r], style, label=f"{opt}, order {order}")
        ax[k].set(xlabel="links N", ylabel="iterations / step", yscale="log", title=f"({'ab'[k]}) order {order}")
        ax[k].legend()
    ax[2].set(xlabel="links N", ylabel="ms / step", yscale="log", title="(c) time per step")
    ax[2].legend(fontsize=7)
    ax[3].plot([r[0] for r in drows], [r[1] for r in drows], "o-", label="ms / step")
    ax3 = ax[3].twinx()
    ax3.plot([r[0] for r in drows], [r[2] for r in drows], "rs--", label="energy dissipated")
    ax[3].set(xscale="log", xlabel="dt [s]", ylabel="ms / step", title="(d) 10 links, large dt")
    ax3.set_ylabel("dissipated / (m g L / 2)")
    fig.tight_layout()
    fig.savefig(out / "fig3.png", dpi=120)
    print(f"wrote {out}/fig3.png and CSVs")
    return 0
