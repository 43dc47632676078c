"""reorder: constraint-ordering study of seed 002 (Andrews et al. 2017), Figures 2-3 plus heuristic orders.

For the sliding capsule (2 contacts, 6 rows, 720 row orders) and the three-sphere body (3 contacts, 9 rows,
362,880 orders), every row permutation is solved by PGS in ONE batched call (the problem is shared, each batch
element carries its own order). Reports error vs iteration for the default, best and worst orders, the histogram
of sweeps to reach error < threshold, and the same statistics for the heuristics: random order per sweep (over
many seeds), largest-error first, effective mass ascending/descending, and block PGS per contact.
Error = ∞-norm of the natural-map residual (impulse units, N·s). Best/worst: fewest/most sweeps to reach the
threshold, ties broken by the error after the last sweep.
"""
from __future__ import annotations

import time


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true",
                        help="short run: every 72nd permutation of the three-sphere body, fewer random seeds")
    parser.add_argument("--max-iter", type=int, default=50, help="PGS sweeps per order (default 50)")
    parser.add_argument("--threshold", type=float, default=1e-4, help="error threshold of the histogram")
    parser.add_argument("--random-trials", type=int, default=2000, help="seeds for the random-order statistics")


def sweeps_to(history, threshold, max_iter):
    """First sweep (1-based) whose error is below threshold, per row of history (B, K); max_iter + 1 if never."""
    import numpy as np

    below = history < threshold
    return np.where(below.any(axis=1), below.argmax(axis=1) + 1, max_iter + 1)


def padded_history(res, K):
    """error_history (B, K): a solve that stopped early (every element exactly converged) repeats its last value,
    floored at 1e-17 so that exact zeros stay visible on log axes."""
    import numpy as np

    h = res.error_history
    if h.shape[1] < K:
        last = h[:, -1:] if h.shape[1] else res.error0[:, None]
        h = np.concatenate([h, np.repeat(last, K - h.shape[1], axis=1)], axis=1)
    return np.maximum(h, 1e-17)


def _all_permutations(m, stride):
    import itertools

    import numpy as np

    return np.array(list(itertools.islice(itertools.permutations(range(m)), 0, None, stride)), dtype=np.int64)


def run(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from pbad_gym import lcp
    from pbad_gym.bench.common import machine, out_dir, print_table, stamp, write_csv

    out = out_dir(args.out, "reorder")
    K, thr = args.max_iter, args.threshold
    trials = 200 if args.quick else args.random_trials
    hist_rows, curve_rows, summary = [], [], []
    fig2, ax2 = plt.subplots(1, 2, figsize=(11, 4))
    fig3, ax3 = plt.subplots(1, 2, figsize=(11, 4))
    print(f"reorder benchmark, {stamp()}, {machine()}, max_iter={K}, threshold={thr:g}")
    for col, make in enumerate((lcp.sliding_capsule, lcp.three_sphere_body)):
        P = make()
        m = P.m
        stride = 72 if (args.quick and m == 9) else 1
        perms = _all_permutations(m, stride)
        t0 = time.perf_counter()
        res = lcp.solve(P.A, P.b, friction=P.friction, order=perms, max_iter=K, tol=0.0)
        t_sweep = time.perf_counter() - t0
        h = padded_history(res, K)
        its = sweeps_to(h, thr, K)
        key = its * 1e30 + h[:, -1]  # fewest sweeps, then smallest final error
        best, worst, default = int(np.argmin(key)), int(np.argmax(key)), 0  # perms[0] is the identity
        curves = {"default": h[default], "best": h[best], "worst": h[worst]}
        label = {"default": "Default", "best": f"Best {perms[best].tolist()}",
                 "worst": f"Worst {perms[worst].tolist()}"}
        for name, colr in (("default", "k"), ("best", "tab:blue"), ("worst", "tab:red")):
            ax2[col].semilogy(np.arange(1, K + 1), curves[name], color=colr, label=label[name])
        counts = np.bincount(its, minlength=K + 2)
        pct = 100.0 * counts / len(perms)
        for k in range(1, K + 2):
            if counts[k]:
                hist_rows.append([P.name, k if k <= K else f">{K}", int(counts[k]), float(pct[k])])
        ax3[col].bar(np.arange(1, K + 2), pct[1:], color="0.5")
        for name in ("default", "best", "worst"):
            idx = {"default": default, "best": best, "worst": worst}[name]
            summary.append([P.name, f"perm:{name}", len(perms), int(its[idx]), int(its[idx]), int(its[idx]),
                            float(h[idx, 24 if K >= 25 else -1]), f"{t_sweep:.2f}"])
        summary.append([P.name, "perm:all", len(perms), float(np.mean(its)), int(its.min()), int(its.max()),
                        float(np.median(h[:, 24 if K >= 25 else -1])), f"{t_sweep:.2f}"])
        for k in range(K):
            curve_rows.append([P.name, "default", k + 1, float(curves["default"][k])])
            curve_rows.append([P.name, "best", k + 1, float(curves["best"][k])])
            curve_rows.append([P.name, "worst", k + 1, float(curves["worst"][k])])

        # heuristics: random (batch of seeds in one call), error, mass both ways, block PGS
        t0 = time.perf_counter()
        rnd = lcp.solve(P.A, np.broadcast_to(P.b, (trials, m)), friction=P.friction, order="random", seed=0,
                        max_iter=K, tol=0.0)
        t_rnd = time.perf_counter() - t0
        hr = padded_history(rnd, K)
        its_r = sweeps_to(hr, thr, K)
        summary.append([P.name, "random", trials, float(np.mean(its_r)), int(its_r.min()), int(its_r.max()),
                        float(np.median(hr[:, 24 if K >= 25 else -1])), f"{t_rnd:.2f}"])
        med = hr[int(np.argsort(its_r, kind="stable")[trials // 2])]
        ax2[col].semilogy(np.arange(1, K + 1), med, "--", color="tab:green", label="Random (median run)")
        for k in range(K):
            curve_rows.append([P.name, "random_median", k + 1, float(med[k])])
        styles = {"error": "tab:orange", "mass_asc": "tab:purple", "mass_desc": "tab:brown", "block": "tab:cyan"}
        for order, colr in styles.items():
            t0 = time.perf_counter()
            r = lcp.solve(**P.kwargs(), order=order, max_iter=K, tol=0.0)
            dt = time.perf_counter() - t0
            hh = padded_history(r, K)
            it = int(sweeps_to(hh, thr, K)[0])
            summary.append([P.name, order, 1, it, it, it, float(hh[0, 24 if K >= 25 else -1]),
                            f"{dt:.2f}"])
            ax2[col].semilogy(np.arange(1, K + 1), hh[0], ":", color=colr, label=order)
            ax3[col].axvline(it, color=colr, ls=":", label=f"{order} ({it})")
            for k in range(K):
                curve_rows.append([P.name, order, k + 1, float(hh[0, k])])
        ax3[col].axvline(float(np.mean(its_r)), color="tab:green", ls="--", label=f"random mean ({np.mean(its_r):.1f})")
        ax2[col].set(title=f"{P.name} ({len(perms)} orders, {t_sweep:.1f} s)", xlabel="Iteration",
                     ylabel="LCP error (∞-norm natural map)", xlim=(0, min(K, 30)))
        ax2[col].axhline(thr, color="0.7", lw=0.8)
        ax2[col].legend(fontsize=7)
        ax3[col].set(title=f"{P.name}: iterations to reach error < {thr:g}", xlabel="Iterations",
                     ylabel="% permutations", xlim=(0, min(K + 2, 30)))
        ax3[col].legend(fontsize=7)
        print(f"{P.name}: {len(perms)} orders x {K} sweeps in one batched call: {t_sweep:.2f} s")

    header = ["problem", "order", "runs", f"sweeps_to_{thr:g}_mean", "min", "max", "error_at_25_median", "time_s"]
    write_csv(out / "reorder_summary.csv", summary, header)
    write_csv(out / "reorder_histogram.csv", hist_rows, ["problem", "sweeps", "count", "percent"])
    write_csv(out / "reorder_curves.csv", curve_rows, ["problem", "series", "iteration", "error"])
    fig2.tight_layout()
    fig2.savefig(out / "reorder_fig2_convergence.png", dpi=120)
    fig3.tight_layout()
    fig3.savefig(out / "reorder_fig3_histogram.png", dpi=120)
    plt.close("all")
    print_table(summary, header, title=f"PGS sweeps to error < {thr:g} (seed 002), results in {out}")
    return 0
