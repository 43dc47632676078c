"""Gradients through the step: their accuracy, their cost, and what first-order learning does with them.

- ``accuracy``: the step's adjoint (:func:`pbad_gym.integrators.adjoint.step_vjp`) against central finite
  differences of the solver itself (tolerance 1e-13), per input (q_{k−1}, q_k, τ, stick anchors), on a chain under
  gravity, the Swimmer (drag, limits, free base) and the standing Spider (contact, Coulomb friction capped by the
  step's own normal force); and whole rollouts (:func:`pbad_gym.diff.rollout`, 25 steps) along random directions
  of τ (the NumPy engine at the tightest of 1e-12, 1e-11, 1e-10 its round-off reaches; the Spider at 1e-13). Error:
  max |adjoint − FD| / max |FD| per step; |Δ| / (‖∇‖·‖d‖) along a direction d.
- ``cost``: milliseconds per physics step of the forward step (NumPy engine and numba kernel, the Simulator's own
  solver settings), of the backward step (the NumPy adjoint and the kernel's), and of a 10-step torch rollout on the
  kernel, forward and backward, for the Swimmer and the Spider at each batch size.
- ``learning``: configs/swimmer_shac.yaml, configs/swimmer_ppo.yaml and configs/swimmer_cmaes.yaml trained with
  the same seed (``--fraction`` of each budget); each kept policy replayed deterministically on 16 unseen reset
  seeds (1000 steps: distance); learning curves against env steps and against wall-clock in one figure.

Writes results/gradients/{accuracy,cost,learning}.csv, learning.png.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from .common import machine, out_dir, print_table, stamp, write_csv

PARTS = ("accuracy", "cost", "learning")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LEARNERS = {"shac": "swimmer_shac.yaml", "ppo": "swimmer_ppo.yaml", "cmaes": "swimmer_cmaes.yaml"}


def add_arguments(p):
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure (default all)")
    p.add_argument("--quick", action="store_true", help="small cases and budgets (smoke test)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256], help="batch sizes of the cost part")
    p.add_argument("--seconds", type=float, default=2.0, help="wall seconds per timed case (cost)")
    p.add_argument("--fraction", type=float, default=1.0, help="fraction of each learner's budget (learning)")
    p.add_argument("--learners", nargs="+", choices=tuple(LEARNERS), default=list(LEARNERS),
                   help="learners of the learning part (default all)")


def _vec_sim(env_id, B, **kwargs):
    import gymnasium

    env = gymnasium.make_vec(env_id, num_envs=B, vectorization_mode="vector_entry_point", **kwargs)
    return env


def standing_spider(B, tight=True, backend=None):
    """A Spider-v3 state after 1 s standing and 0.15 s of random actions, and a Simulator of its physics (the
    cone fixed point and the solver run to 1e-13 when ``tight``). Returns (sim, state)."""
    from .. import Simulator

    env = _vec_sim("pbad_gym/Spider-v3", B)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for a in [np.zeros((B, 8))] * 20 + [rng.uniform(-0.5, 0.5, (B, 8)) for _ in range(3)]:
        env.step(a)
    sp = env.unwrapped.sim
    contact = dataclasses.replace(sp.forces.contact, cone_tol=1e-13, cone_passes=200) if tight else sp.forces.contact
    sim = Simulator(sp.body, sp.dt, num_envs=B, contact=contact, limit_stiffness=sp.forces.limit_stiffness,
                    limit_damping=sp.forces.limit_damping, damping=sp.forces.damping, backend=backend,
                    **({"tol": 1e-13, "max_iter": 300} if tight else {}))
    return sim, sp.state


def _cases(quick):
    """(name, sim, q_prev, q, tau, anchor or None) of the accuracy part."""
    from .. import Simulator
    from ..kinematics import integrate
    from ..model import chain

    rng = np.random.default_rng(0)
    out = []
    for name, sim in (("chain (4 links, gravity, damping)", Simulator(chain(4), 0.01, num_envs=2, damping=0.3)),
                      ("Swimmer-v1 (drag, limits, free base)", _vec_sim("pbad_gym/Swimmer-v1", 2).unwrapped.sim)):
        q0 = np.repeat(np.asarray(sim.state.q[:1]), 2, 0)
        q = integrate(sim.body, q0, 0.1 * rng.standard_normal((2, sim.body.nv)))
        q_prev = integrate(sim.body, q, -sim.dt * 0.5 * rng.standard_normal((2, sim.body.nv)))
        out.append((name, sim, q_prev, q, rng.standard_normal((2, sim.body.nv)), None))
    if not quick:
        sim, st = standing_spider(2)
        tau = np.zeros((2, sim.body.nv))
        tau[:, 6:] = 150 * rng.uniform(-1, 1, (2, 8))
        out.append(("Spider-v3 standing (contact, Coulomb)", sim, np.array(st.q_prev), np.array(st.q), tau,
                    np.array(st.contact.anchor)))
    return out


def _solver(sim):
    from ..energies.contact import contact_state
    from ..integrators.options import SolverOptions
    from ..integrators.pbad import prepare_step, solve_step_in_cone
    from ..kinematics import forward_kinematics

    options = SolverOptions.create(np.float64, optimizer="lm", max_iter=300, tol=1e-13, hessian="exact")
    params = sim.forces.contact

    def solve(q_prev, q, tau, anchor):
        memory = None
        if params is not None:
            memory = contact_state(sim.body, forward_kinematics(sim.body, q), params, sim.dt)._replace(anchor=anchor)
        data = prepare_step(sim.body, q_prev, q, tau, sim.dt, sim.forces, contact=memory)
        q_next, _, data = solve_step_in_cone(sim.body, data, options)
        return q_next, data

    return solve


def step_errors(sim, q_prev, q, tau, anchor):
    """Relative error of the step's adjoint against central differences, per input: dict name -> error."""
    from ..integrators.adjoint import step_vjp
    from ..kinematics import difference, integrate

    solve, body = _solver(sim), sim.body
    q_next, data = solve(q_prev, q, tau, anchor)
    gbar = np.random.default_rng(1).standard_normal((q.shape[0], body.nv))
    ct, _ = step_vjp(body, data, q_prev, q_next, gbar)
    inputs = [("q_prev", 1e-7), ("q_cur", 1e-7), ("tau", 1e-4)] + ([("anchor", 1e-7)] if anchor is not None else [])
    out = {}
    for which, h in inputs:
        cols = range(body.nv) if which != "anchor" else [(s, a) for s in np.nonzero(data.contact.active.any(0))[0]
                                                          for a in (0, 1)]
        fd, got = [], []
        for j in cols:
            val = []
            for sgn in (1.0, -1.0):
                args = [q_prev, q, tau, anchor]
                if which == "anchor":
                    e = np.zeros_like(anchor)
                    e[:, j[0], j[1]] = sgn * h
                    args[3] = anchor + e
                else:
                    e = np.zeros((q.shape[0], body.nv))
                    e[:, j] = sgn * h
                    k = ("q_prev", "q_cur", "tau").index(which)
                    args[k] = args[k] + e if which == "tau" else integrate(body, args[k], e)
                val.append(np.sum(gbar * difference(body, q_next, solve(*args)[0]), -1))
            fd.append((val[0] - val[1]) / (2 * h))
            got.append(ct.anchor[:, j[0], j[1]] if which == "anchor" else getattr(ct, which)[:, j])
        fd, got = np.stack(fd, -1), np.stack(got, -1)
        out[which] = float(np.abs(got - fd).max() / np.abs(fd).max())
    return out


def rollout_error(sim, T=25, directions=3, seed=2):
    """Worst error of d(Σ w·q_t)/dτ along random directions d of τ against central differences, relative to
    ‖∇‖·‖d‖ (the largest directional derivative of that size: a direction nearly orthogonal to the gradient would
    make |Δ|/|FD| measure the difference's own round-off)."""
    import torch

    from ..diff import rollout

    rng = np.random.default_rng(seed)
    B, nv = sim.num_envs, sim.body.nv
    tau = rng.uniform(-1, 1, (T, B, nv)) * (150.0 if sim.forces.contact is not None else 2.0)
    if sim.forces.contact is not None:
        tau[..., :6] = 0.0
    tau = torch.tensor(tau, requires_grad=True)
    W = torch.tensor(rng.standard_normal((T, B, sim.body.nq)))
    (W * rollout(sim, tau)).sum().backward()
    worst = 0.0
    for _ in range(directions):
        d = torch.tensor(rng.standard_normal(tau.shape)) * (tau.detach() != 0)
        with torch.no_grad():
            fd = (float((W * rollout(sim, tau.detach() + 1e-4 * d)).sum())
                  - float((W * rollout(sim, tau.detach() - 1e-4 * d)).sum())) / 2e-4
        scale = float(tau.grad.norm() * d.norm())
        worst = max(worst, abs(float((tau.grad * d).sum()) - fd) / scale)
    return worst


def accuracy(args, out):
    from .. import Simulator

    rows = []
    for name, sim, q_prev, q, tau, anchor in _cases(args.quick):
        errors = step_errors(sim, q_prev, q, tau, anchor)
        rows += [(name, "one step", k, v) for k, v in errors.items()]
        T = 5 if args.quick else 25
        if anchor is None:  # the case's own physics on the NumPy engine, solved as tightly as its round-off allows
            f = sim.forces
            for tol in (1e-12, 1e-11, 1e-10):
                tight = Simulator(sim.body, sim.dt, num_envs=2, drag=f.drag, gravity=tuple(f.gravity),
                                  limit_stiffness=f.limit_stiffness, damping=f.damping, tol=tol, max_iter=300,
                                  backend="numpy")
                tight.reset(q, np.zeros((2, sim.body.nv)))
                try:
                    err = rollout_error(tight, T=T)
                    break
                except RuntimeError:  # a step stalled at its round-off floor above tol
                    continue
        else:
            tight, st = standing_spider(2)
            tight.state = st._replace(kin=None, kin_prev=None)
            tol, err = 1e-13, rollout_error(tight, T=T)
        rows.append((name, f"rollout {T} steps (tol {tol:g})", "tau", err))
    header = ["case", "what", "input", "relative error"]
    write_csv(out / "accuracy.csv", rows, header)
    print_table(rows, header, "Adjoint vs central finite differences")


def _time(fn, seconds):
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or n < 3:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n


def cost(args, out):
    """ms per physics step at each batch size: the forward step (NumPy engine, numba kernel), the step's backward
    (NumPy ``step_vjp``, the kernel's ``step_vjp_numba``), and a 10-step ``diff.rollout`` on the kernel through
    torch autograd, forward and backward (everything a trainer pays per step: conversions, the anchors' adjoint)."""
    from ..simulator import numba_available

    rows = []
    batches = [b for b in args.batches if not args.quick or b <= 16]
    kernel = numba_available()
    nan = float("nan")
    for env_id in ("pbad_gym/Swimmer-v1", "pbad_gym/Spider-v3"):
        for B in batches:
            # the kernel's figures first: NumPy's BLAS threads spin on the other cores for a while after its
            # solves, which would make the kernel's launch chooser see a busy pool
            f_k, b_k, roll = nan, nan, (nan, nan)
            if kernel:
                sim, state, tau = _cost_case(env_id, B, "numba")
                f_k = _time(lambda: (sim.restore(state), sim.step(tau)), args.seconds) * 1e3
                b_k = _backward_ms(sim, state, tau, args.seconds, "numba")
                roll = _rollout_ms(sim, state, tau, args.seconds)
            sim, state, tau = _cost_case(env_id, B, "numpy")
            f_n = _time(lambda: (sim.restore(state), sim.step(tau)), args.seconds) * 1e3
            b_n = _backward_ms(sim, state, tau, args.seconds, "numpy")
            rows.append((env_id.split("/")[1], B, f_n, f_k, b_n, b_k, b_k / f_k, *roll, roll[1] / roll[0]))
            print("  " + ", ".join(f"{h} {v:.4g}" if isinstance(v, float) else f"{h} {v}"
                                   for h, v in zip(COST_HEADER, rows[-1])), flush=True)
    write_csv(out / "cost.csv", rows, COST_HEADER)
    print_table(rows, COST_HEADER, "ms per physics step")


COST_HEADER = ["env", "batch", "forward NumPy ms", "forward numba ms", "backward NumPy ms", "backward numba ms",
               "backward / forward (numba)", "rollout forward ms", "rollout backward ms",
               "rollout backward / forward"]


def _cost_case(env_id, B, backend):
    """(Simulator, a snapshot after 5 random env steps, random actuator torques (B, nv)) of ``env_id``."""
    env = _vec_sim(env_id, B, backend=backend)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        env.step(rng.uniform(-1, 1, (B, env.single_action_space.shape[0])))
    sim, act = env.unwrapped.sim, env.unwrapped.actuated
    tau = np.zeros((B, sim.body.nv))
    tau[:, act] = rng.uniform(-1, 1, (B, len(act))) * env.unwrapped.gear
    return sim, sim.snapshot(), tau


def _backward_ms(sim, state, tau, seconds, backend):
    """ms of the step adjoint (``backend`` "numpy": ``step_vjp``, "numba": ``step_vjp_numba``) of one step from
    ``state`` under ``tau`` (solved here)."""
    from ..integrators.adjoint import step_vjp
    from ..integrators.pbad import prepare_step, solve_step_in_cone

    sim.restore(state)
    st = sim.state
    qp, qc = np.asarray(st.q_prev), np.asarray(st.q)
    gbar = np.ones((qc.shape[0], sim.body.nv))
    if backend == "numba":  # the step solved by the kernel (no NumPy solve, whose BLAS threads would spin)
        from ..kernels.numba.vjp import step_vjp_numba

        sim.step(tau)
        q_next = np.array(sim.state.q)
        return _time(lambda: step_vjp_numba(sim.body, sim.forces, sim.dt, qp, qc, tau, q_next, gbar,
                                            contact=st.contact), seconds) * 1e3
    data = prepare_step(sim.body, qp, qc, tau, sim.dt, sim.forces, contact=st.contact)
    q_next, _, data = solve_step_in_cone(sim.body, data, sim.options)
    return _time(lambda: step_vjp(sim.body, data, qp, q_next, gbar), seconds) * 1e3


def _rollout_ms(sim, state, tau, seconds, T=10):
    """(forward, backward) ms per step of a T-step ``diff.rollout`` of the kernel-backed ``sim`` from ``state``
    under ``tau`` repeated, with a loss on every configuration."""
    import torch

    from ..diff import rollout

    taus = torch.tensor(np.repeat(tau[None], T, 0))

    def forward():
        sim.restore(state)
        with torch.no_grad():
            rollout(sim, taus, nonconverged="mask")

    def both():
        sim.restore(state)
        t = taus.clone().requires_grad_(True)
        rollout(sim, t, nonconverged="mask").sum().backward()

    f = _time(forward, seconds) * 1e3 / T
    return f, _time(both, seconds) * 1e3 / T - f


def learning(args, out):
    from ..agents.config import load_config
    from ..agents.episodes import evaluate_policy
    from ..agents.policies import load_policy
    from .fig5 import _train

    rows, curves = [], {}
    for learner in args.learners:
        cfg = load_config(CONFIGS / LEARNERS[learner])
        cfg = _budget(cfg, learner, args)
        run_dir, metrics = _train(cfg, out / "runs")
        ev = evaluate_policy(load_policy(run_dir), cfg.env, 2 if args.quick else 16, 10_000)
        last = metrics[-1]
        # the deterministic evaluations where the config runs them (SHAC's training episodes end only every 1000
        # steps of a row: its training return lags the policy by a whole episode), else the training return
        y = "eval_return" if any(r.get("eval_return") not in (None, "") for r in metrics) else (
            "return_best" if learner == "cmaes" else "return_mean")
        label = f"{learner} ({'evaluation' if y == 'eval_return' else 'best' if learner == 'cmaes' else 'training'})"
        curves[label] = [(int(r["env_steps"]), float(r["wall_time"]), float(r[y])) for r in metrics
                         if r.get(y) not in (None, "")]
        rows.append((learner, cfg.name, int(last["env_steps"]), float(last["wall_time"]), ev["return"],
                     ev["distance"]))
        print(f"  {learner}: {rows[-1][2]} env steps in {rows[-1][3]:.1f} s; eval return {ev['return']:.1f}, "
              f"distance {ev['distance']:.2f} m", flush=True)
    header = ["learner", "config", "env_steps", "wall_s", "eval_return", "eval_distance_m"]
    write_csv(out / "learning.csv", rows, header)
    print_table(rows, header, f"Swimmer-v1, kept policy on {2 if args.quick else 16} unseen seeds (1000 steps)")
    _plot(curves, out / "learning.png")


def _budget(cfg, learner, args):
    f = 0.01 if args.quick else args.fraction
    if learner == "cmaes":
        section = dataclasses.replace(cfg.cmaes, iterations=max(1, round(cfg.cmaes.iterations * f)),
                                      **({"popsize": 4, "episode_steps": 50} if args.quick else {}))
        return dataclasses.replace(cfg, cmaes=section)
    sec = getattr(cfg, learner)
    steps = max(1, round(sec.total_timesteps * f))
    env = cfg.env
    if args.quick:
        env = dataclasses.replace(env, num_envs=4)
        extra = {"num_steps": 16} if learner == "ppo" else {"horizon": 8}
        steps = 4 * 16 * 2
        sec = dataclasses.replace(sec, **extra, eval_episodes=1, eval_every=1)
    return dataclasses.replace(cfg, env=env, **{learner: dataclasses.replace(sec, total_timesteps=steps)})


def _plot(curves, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for learner, pts in curves.items():
        axes[0].plot([p[0] for p in pts], [p[2] for p in pts], label=learner)
        axes[1].plot([p[1] for p in pts], [p[2] for p in pts], label=learner)
    for ax, x in zip(axes, ("env steps", "wall-clock [s]")):
        ax.set_xscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel("return (1000-step episodes)")
        ax.legend()
    axes[0].set_title("Swimmer-v1: return against env steps")
    axes[1].set_title("against wall-clock (2-core host)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def run(args):
    if not 0 < args.fraction <= 1:
        raise ValueError(f"--fraction must be in (0, 1], got {args.fraction}")
    if any(b < 1 for b in args.batches):
        raise ValueError(f"--batches must be positive integers, got {args.batches}")
    out = out_dir(args.out, "gradients")
    print(f"pbad-bench gradients on {machine()}, {stamp()}: {', '.join(args.parts)}")
    for part in PARTS:
        if part in args.parts:
            globals()[part](args, out)
    if "learning" in args.parts:
        print(f"wrote {out}/learning.png")
    return 0
