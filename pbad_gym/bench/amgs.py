"""amgs: PGS vs PSOR vs AMGS (seed 004), iterations and wall time to a given error, dense vs matrix-free.

Random multi-body contact problems (spheres, contacts to the ground and between bodies) of growing size,
frictionless (m = contacts) and with friction (boxed rows, m = 3·contacts), at mass ratio 1 and an
ill-conditioned mass ratio. Each is solved from λ = 0 by PGS, by PSOR at each ω and by AMGS at the matched
Ω = θD with θ = 2/ω - 1, with an explicit A and matrix-free from (J, M⁻¹Jᵀ), to a natural-map residual
‖·‖₂/‖b‖₂ ≤ tol. The table and CSV give sweeps, wall time, and AMGS/PSOR ratios at the same ω.
"""
from __future__ import annotations

import time


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true", help="short run: two sizes, mass ratio 1 only")
    parser.add_argument("--tol", type=float, default=1e-6, help="target relative residual (default 1e-6)")
    parser.add_argument("--max-iter", type=int, default=500, help="sweep limit (default 500)")
    parser.add_argument("--omegas", type=float, nargs="+", default=[1.2, 1.4],
                        help="PSOR ω values (AMGS matched; default 1.2 1.4)")
    parser.add_argument("--mass-ratio", type=float, default=1e3, help="the ill-conditioned mass ratio")
    parser.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from pbad_gym import lcp
    from pbad_gym.bench.common import machine, out_dir, print_table, stamp, write_csv

    out = out_dir(args.out, "amgs")
    contacts = {"friction": [10, 25] if args.quick else [10, 25, 50, 100],
                "frictionless": [30, 75] if args.quick else [30, 75, 150, 300]}
    ratios = [1.0] if args.quick else [1.0, args.mass_ratio]
    methods = [("pgs", 1.0)] + [(meth, w) for w in args.omegas for meth in ("psor", "amgs")]
    print(f"amgs benchmark, {stamp()}, {machine()}, tol={args.tol:g} (rel. 2-norm), max_iter={args.max_iter}")
    rows = []
    for variant, sizes in contacts.items():
        for ratio in ratios:
            for c in sizes:
                P = lcp.random_contact_problem(np.random.default_rng(args.seed + c), n_contacts=c,
                                               mu=0.5 if variant == "friction" else None, mass_ratio=ratio)
                n = P.J.shape[-1]
                for meth, w in methods:
                    for form in ("dense", "matrix_free"):
                        kw = P.kwargs() if form == "dense" else P.mf_kwargs()
                        t0 = time.perf_counter()
                        r = lcp.solve(**kw, method=meth, omega=w, norm="rel2", tol=args.tol, max_iter=args.max_iter)
                        dt = time.perf_counter() - t0
                        its = int(r.iterations[0])
                        rows.append([variant, ratio, c, P.m, n, meth, w, form, its, bool(r.converged[0]),
                                     float(r.residual_rel2[0]), dt, dt / max(its, 1) * 1e3])
                print(f"  {variant} ratio={ratio:g} contacts={c} rows={P.m}: "
                      + ", ".join(f"{x[5]}({x[6]:g})={x[8]}" for x in rows[-2 * len(methods):] if x[7] == "dense"),
                      flush=True)
    header = ["variant", "mass_ratio", "contacts", "rows", "dofs", "method", "omega", "form", "sweeps",
              "converged", "rel_residual", "time_s", "ms_per_sweep"]
    write_csv(out / "amgs_runs.csv", rows, header)
    print_table(rows, header, title="all runs")

    # AMGS / PSOR at matched ω, per problem and form
    index = {(r[0], r[1], r[2], r[5], r[6], r[7]): r for r in rows}
    ratio_rows = []
    for (variant, ratio, c, meth, w, form), r in index.items():
        if meth != "amgs":
            continue
        s = index[(variant, ratio, c, "psor", w, form)]
        p = index[(variant, ratio, c, "pgs", 1.0, form)]
        ratio_rows.append([variant, ratio, c, r[3], w, form, p[8], s[8], r[8], r[8] / max(s[8], 1),
                           r[11] / s[11], s[8] / max(p[8], 1)])
    rheader = ["variant", "mass_ratio", "contacts", "rows", "omega", "form", "pgs_sweeps", "psor_sweeps",
               "amgs_sweeps", "amgs/psor_sweeps", "amgs/psor_time", "psor/pgs_sweeps"]
    write_csv(out / "amgs_ratios.csv", ratio_rows, rheader)
    print_table(ratio_rows, rheader, title=f"AMGS vs PSOR at matched ω (θ = 2/ω - 1), results in {out}")

    # matrix-free / dense time per method
    mf_rows = []
    for (variant, ratio, c, meth, w, form), r in index.items():
        if form == "dense":
            f = index[(variant, ratio, c, meth, w, "matrix_free")]
            mf_rows.append([variant, ratio, c, r[3], r[4], meth, w, r[11], f[11], f[11] / r[11], r[8] == f[8]])
    mheader = ["variant", "mass_ratio", "contacts", "rows", "dofs", "method", "omega", "dense_s", "mf_s", "mf/dense",
               "same_sweeps"]
    write_csv(out / "amgs_matrix_free.csv", mf_rows, mheader)

    fig, axes = plt.subplots(len(ratios), 2, figsize=(11, 4 * len(ratios)), squeeze=False)
    for i, ratio in enumerate(ratios):
        for j, variant in enumerate(contacts):
            ax = axes[i, j]
            for meth, w in methods:
                for form, ls in (("dense", "-"), ("matrix_free", ":")):
                    pts = [(r[3], r[8]) for r in rows if r[0] == variant and r[1] == ratio and r[5] == meth
                           and r[6] == w and r[7] == form]
                    x, y = zip(*sorted(pts))
                    ax.plot(x, y, ls, marker="o", label=f"{meth}{'' if meth == 'pgs' else f' ω={w}'} {form}")
            ax.set(title=f"{variant}, mass ratio {ratio:g}", xlabel="rows m",
                   ylabel=f"sweeps to rel. res. {args.tol:g}")
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "amgs_sweeps.png", dpi=120)
    plt.close(fig)
    return 0
