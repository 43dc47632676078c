"""Analytic contact checks of the penalty ground contact, on Spider-v5's contact model and physics step.

    pbad-bench contact [--dt 0.001] [--springs trapezoidal|implicit] [--friction-onset step|lagged]
        [--integrator pbad|bdf2] [--quick]

Each check runs a rigid body in the Simulator with the ground contact Spider-v5 uses (stiffness 2e4 N/m, normal
damping 135 N s/m, smoothed Coulomb friction μ = 1 capped by the step's applied normal force, from a contact's first
physics step, trapezoidal normal spring; ``--friction-onset lagged``: Spider-v4's; ``--springs implicit``: Spider-v3's;
``--integrator bdf2``: PBAD's BDF2 step, implicit springs) and compares with the closed-form answer:

- incline: a 2 kg box on a plane tilted by θ (gravity tilted instead of the ground) sticks for tan θ < μ and
  slides with acceleration g(sin θ − μ cos θ) above it; checked at tan θ = 0.97 μ and 1.03 μ (threshold) and at
  θ = 60° (acceleration, within 1 %);
- stopping distance: the box launched at v0 = 1 m/s stops after v0²/(2μg) (within 2 %);
- rebound: a ball dropped from 0.5 m rebounds to less than 15 % of the drop, at Δt and at Δt/10; and with the
  normal damping off, how much of the drop the undamped penalty returns (what the step itself dissipates:
  the trapezoidal spring returns nearly all of it, the implicit one loses a share at every bounce);
- resting drift: the box left on level ground drifts less than 0.1 mm in 10 s (``--quick``: 2 s);
- oblique landing: a ball that lands sliding (5 m/s along the ground, 1 m/s down) takes a friction impulse of μ
  times its normal impulse (Coulomb's law while it slides; within 1 %), at Δt and at Δt/10. A step that gives
  friction only to the spheres in contact at its start (Spider-v4) misses the landing step's share.

The friction cone along the walkers' rollouts is ``pbad-bench energy``'s cone column. Writes contact.csv and a
PNG of the incline's acceleration beside its closed form.
"""
from __future__ import annotations

import numpy as np

from .common import machine, out_dir, print_table, stamp, write_csv

G = 9.81
MU = 1.0
CONTACT = dict(stiffness=2e4, friction="coulomb", mu=MU, slip_velocity=0.01, normal_damping=135.0)
SPRINGS = "trapezoidal"  # Spider-v4's and v5's normal spring (Spider-v3: "implicit")
ONSET = "step"  # Spider-v5's friction onset (Spider-v3, v4: "lagged")


def add_arguments(p):
    from ..energies import FRICTION_ONSETS, SPRING_SCHEMES

    p.add_argument("--dt", type=float, default=0.001, help="physics step [s] (default 0.001, Spider-v4's)")
    p.add_argument("--springs", choices=SPRING_SCHEMES, default=None,
                   help=f"the normal spring's place in the step (default {SPRINGS}, Spider-v4's; implicit: v3's and "
                        "the only one of --integrator bdf2)")
    p.add_argument("--friction-onset", choices=FRICTION_ONSETS, default=ONSET,
                   help=f"which spheres take friction in a step (default {ONSET}, Spider-v5's: also those that land "
                        "within it; lagged: Spider-v3's and v4's)")
    p.add_argument("--integrator", choices=("pbad", "bdf2"), default="pbad",
                   help="the step: PBAD's order-2 step (default) or its BDF2 form (docs/physics.md §2.6)")
    p.add_argument("--quick", action="store_true", help="shorter runs (2 s of resting drift)")


def _box():
    from ..model import Body, Box, Joint, Link

    return Body([Link("box", -1, Joint("free"), shapes=[Box(half_size=(0.1, 0.1, 0.05), density=500.0)])])


def _ball():
    from ..model import Body, Joint, Link, Sphere

    return Body([Link("ball", -1, Joint("free"), shapes=[Sphere(radius=0.04, density=860.0)])])


def _contact(springs, onset, **over):
    """The checks' GroundContact options with normal ``springs`` and friction ``onset``."""
    return dict(CONTACT, springs=springs, friction_onset=onset, **over)


def _resting(dt, theta=0.0, springs=SPRINGS, settle=0.2, integrator="pbad", onset=ONSET):
    """(body, Simulator) of the box settled on ground tilted by ``theta`` [rad] about y, gravity tilted instead;
    ``integrator``: "pbad" or "bdf2" (the Simulator's)."""
    from ..simulator import Simulator

    body = _box()
    gravity = (G * np.sin(theta), 0.0, -G * np.cos(theta))
    sim = Simulator(body, dt=dt, gravity=gravity, contact=_contact(springs, onset), integrator=integrator)
    q = body.q0().copy()
    q[2] = 0.05
    sim.reset(q=q)
    for _ in range(int(round(settle / dt))):
        sim.step()
    return body, sim


def incline(dt, tan_ratio=None, theta=None, seconds=1.0, springs=SPRINGS, integrator="pbad", onset=ONSET):
    """Slide of the box on the incline (tan θ = tan_ratio·μ, or θ [rad]): (distance [m] over ``seconds`` after
    settling, mean acceleration along the slope over the last half [m/s²], g(sin θ − μ cos θ) clipped at 0)."""
    theta = np.arctan(tan_ratio * MU) if theta is None else theta
    # settles (0.2 s) on the slope itself: the fit below skips the first half
    body, sim = _resting(dt, theta, springs, integrator=integrator, onset=onset)
    x0 = float(sim.q[0, 0])
    n = int(round(seconds / dt))
    xs, vs = [], []
    for _ in range(n):
        sim.step()
        xs.append(float(sim.q[0, 0]))
        vs.append(float(sim.qd[0, 0]))
    half = n // 2
    accel = (vs[-1] - vs[half]) / ((n - 1 - half) * dt)
    return xs[-1] - x0, accel, max(0.0, G * (np.sin(theta) - MU * np.cos(theta)))


def stopping_distance(dt, v0=1.0, springs=SPRINGS, integrator="pbad", onset=ONSET):
    """(distance [m] until the box launched at v0 [m/s] on level ground stops, v0²/(2μg))."""
    body, sim = _resting(dt, springs=springs, integrator=integrator, onset=onset)
    qd = np.zeros(body.nv)
    qd[0] = v0
    x0 = float(sim.q[0, 0])
    sim.reset(q=sim.q, qd=qd)
    for _ in range(int(round(2 * v0 / (MU * G) / dt))):
        sim.step()
    return float(sim.q[0, 0]) - x0, v0 * v0 / (2 * MU * G)


def rebound(dt, drop=0.5, springs=SPRINGS, normal_damping=CONTACT["normal_damping"], integrator="pbad",
            onset=ONSET):
    """(highest rebound of the ball's bottom after its first impact [m], drop height [m]); ``normal_damping``
    [N s/m] 0: the undamped penalty, which only the step's own dissipation damps."""
    from ..simulator import Simulator

    body = _ball()
    sim = Simulator(body, dt=dt, contact=_contact(springs, onset, normal_damping=normal_damping),
                    integrator=integrator)
    q = body.q0().copy()
    q[2] = 0.04 + drop
    sim.reset(q=q)
    z, hit, best = [], False, 0.0
    for _ in range(int(round((np.sqrt(2 * drop / G) + 0.5) / dt))):
        sim.step()
        h = float(sim.q[0, 2]) - 0.04
        hit = hit or h < 0.0
        if hit:
            best = max(best, h)
        z.append(h)
    return best, drop


def resting_drift(dt, seconds=10.0, springs=SPRINGS, integrator="pbad", onset=ONSET):
    """Largest displacement [m] of the resting box over ``seconds``."""
    body, sim = _resting(dt, springs=springs, integrator=integrator, onset=onset)
    q0 = np.asarray(sim.q[0, :3]).copy()
    drift = 0.0
    for _ in range(int(round(seconds / dt))):
        sim.step()
        drift = max(drift, float(np.linalg.norm(np.asarray(sim.q[0, :3]) - q0)))
    return drift


def oblique_landing(dt, v_slide=5.0, v_down=1.0, seconds=0.02, springs=SPRINGS, integrator="pbad", onset=ONSET):
    """(friction impulse, μ × normal impulse) [N s per kg] of the ball released 1.37 mm above the ground (a height
    no step size here divides: the landing falls inside a step) at ``v_slide`` [m/s] along x and ``v_down`` [m/s]
    down, over ``seconds``: both from its momentum change, gravity's impulse taken out of the normal one. It slides
    throughout (μ·J_n < v_slide), so Coulomb's law makes the two equal."""
    from ..simulator import Simulator

    body = _ball()
    sim = Simulator(body, dt=dt, contact=_contact(springs, onset), integrator=integrator)
    q = body.q0().copy()
    q[2] = 0.04 + 0.00137
    qd = np.zeros(body.nv)
    qd[0], qd[2] = v_slide, -v_down
    sim.reset(q=q, qd=qd)
    n = int(round(seconds / dt))
    for _ in range(n):
        sim.step()
    v = np.asarray(sim.qd[0])
    return float(v_slide - v[0]), MU * float(v[2] + v_down + G * n * dt)


def run(args):
    from tqdm import tqdm

    out = out_dir(args.out, "contact")
    dt, integ = args.dt, args.integrator
    sp = args.springs or ("implicit" if integ == "bdf2" else SPRINGS)
    kw = dict(springs=sp, integrator=integ, onset=args.friction_onset)
    rows = []
    checks = [("incline tanθ = 0.97μ: slide [m] in 1 s", lambda: incline(dt, 0.97, **kw)[0], 0.0, "< 1e-4"),
              ("incline tanθ = 1.03μ: slide [m] in 1 s", lambda: incline(dt, 1.03, **kw)[0], None, "> 1e-3"),
              ("incline 60°: acceleration [m/s²]", lambda: incline(dt, theta=np.pi / 3, **kw)[1],
               G * (np.sin(np.pi / 3) - MU * np.cos(np.pi / 3)), "within 1 %"),
              ("stopping distance from 1 m/s [m]", lambda: stopping_distance(dt, **kw)[0], 1 / (2 * MU * G),
               "within 2 %"),
              (f"rebound from 0.5 m at Δt={dt:g} [m]", lambda: rebound(dt, **kw)[0], 0.0, "< 0.075"),
              (f"rebound from 0.5 m at Δt={dt / 10:g} [m]", lambda: rebound(dt / 10, **kw)[0], 0.0, "< 0.075"),
              (f"undamped penalty: rebound from 0.5 m at Δt={dt:g} [m]",
               lambda: rebound(dt, normal_damping=0.0, **kw)[0], 0.5, "elastic: the energy the step keeps"),
              (f"resting drift in {2 if args.quick else 10} s [m]",
               lambda: resting_drift(dt, 2.0 if args.quick else 10.0, **kw), 0.0, "< 1e-4"),
              *[(f"oblique landing at Δt={h:g}: friction / (μ × normal impulse)",
                 lambda h=h: np.divide(*oblique_landing(h, **kw)), 1.0, "within 1 %") for h in (dt, dt / 10)]]
    for name, fn, expected, goal in tqdm(checks, desc="contact checks"):
        rows.append([name, fn(), "" if expected is None else expected, goal])
    header = ["check", "measured", "closed form", "goal"]
    write_csv(out / "contact.csv", rows, header)
    print_table(rows, header, title=f"contact checks at dt={dt:g} s, {integ} step, {sp} springs, friction onset "
                                    f"{args.friction_onset}, {stamp()}, {machine()}")
    _plot(dt, out / "contact.png", sp, integ, args.friction_onset)
    print(f"wrote {out}/contact.csv, {out}/contact.png")
    return 0


def _plot(dt, path, springs, integrator="pbad", onset=ONSET):
    """Measured slope acceleration against g(sin θ − μ cos θ) over θ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thetas = np.deg2rad(np.arange(30, 76, 5))
    meas = [incline(dt, theta=t, seconds=0.6, springs=springs, integrator=integrator, onset=onset)[1] for t in thetas]
    fine = np.linspace(thetas[0], thetas[-1], 200)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(np.rad2deg(fine), np.maximum(0, G * (np.sin(fine) - MU * np.cos(fine))), "k-", label="g(sin θ − μ cos θ)")
    ax.plot(np.rad2deg(thetas), meas, "o", label=f"PBAD ({integrator}), Δt = {dt:g} s")
    ax.axvline(np.rad2deg(np.arctan(MU)), color="grey", lw=0.5)
    ax.set_xlabel("incline θ [deg]")
    ax.set_ylabel("acceleration along the slope [m/s²]")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
