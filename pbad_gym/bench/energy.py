"""Where the actuators' work goes: an energy ledger of the penalty-contact walkers, per physics step.

    pbad-bench energy [--envs Spider-v5 Spider-v4] [--dt 0.01 0.005 0.0025 0.001] [--rows 8] [--seconds 10]
        [--gait FILE.csv | --policy RUN_DIR] [--set KEY=VALUE ...]

Each row runs ``--seconds`` of simulated time from a reset, under uniformly random actions held for one control
interval (0.05 s), under an open-loop oscillator gait (``--gait``: a CSV of search vectors, one per line, as
``pbad-bench search`` decodes them) or under a trained policy (``--policy RUN_DIR``), stepping the Simulator one
physics step at a time. Over every step q_k -> q_{k+1} (Δq = q_{k+1} ⊖ q_k) the ledger books, from the engine's
own terms:

- actuator work W = τ·Δq;
- ΔE, the change of the mechanical energy E = ½ q̇ᵀM q̇ (q̇ = Δq/Δt, armature included) + gravity + the springs
  of the joint-limit and contact penalties (the parts that store energy);
- joint damping: its force b·Δq/Δt times Δq;
- limit damping: the clamped Kelvin-Voigt limit force minus its spring part, times Δq;
- contact damping: the normal force the step applied minus its spring part D1·d, times the spheres' normal
  displacement (with trapezoidal penalty springs, Spider-v4 and v5, the spring parts are those the step applied,
  k·(p/4 + p_k/2 + p_{k−1}/4));
- friction: the tangential ground force the step applied times the spheres' tangential displacement;
- numerical dissipation, the rest: W − ΔE − (the four above). It is what the implicit step itself removes (for
  a continuous-time motion it would be 0) and should vanish as Δt shrinks.

The BDF2 step (``--set integrator=bdf2 penalty_springs=implicit``, docs/physics.md §2.6) is booked with its own
velocity: each force at the end of the step times v_{k+1}·Δt (the BDF2 velocity; the spheres' likewise), and the
kinetic energy at v_{k+1}: a balance second order in Δt, as the step.

Totals per row (J) and the shares of W go to a CSV and a bar chart; the friction-cone check (the friction
impulse beyond μ·F_n over the total friction impulse) rides along.
"""
from __future__ import annotations

import importlib
import inspect
import time

import numpy as np

from .common import add_set_argument, env_settings, machine, out_dir, print_table, stamp, write_csv

PARTS = ("delta_E", "joint_damping", "limit_damping", "contact_damping", "friction", "numerical")
CONTROL = 0.05  # [s] the walkers' control interval: actions are held this long whatever Δt is


def add_arguments(p):
    p.add_argument("--envs", nargs="+", default=["Spider-v5", "Spider-v4"], help="pbad_gym walker ids (no prefix)")
    p.add_argument("--dt", nargs="+", type=float, default=None,
                   help="physics steps [s] to run each env at (default: each env's own)")
    p.add_argument("--rows", type=int, default=8, help="rows (independent episodes) per run (default 8)")
    p.add_argument("--seconds", type=float, default=10.0, help="simulated seconds per row (default 10)")
    p.add_argument("--gait", default=None, help="CSV of oscillator search vectors (one per row, cycled); "
                                                "default: random actions")
    p.add_argument("--policy", default=None, help="a pbad-train run folder: its best policy acts (default: random "
                                                  "actions)")
    p.add_argument("--seed", type=int, default=0, help="reset and action seed (default 0)")
    add_set_argument(p)


def _keywords(cls):
    """Keyword arguments of ``cls``'s constructor and of the constructors it forwards them to."""
    return {p for c in cls.__mro__ if "__init__" in vars(c) for p in inspect.signature(c.__init__).parameters}


def _make(env_id, dt, rows, **kwargs):
    """A native vector env of ``env_id`` (further ``kwargs``) with physics step ``dt`` (None: its own) and the
    control interval kept at 0.05 s; no termination, no time limit."""
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the ids)

    spec = gymnasium.spec(f"pbad_gym/{env_id}")
    module, name = spec.vector_entry_point.split(":")
    cls = getattr(importlib.import_module(module), name)
    if "terminate_when_unhealthy" in _keywords(cls):  # (HalfCheetah has no termination to turn off)
        kwargs.update(terminate_when_unhealthy=False)
    kwargs.update(max_episode_steps=None)
    if dt is not None:
        kwargs.update(dt=dt, frame_skip=max(1, int(round(CONTROL / dt))))
    env = gymnasium.make_vec(f"pbad_gym/{env_id}", num_envs=rows, vectorization_mode="vector_entry_point",
                             **kwargs)
    return env


def _stored(body, forces, q):
    """Stored (spring) energies [J] (B,) at q: the joints' (limit penalty, springs) and the contact penalty's,
    without their damping."""
    from ..energies import joint_potential, sphere_centres
    from ..energies.contact import normal_point_terms
    from ..kinematics import forward_kinematics

    out = np.array(joint_potential(body, forces, q), dtype=np.float64)
    if forces.contact is not None:
        out += normal_point_terms(body, sphere_centres(body, forward_kinematics(body, q)), forces.contact, False)[0]
    return out


def step_ledger(body, forces, dt, q0, q1, tau, force, q_back=None):
    """The ledger of one step from q0 to q1 (B, nq) under tau (B, nv) with the ground force ``force`` (B, S, 3)
    [N] the step applied (None without contact): dict of (B,) [J] with keys "work", "E1" (the mechanical energy
    after the step) and the dissipations joint_damping, limit_damping, contact_damping, friction. q_back (B, nq):
    the step's q_{k−1}, which trapezoidal penalty springs read (their spring part is k·(p/4 + p_k/2 + p_{k−1}/4):
    energies/penalty.py); the damping parts are the applied forces minus the spring parts."""
    from ..dynamics import energy
    from ..energies import damping_terms, limit_terms, sphere_centres
    from ..energies.contact import penetration
    from ..kinematics import difference, forward_kinematics, integrate

    dq = difference(body, q0, q1)
    ke, pe = energy(body, q1, dq / dt, forces.gravity)
    out = {"work": np.einsum("bi,bi->b", tau, dq), "E1": ke + pe + _stored(body, forces, q1)}
    zero = np.zeros(q0.shape[0])
    out["joint_damping"] = (np.einsum("bi,bi->b", damping_terms(body, q1, q0, forces.damping, dt).grad, dq)
                            if forces.has_damping else zero)
    weights = lambda trapezoidal: ((0.25, 0.5, 0.25) if trapezoidal else (1.0, 0.0, 0.0))  # noqa: E731  (p, p_k, p_{k−1})
    if forces.limit_stiffness > 0 and forces.limit_damping > 0:
        k, trap = forces.limit_stiffness, forces.limit_springs == "trapezoidal"
        q_pred = None if q_back is None else integrate(body, q0, difference(body, q_back, q0))
        full = limit_terms(body, q1, k, True, q0, forces.limit_damping, dt, q_pred, forces.limit_springs).grad
        spring = sum(w * limit_terms(body, q, k, True).grad for w, q in zip(weights(trap), (q1, q0, q_back)) if w)
        out["limit_damping"] = np.einsum("bi,bi->b", full - spring, dq)
    else:
        out["limit_damping"] = zero
    if forces.contact is None:
        out["contact_damping"] = out["friction"] = zero
        return out
    c = forces.contact
    P0, P1 = (sphere_centres(body, forward_kinematics(body, q)) for q in (q0, q1))
    dP = P1 - P0
    Pb = None if q_back is None else sphere_centres(body, forward_kinematics(body, q_back))
    spring = sum(w * c.stiffness * penetration(body, P, c.height)
                 for w, P in zip(weights(c.springs == "trapezoidal"), (P1, P0, Pb)) if w)
    out["contact_damping"] = -((force[..., 2] - spring) * dP[..., 2]).sum(-1)
    out["friction"] = -(force[..., :2] * dP[..., :2]).sum((-1, -2))
    return out


def bdf2_damping(body, forces, dt, q_back, q0, q1, force):
    """The dampers' forces at the end of a BDF2 step from q0 = q_k to q1 (q_back = its q_{k−1}; dt [s] the
    physics step): joint damping and the limits' damping part, generalised (B, nv) each [N m or N], and the ground
    force's damping part (B, S) [N, normal] and friction (B, S, 2) [N] (``force`` (B, S, 3) the step applied;
    None without contact). The dampers read the BDF2 velocity (q − q̃)/Δt' (integrators/bdf2.py)."""
    from ..energies import damping_terms, limit_terms, sphere_centres
    from ..energies.contact import penetration
    from ..integrators.bdf2 import REFERENCE, STEP_SCALE, joint_combination
    from ..kinematics import forward_kinematics

    h = STEP_SCALE * dt
    q_ref = joint_combination(body, (q0, q_back), REFERENCE)
    zero = np.zeros((q1.shape[0], body.nv))
    joint = damping_terms(body, q1, q_ref, forces.damping, h).grad if forces.has_damping else zero
    limit = zero
    if forces.limit_stiffness > 0 and forces.limit_damping > 0:
        k = forces.limit_stiffness
        limit = (limit_terms(body, q1, k, True, q_ref, forces.limit_damping, h, None, "implicit").grad
                 - limit_terms(body, q1, k, True).grad)
    if forces.contact is None:
        return joint, limit, None, None
    c = forces.contact
    P1 = sphere_centres(body, forward_kinematics(body, q1))
    return joint, limit, force[..., 2] - c.stiffness * penetration(body, P1, c.height), force[..., :2]


def bdf2_step_ledger(body, forces, dt, q_back, q0, q1, tau, v1, damped):
    """The ledger of one BDF2 step from q0 = q_k to q1 (B, nq) (q_back its q_{k−1}) under tau (B, nv): dict of
    (B,) [J] as :func:`step_ledger`'s. BDF2's forces act at the end of the step, paired with the step's own
    velocity v1 (B, nv) (the BDF2 one; the spheres' likewise): each term books force·v1·Δt. With the kinetic
    energy at v1 this balance is second order in Δt: pairing the end forces with the displacement q1 ⊖ q0 (the
    order-2 step's rule) would book an O(Δt) share of the inertia's work as energy created. ``damped``: the
    :func:`bdf2_damping` of this step."""
    from ..dynamics import energy
    from ..energies import sphere_centres
    from ..kinematics import forward_kinematics

    joint, limit, normal, friction = damped
    ke, pe = energy(body, q1, v1, forces.gravity)
    power = lambda f: dt * np.einsum("bi,bi->b", f, v1)  # noqa: E731
    out = {"work": power(tau), "E1": ke + pe + _stored(body, forces, q1), "joint_damping": power(joint),
           "limit_damping": power(limit)}
    if forces.contact is None:
        out["contact_damping"] = out["friction"] = np.zeros(q0.shape[0])
        return out
    P = [sphere_centres(body, forward_kinematics(body, q)) for q in (q1, q0, q_back)]
    step = 1.5 * P[0] - 2.0 * P[1] + 0.5 * P[2]  # Δt × the spheres' BDF2 velocity
    out["contact_damping"] = -(normal * step[..., 2]).sum(-1)
    out["friction"] = -(friction * step[..., :2]).sum((-1, -2))
    return out


def ledger(env_id, dt, rows, seconds, seed, gait=None, progress=None, policy=None, **env_kwargs):
    """Run ``rows`` rows of ``env_id`` (with ``env_kwargs``) at physics step ``dt`` for ``seconds`` and book every
    step (module docstring). Actions: random, the oscillator ``gait`` (rows, 2·n_act + 1), or ``policy`` (a
    callable obs (rows, obs_dim) -> actions, e.g. a run's ``load_policy(run).act``), each held for 0.05 s.
    Returns (totals: dict of (rows,) [J] with "work" and PARTS, cone: (excess impulse, friction impulse) [N s],
    mean LM iterations per physics step, the physics step used [s])."""
    from ..dynamics import energy
    from ..energies import cone_excess

    env = _make(env_id, dt, rows, **env_kwargs)
    sim, body = env.sim, env.body
    if sim.integrator not in ("pbad", "bdf2"):
        raise ValueError(f"the ledger books PBAD's steps ('pbad', 'bdf2'), got integrator={sim.integrator!r}")
    bdf2 = sim.integrator == "bdf2"
    forces, h = sim.model.forces, sim.dt
    hold = max(1, int(round(CONTROL / h)))
    env.reset(seed=seed)
    actions = _action_source(env, rows, np.random.default_rng(seed), gait, policy)
    q0 = np.asarray(sim.q).copy()
    ke, pe = energy(body, q0, np.asarray(sim.qd), forces.gravity)
    E0 = ke + pe + _stored(body, forces, q0)
    totals = {k: np.zeros(rows) for k in ("work",) + PARTS}
    excess = friction = 0.0
    iters = []
    steps = int(round(seconds / h))
    for k in range(steps):
        if k % hold == 0:
            tau = np.zeros((rows, body.nv))
            tau[:, env._actuated_columns] = np.clip(actions(k * h), -1, 1) * env.gear
        q_back, q_prev = np.asarray(sim.state.q_prev).copy(), np.asarray(sim.q).copy()
        iters.append(np.mean(sim.step(tau)["iterations"]))
        F = None if forces.contact is None else np.asarray(sim.contact_forces)
        q1 = np.asarray(sim.q).copy()
        if bdf2:  # (the step's own q_{k−1}: a reset row's first step starts its history)
            back = np.asarray(sim.state.back[:, 0])
            led = bdf2_step_ledger(body, forces, h, back, q_prev, q1, tau, np.asarray(sim.qd),
                                   bdf2_damping(body, forces, h, back, q_prev, q1, F))
        else:
            led = step_ledger(body, forces, h, q_prev, q1, tau, F, q_back)
        for key in ("work", "joint_damping", "limit_damping", "contact_damping", "friction"):
            totals[key] += led[key]
        if F is not None:
            excess += cone_excess(F, forces.contact.mu).sum() * h
            friction += np.hypot(F[..., 0], F[..., 1]).sum() * h
        if progress is not None:
            progress(k + 1, steps)
    totals["delta_E"] = led["E1"] - E0
    totals["numerical"] = totals["work"] - sum(totals[p] for p in PARTS[:-1])
    return totals, (excess, friction), float(np.mean(iters)), h


def _action_source(env, rows, rng, gait, policy):
    """actions(t) (rows, n_act) at a control time t [s]: the policy on the env's current observations, the
    oscillator gait, or uniformly random actions from ``rng``."""
    from .search import oscillator

    if policy is not None:
        return lambda t: policy(env._get_obs(*env._state_numpy(), env._kinematics()).astype(np.float32))
    if gait is not None:
        return lambda t: _gait_action(gait, t, oscillator)
    return lambda t: rng.uniform(-1, 1, (rows, len(env.gear)))


def _policy(run_dir, rows):
    """The act callable of a run's best policy for ``rows`` rows, or None."""
    if run_dir is None:
        return None
    from ..agents.policies import load_policy

    policy = load_policy(run_dir)
    policy.reset(rows)
    return policy.act


def _gait_action(X, t, oscillator):
    """Actions (rows, n_act) of oscillator search vectors X (rows, 2·n_act + 1) at time t [s] (bench.search's
    decoding with its default frequency band)."""
    n_act = (X.shape[1] - 1) // 2
    out = np.empty((X.shape[0], n_act))
    for i, x in enumerate(X):
        amp, f, ph = oscillator(x, n_act, 0.25, 3.0)
        out[i] = amp * np.sin(2 * np.pi * f * t + ph)
    return out


def run(args):
    from tqdm import tqdm

    out = out_dir(args.out, "energy")
    gait = None if args.gait is None else np.atleast_2d(np.loadtxt(args.gait, delimiter=","))
    if gait is not None:
        gait = gait[np.arange(args.rows) % len(gait)]
    rows, header = [], ["env", "dt", "work_J"] + [f"{p}_share" for p in PARTS] + ["cone_excess_share", "lm_iters"]
    for env_id in args.envs:
        for dt in (args.dt or [None]):
            bar = tqdm(total=1, desc=f"{env_id} dt={dt or 'default'}", leave=False)

            def progress(k, n):
                bar.total = n
                bar.n = k
                if k % 200 == 0 or k == n:
                    bar.refresh()

            t0 = time.time()
            tot, (ex, fr), its, h = ledger(env_id, dt, args.rows, args.seconds, args.seed, gait, progress,
                                           _policy(args.policy, args.rows), **env_settings(args))
            bar.close()
            W = tot["work"].sum()
            rows.append([env_id, h, W] + [tot[p].sum() / W for p in PARTS] + [ex / fr if fr > 0 else 0.0, its])
            print(f"{env_id} dt={h}: {time.time() - t0:.0f} s", flush=True)
    write_csv(out / "energy.csv", rows, header)
    acts = ("policy " + args.policy if args.policy else "gait " + args.gait if args.gait else "random actions")
    print_table(rows, header, title=f"energy ledger, {args.rows} rows x {args.seconds:g} s ({acts}), seed {args.seed}")
    _plot(rows, out / "energy.png")
    print(f"{stamp()} {machine()}  -> {out / 'energy.csv'}, {out / 'energy.png'}")
    return 0


def _plot(rows, path):
    """Stacked shares of the actuator work, one bar per (env, Δt)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.2 * len(rows) + 3, 4))
    labels = [f"{r[0]}\nΔt={r[1]:g}" for r in rows]
    bottom = np.zeros(len(rows))
    for i, part in enumerate(PARTS):
        share = np.array([r[3 + i] for r in rows])
        ax.bar(labels, share, bottom=bottom, label=part.replace("_", " "))
        bottom += share
    ax.axhline(1.0, color="k", lw=0.5)
    ax.set_ylabel("share of actuator work")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
