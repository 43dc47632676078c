"""Convergence order of PBAD order 2, its BDF2 form and collocation order 3 / 4 against an RK4 reference (3-link
chain).

A 3-link chain released horizontally is simulated 0.25 s; the final configuration is compared with RK4 at
dt = 1e-4 s, and the observed order is log2 of the error ratio between successive halvings of dt. The RK4
baseline at dt = 1e-3 s is checked against the same reference.
"""
from __future__ import annotations

import numpy as np

from .common import PAPER_SOLVER, machine, out_dir, print_table, stamp, write_csv

DTS = (0.01, 0.005, 0.0025, 0.00125, 0.000625)


def add_arguments(p):
    p.add_argument("--t-end", type=float, default=0.25, help="simulated seconds")
    p.add_argument("--tol", type=float, default=1e-12, help="solver tolerance (rad)")


SCHEMES = {"pbad": dict(order=2), "bdf2": dict(integrator="bdf2"), "collocation 3": dict(order=3),
           "collocation 4": dict(order=4)}


def final_q(order, dt, t_end, tol):
    """The chain's q after ``t_end`` s at step ``dt``: ``order`` 0 is RK4, 2 / 3 / 4 PBAD order 2 / collocation, or
    a name of :data:`SCHEMES`."""
    from ..model import chain
    from ..simulator import Simulator

    if order == 0:
        kw = dict(integrator="rk4")
    else:
        kw = dict(SCHEMES[order] if isinstance(order, str) else dict(order=order), tol=tol)
    sim = Simulator(chain(3), dt=dt, **kw, **PAPER_SOLVER)
    for _ in range(int(round(t_end / dt))):
        sim.step()
    return sim.q[0].copy()


def run(args):
    out = out_dir(args.out, "order")
    print(f"pbad-bench order on {machine()}, {stamp()}")
    ref = final_q(0, 1e-4, args.t_end, args.tol)
    rk4 = float(np.max(np.abs(final_q(0, 1e-3, args.t_end, args.tol) - ref)))
    print(f"RK4 at dt = 1e-3 vs RK4 at dt = 1e-4: {rk4:.2e} rad")
    rows = []
    for scheme in SCHEMES:
        errs = [float(np.max(np.abs(final_q(scheme, dt, args.t_end, args.tol) - ref))) for dt in DTS]
        for i, dt in enumerate(DTS):
            observed = np.log2(errs[i - 1] / errs[i]) if i else float("nan")
            rows.append((scheme, dt, errs[i], observed))
    write_csv(out / "order.csv", rows, ["scheme", "dt", "max_error_rad", "observed_order"])
    print_table(rows, ["scheme", "dt [s]", "error [rad]", "observed order"], "final-state error vs RK4 reference")
    return 0
