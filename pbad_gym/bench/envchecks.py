"""Physics checks of the environments under random actions (issue 8's measurements):

- ``impulse``: Spider with contact_model="impulse": per-step energy balance ΔE_mech − τᵀ(q_{k+1} ⊖ q_k)
  (E_mech = kinetic + gravity + joint-limit penalty), LCP sweeps per solve and solves stopped at the sweep cap,
  contact passes (``--sqp-iterations 1``: the former single linearisation), wall time;
- ``float32``: share of unconverged steps and of batched steps that wait ``max_iter`` iterations, per dtype at
  the environment's default tolerance (and at ``--tol`` when given);
- ``budget``: how close physical runs come to the divergence guard's thresholds (largest ratio of the energy
  gained in a step, and of the energy, to the guard's per-step and cumulative thresholds; 1 would be flagged).

Writes envchecks_<check>.csv under ``--out`` and prints a table.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from .common import machine, out_dir, print_table, stamp, write_csv

CHECKS = ("impulse", "float32", "budget")


def add_arguments(p):
    p.add_argument("--check", choices=CHECKS, required=True)
    p.add_argument("--envs", nargs="+", default=["pbad_gym/Spider-v0", "pbad_gym/Spider-v1"],
                   help="registered environment ids")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lcp-methods", nargs="+", default=["block_pgs"], help="impulse: LCP methods to compare")
    p.add_argument("--sqp-iterations", type=int, default=None, help="impulse: override the contact passes")
    p.add_argument("--tol", type=float, default=None, help="float32: also run at this solver tolerance")


def _make(env_id, n, **kwargs):
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the environments)

    return gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)


def _mechanical_energy(sim):
    from ..energies import limit_terms

    ke, pe = sim.energy()
    return np.asarray(ke + pe + limit_terms(sim.body, sim.q, sim.forces.limit_stiffness, derivatives=False).value)


def impulse_row(env_id, method, args):
    """One impulse-contact run: (env, method, passes, max gain, steps gaining > 1e-6 J, summed gains, max gain of
    the steps that start with no sphere more than 1 cm inside the ground (a reset pose can start deeper: lifting
    it out raises the potential energy), mean LCP sweeps per solve, share of solves at the sweep cap, mean contact
    passes, unconverged share, seconds)."""
    from ..integrators.impulse import sphere_gaps
    from ..kinematics import difference

    env = _make(env_id, args.num_envs, max_episode_steps=None, terminate_when_unhealthy=False,
                contact_model="impulse", lcp_method=method)
    sim = env.sim
    if args.sqp_iterations is not None:
        sim.impulse = dataclasses.replace(sim.impulse, sqp_iterations=args.sqp_iterations)
    env.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    B, nv = args.num_envs, env.body.nv
    gains, sweeps, passes, capped, conv, deep = [], [], [], [], [], []
    skip = np.zeros(B, dtype=bool)  # rows reset by this step: no energy balance across a reset
    t0 = time.perf_counter()
    for _ in range(args.steps):
        a = rng.uniform(-1, 1, env.action_space.shape)
        tau = np.zeros((B, nv))
        tau[:, env.actuated] = a * env.gear
        E0, q0 = _mechanical_energy(sim), sim.q.copy()
        deep.append(sphere_gaps(env.body, sim.kinematics(), sim.impulse.height)[1].min(1) < -0.01)
        _, _, term, trunc, info = env.step(a)
        W = np.sum(tau * difference(env.body, q0, sim.q), -1)
        gains.append(np.where(skip | info["diverged"], np.nan, _mechanical_energy(sim) - E0 - W))
        skip = info["diverged"] | term | trunc
        solved = info["sqp_iterations"] > 0
        sweeps.append(np.where(solved, info["lcp_iterations"] / np.maximum(info["sqp_iterations"], 1), np.nan))
        capped.append(np.where(solved, ~info["lcp_converged"], np.nan))
        passes.append(np.where(solved, info["sqp_iterations"], np.nan))
        conv.append(info["converged"])
    secs = time.perf_counter() - t0
    g = np.array(gains)
    p = sim.impulse.sqp_iterations
    return [env_id, method, p, float(np.nanmax(g)), int(np.sum(g > 1e-6)), float(np.nansum(np.maximum(g, 0))),
            float(np.nanmax(np.where(np.array(deep), np.nan, g))), float(np.nanmean(sweeps)),
            float(np.nanmean(capped)), float(np.nanmean(passes)), float(1 - np.mean(conv)), secs]


def float32_rows(env_id, args):
    """Unconverged shares per dtype at the default tolerance (and at --tol)."""
    rows = []
    cases = [(np.float64, None), (np.float32, None)] + ([(np.float32, args.tol)] if args.tol is not None else [])
    for dtype, tol in cases:
        env = _make(env_id, args.num_envs, dtype=dtype, **({} if tol is None else {"tol": tol}))
        env.reset(seed=args.seed)
        rng = np.random.default_rng(args.seed)
        unc, wait = [], []
        t0 = time.perf_counter()
        for _ in range(args.steps):
            _, _, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            unc.append(~info["converged"])
            wait.append(info["iterations"].max() >= env.sim.max_iter)
        rows.append([env_id, np.dtype(dtype).name, env.sim.tol, float(np.mean(unc)), float(np.mean(wait)),
                     time.perf_counter() - t0])
    return rows


def budget_row(env_id, args):
    """Largest ratios of a physical run's step gain and energy to the guard's per-step and cumulative thresholds."""
    env = _make(env_id, args.num_envs)
    env.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    b = env.energy_budget
    step_r, total_r, flagged = [], [], 0
    done = np.zeros(args.num_envs, dtype=bool)
    for _ in range(args.steps):
        K0 = b.K.copy()
        _, _, term, trunc, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        flagged += int(info["diverged"].sum())
        K, ke, c = b.measure(env.centre_of_mass(env.sim.kinematics()))
        step_r.append(np.where(done, np.nan, (K - K0) / (b.safety * c * np.sqrt(2 * ke) * env.dt)))
        total_r.append(np.where(done, np.nan, K / b.s ** 2))
        done = term | trunc
    return [env_id, float(np.nanmax(step_r)), float(np.nanmax(total_r)), flagged]


def run(args):
    out = out_dir(args.out, "envchecks")
    print(f"pbad-bench envchecks --check {args.check} on {machine()}, {stamp()}; {args.num_envs} envs x "
          f"{args.steps} steps, random actions, seed {args.seed}")
    if args.check == "impulse":
        header = ["env", "lcp_method", "passes_cap", "max_gain_J", "steps_gaining", "sum_gains_J",
                  "max_gain_not_deep_J", "sweeps_per_solve", "solves_at_cap", "mean_passes", "unconverged", "seconds"]
        rows = [impulse_row(e, m, args) for e in args.envs for m in args.lcp_methods]
    elif args.check == "float32":
        header = ["env", "dtype", "tol", "unconverged", "batched_steps_at_max_iter", "seconds"]
        rows = [r for e in args.envs for r in float32_rows(e, args)]
    else:
        header = ["env", "max_step_ratio", "max_cumulative_ratio", "rows_flagged"]
        rows = [budget_row(e, args) for e in args.envs]
    write_csv(out / f"envchecks_{args.check}.csv", rows, header)
    print_table(rows, header)
    return 0
