"""PBAD paper Figure 3c on the compiled kernel, beside MuJoCo: physics steps/s and LM iterations per step against
the size of the body.

Two families, each simulated by PBAD (numba kernel) at its own default Δt and at MuJoCo's, and by
``mujoco.rollout`` on the same body's MJCF at MuJoCo's Δt, batch for batch and thread for thread:

- hinge chains of N = 5 … 80 links (``pbad_gym.model.chain``: capsules 0.1 m × 0.01 m, no contact), released
  horizontally; PBAD's default Δt 0.01 s (the paper's), MuJoCo's 0.001 s with its ``implicitfast`` integrator
  (at 0.01 s it does not stay stable on these thin chains);
- Spider-like bodies of 4 … 32 legs: Spider-v4 (Ant-v5's body and contact in this engine) with its legs spread
  evenly around the torso (6 + 2·legs DOF, 1 + 3·legs contact spheres), under random actions held for 0.05 s; PBAD's
  default Δt 0.001 s (Spider-v4's converged step), MuJoCo's 0.01 s on Ant-v5's own XML with as many legs.

The engines and step sizes of one body take turns, one replay of the same stretch of motion each per round
(:func:`interleaved`), so that every ratio compares rates measured under the same load from the host's other
tenants.

Writes scaling_n.csv, ratios.csv (PBAD over MuJoCo per body) and scaling_n.png under ``--out``/scaling_n and
prints the tables.
"""
from __future__ import annotations

import copy
import itertools
import time
import xml.etree.ElementTree as ET

import numpy as np

from ..envs.base import DEFAULT_TOL
from ..kernels.numba.threads import LaunchChooser
from .common import machine, mujoco_available, out_dir, print_table, stamp, write_csv

CHAIN_NS = (5, 10, 20, 40, 80)
LEGS = (4, 8, 16, 32)
CHAIN_DTS = {"pbad": 0.01, "mujoco": 0.001}  # each engine's default step for the chains
LEGGED_DTS = {"pbad": 0.001, "mujoco": 0.01}  # Spider-v4's converged step; Ant-v5's XML
CONTROL_INTERVAL = 0.05  # [s] actions are held this long (Ant-v5's control interval); also the substeps per call
WARMUP_SIM = 0.25  # [s] simulated before the timed stretch (the legged bodies have dropped onto their feet)
MIN_WALL = 1.0  # [s] each engine and step replays its timed stretch for at least this long
TOL = DEFAULT_TOL[np.dtype(np.float64)]
HEADER = ["family", "size", "dof", "engine", "dt", "tol", "batch", "threads", "physics_steps_per_s",
          "sim_seconds_per_s", "lm_iterations_per_step", "converged"]


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="small bodies, short timings (smoke test)")
    p.add_argument("--sim-seconds", type=float, default=0.5,
                   help="simulated seconds timed per case, after 0.25 s of warm-up (default 0.5)")
    p.add_argument("--links", type=int, nargs="+", default=None, help=f"chain lengths (default {CHAIN_NS})")
    p.add_argument("--legs", type=int, nargs="+", default=None, help=f"leg counts (default {LEGS})")
    p.add_argument("--chain-batch", type=int, default=64, help="trajectories per chain case (default 64)")
    p.add_argument("--legged-batch", type=int, default=256, help="trajectories per legged case (default 256)")
    p.add_argument("--threads", type=int, default=2,
                   help="threads of both engines: numba's pool and mujoco.rollout's MjData (default 2)")
    p.add_argument("--tol", type=float, default=TOL,
                   help=f"PBAD's solver tolerance [rad], both families (default {TOL:g}: the environments')")
    p.add_argument("--no-mujoco", action="store_true", help="skip mujoco.rollout even if installed")
    p.add_argument("--no-newton-memory", dest="newton_memory", action="store_false",
                   help="PBAD without the solver's Newton memory (Simulator newton_memory=False; docs/physics.md "
                        "§2.5; it is on by default)")


def _vec(x):
    return " ".join(f"{float(v):.17g}" for v in x)


def chain_xml(n_links, dt, link_length=0.1, radius=0.01, density=1000.0):
    """MJCF of ``pbad_gym.model.chain(n_links)``: capsules along +x on hinges about y, the first fixed to the world,
    no contact, no joint damping; ``implicitfast`` at Δt ``dt`` [s]."""
    inner = ""
    for i in reversed(range(n_links)):
        pos = "0 0 0" if i == 0 else f"{link_length} 0 0"
        inner = (f'<body name="link{i}" pos="{pos}"><joint name="j{i}"/>'
                 f'<geom fromto="0 0 0 {link_length} 0 0"/>{inner}</body>')
    return (f'<mujoco model="chain{n_links}"><option timestep="{dt}" integrator="implicitfast"/>'
            f'<default><joint type="hinge" axis="0 1 0"/><geom type="capsule" size="{radius}" density="{density}" '
            f'contype="0" conaffinity="0"/></default><worldbody>{inner}</worldbody></mujoco>')


def _rotate_z(element, angle):
    """Rotate the pos, fromto and axis attributes of ``element``'s subtree by ``angle`` [rad] about z; rename every
    named element with a suffix so that copies stay distinct."""
    c, s = np.cos(angle), np.sin(angle)
    rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    for e in element.iter():
        for key in ("pos", "axis", "fromto"):
            if key in e.attrib:
                v = np.array(e.attrib[key].split(), dtype=float).reshape(-1, 3)
                e.attrib[key] = _vec((v @ rot.T).ravel())


def legged_xml(n_legs):
    """Gymnasium's Ant-v5 XML with ``n_legs`` copies of its front-left leg spread evenly around the torso from the
    front-left diagonal (4: Ant-v5's body up to the signs of its joint axes), each hip and ankle driven by a motor
    as Ant-v5's."""
    from pathlib import Path

    import gymnasium.envs.mujoco as gm

    root = ET.parse(Path(gm.__file__).parent / "assets" / "ant.xml").getroot()
    torso = root.find("worldbody/body[@name='torso']")
    legs = [b for b in torso.findall("body")]
    template = next(b for b in legs if b.get("name") == "front_left_leg")
    for b in legs:
        torso.remove(b)
    actuator = root.find("actuator")
    motor = dict(actuator[0].attrib)
    for m in list(actuator):
        actuator.remove(m)
    for k in range(n_legs):
        leg = copy.deepcopy(template)
        _rotate_z(leg, 2.0 * np.pi * k / n_legs)
        for e in leg.iter():
            if "name" in e.attrib:
                e.attrib["name"] += f"_{k}"
        torso.append(leg)
        for joint in ("hip_1", "ankle_1"):
            ET.SubElement(actuator, "motor", dict(motor, joint=f"{joint}_{k}"))
    return ET.tostring(root, encoding="unicode")


def _spider_env(n_legs, num_envs, dt, tol, newton_memory=True):
    """Spider-v4 with ``n_legs`` legs, physics step ``dt`` [s] and solver tolerance ``tol`` [rad] (and the Newton
    memory where asked for), reset (seed 0)."""
    from ..envs.spider import SpiderV4VectorEnv

    cls = type(f"SpiderV4With{n_legs}Legs", (SpiderV4VectorEnv,), {"n_legs": n_legs})
    env = cls(num_envs=num_envs, dt=dt, tol=tol, newton_memory=newton_memory)
    env.reset(seed=0)
    return env


def pbad_replay(sim, substeps, sim_seconds, torques=None):
    """One replay at a time of ``sim``: after WARMUP_SIM seconds of warm-up calls of ``substeps`` physics steps (at
    least five: :class:`LaunchChooser` tries the parallel launch twice, then the serial one twice, and each
    compiles or loads on its first use), a function that replays the next ``sim_seconds`` [s] from the same state
    (and the same torques) and returns (physics steps/s over the batch, mean LM iterations per physics step,
    fraction of converged steps). ``torques``: a function of a seed giving a function that draws each call's
    (B, nv) generalised force (None: none). The same stretch of motion on every replay, so iteration counts
    compare between runs and code versions."""
    def call(draw):
        return sim.step(None if draw is None else draw(), substeps=substeps)

    per_call = sim.dt * substeps
    warm = None if torques is None else torques(0)
    for _ in range(max(2 * (LaunchChooser.WARMUP + 1) + 1, int(round(WARMUP_SIM / per_call)))):
        call(warm)
    start, n = sim.snapshot(), max(1, int(round(sim_seconds / per_call)))

    def once():
        sim.restore(start)
        draw = None if torques is None else torques(1)
        its, ok, t0 = 0.0, 0.0, time.perf_counter()
        for _ in range(n):
            info = call(draw)
            its += float(np.mean(info["iterations"]))
            ok += float(np.mean(info["converged"]))
        return sim.num_envs * n * substeps / (time.perf_counter() - t0), its / (n * substeps), ok / n
    return once


def mujoco_replay(xml, batch, threads, sim_seconds, hold, seed=0):
    """One replay at a time of ``mujoco.rollout`` on the model ``xml``: WARMUP_SIM seconds from its initial state
    (untimed), then a function that replays ``sim_seconds`` [s] from where each trajectory got to and returns
    (physics steps/s over the batch, NaN, NaN), as :func:`pbad_replay`; random controls in the actuators' ranges
    held ``hold`` steps, ``threads`` MjData."""
    import mujoco
    from mujoco import rollout

    model = mujoco.MjModel.from_xml_string(xml)
    data = [mujoco.MjData(model) for _ in range(threads)]
    mujoco.mj_forward(model, data[0])
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data[0], state0, spec)
    rng = np.random.default_rng(seed)
    lo, hi = model.actuator_ctrlrange.T
    dt = model.opt.timestep

    def controls(nstep):
        ctrl = rng.uniform(lo, hi, (batch, -(-nstep // hold), model.nu)).repeat(hold, axis=1)[:, :nstep]
        return ctrl if model.nu else None

    warm = max(hold, int(round(WARMUP_SIM / dt)))
    init = rollout.rollout(model, data, np.tile(state0, (batch, 1)), controls(warm), nstep=warm)[0][:, -1]
    nstep = max(hold, int(round(sim_seconds / dt)))
    ctrl = controls(nstep)

    def once():
        t0 = time.perf_counter()
        rollout.rollout(model, data, init, ctrl, nstep=nstep)
        return batch * nstep / (time.perf_counter() - t0), float("nan"), float("nan")
    return once


def interleaved(replays, min_wall=MIN_WALL):
    """Run the ``replays`` (functions as :func:`pbad_replay` returns) in turns, one replay each per round, until
    each has run at least three times and for ``min_wall`` seconds in all: [(median rate, its, converged)] per
    replay (its and converged of its last replay: every replay runs the same motion). Taking turns puts every
    engine and step size under the same load from the host's other tenants, which moved back-to-back
    measurements by up to 25 %."""
    runs = [[] for _ in replays]
    walls = [0.0] * len(replays)
    while min(len(r) for r in runs) < 3 or min(walls) < min_wall:
        for k, once in enumerate(replays):
            t0 = time.perf_counter()
            runs[k].append(once())
            walls[k] += time.perf_counter() - t0
    return [(float(np.median([x[0] for x in r])), r[-1][1], r[-1][2]) for r in runs]


def _row(family, size, dof, engine, dt, tol, batch, threads, rate, iterations=float("nan"), converged=float("nan")):
    """One CSV row (HEADER): simulated seconds per wall second over the batch are rate × dt."""
    return (family, size, dof, engine, dt, tol, batch, threads, rate, rate * dt, iterations, converged)


def chain_cases(ns, batch, threads, sim_seconds, with_mujoco, tol=TOL, newton_memory=True, min_wall=MIN_WALL):
    """Rows of the chain family (see the module docstring)."""
    from ..model import chain
    from ..simulator import Simulator

    for n in ns:
        cases, replays = [], []
        for dt in (CHAIN_DTS["pbad"], CHAIN_DTS["mujoco"]):
            sim = Simulator(chain(n), dt=dt, num_envs=batch, backend="numba", tol=tol, newton_memory=newton_memory)
            cases.append(("pbad", dt, tol))
            replays.append(pbad_replay(sim, int(round(CONTROL_INTERVAL / dt)), sim_seconds))
        if with_mujoco:
            dt = CHAIN_DTS["mujoco"]
            cases.append(("mujoco implicitfast", dt, float("nan")))
            replays.append(mujoco_replay(chain_xml(n, dt), batch, threads, sim_seconds, hold=1))
        for (engine, dt, tol_), result in zip(cases, interleaved(replays, min_wall)):
            yield _row("chain", n, n, engine, dt, tol_, batch, threads, *result)


def _random_torques(env, seed):
    """A function of a seed giving a function that draws (B, nv) joint torques: the env's gears times U(−1, 1)
    on its actuated DOFs (the same sequence for the same seeds)."""
    def start(stretch):
        rng = np.random.default_rng((seed, stretch))

        def torques():
            tau = np.zeros((env.num_envs, env.body.nv))
            tau[:, env.actuated] = env.gear * rng.uniform(-1.0, 1.0, (env.num_envs, len(env.actuated)))
            return tau
        return torques
    return start


def legged_cases(legs, batch, threads, sim_seconds, with_mujoco, tol=TOL, seed=0, newton_memory=True,
                 min_wall=MIN_WALL):
    """Rows of the Spider-like family (see the module docstring)."""
    for n_legs in legs:
        dof = 6 + 2 * n_legs
        cases, replays, envs = [], [], []
        for dt in (LEGGED_DTS["pbad"], LEGGED_DTS["mujoco"]):
            env = _spider_env(n_legs, batch, dt, tol, newton_memory)
            envs.append(env)
            cases.append(("pbad", dt, tol))
            replays.append(pbad_replay(env.sim, env.frame_skip, sim_seconds, _random_torques(env, seed)))
        if with_mujoco:
            dt = LEGGED_DTS["mujoco"]
            cases.append(("mujoco rk4 (Ant-v5 XML)", dt, float("nan")))
            replays.append(mujoco_replay(legged_xml(n_legs), batch, threads, sim_seconds,
                                         hold=int(round(CONTROL_INTERVAL / dt))))
        for (engine, dt, tol_), result in zip(cases, interleaved(replays, min_wall)):
            yield _row("legged", n_legs, dof, engine, dt, tol_, batch, threads, *result)
        for env in envs:
            env.close()


def _label(engine, dt):
    return f"{engine.split(' (')[0]}, Δt {dt:g} s"


def plot(rows, path):
    """Steps/s and LM iterations per step against body size, one column per family; one colour per engine and
    step throughout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    series = sorted({(r[3], r[4]) for r in rows}, key=lambda k: (k[0].startswith("mujoco"), k[0], -k[1]))
    colour = {key: f"C{k}" for k, key in enumerate(series)}
    fig, ax = plt.subplots(2, 2, figsize=(11, 8), sharex="col")
    for col, (family, xlabel) in enumerate((("chain", "links N (= DOF)"), ("legged", "DOF (6 + 2·legs)"))):
        mine = [r for r in rows if r[0] == family]
        for key in series:
            rs = [r for r in mine if (r[3], r[4]) == key]
            if not rs:
                continue
            style = dict(color=colour[key], marker="s" if key[0].startswith("mujoco") else "o",
                         ls="--" if key[0].startswith("mujoco") else "-", label=_label(*key))
            ax[0, col].plot([r[2] for r in rs], [r[8] for r in rs], **style)
            if not key[0].startswith("mujoco"):
                ax[1, col].plot([r[2] for r in rs], [r[10] for r in rs], **style)
        title = "hinge chains, no contact" if family == "chain" else "Spider-like bodies, ground contact"
        ax[0, col].set(xscale="log", yscale="log", ylabel="physics steps / s (whole batch)", title=title)
        ax[1, col].set(xscale="log", xlabel=xlabel, ylabel="LM iterations / physics step", ylim=(0, None))
        ax[1, col].set_xticks(sorted({r[2] for r in mine}))
        ax[1, col].xaxis.set_major_formatter(ScalarFormatter())
        ax[1, col].xaxis.set_minor_formatter(NullFormatter())
        for a in ax[:, col]:
            a.grid(True, which="both", alpha=0.3)
            if a.lines:
                a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


RATIO_HEADER = ["family", "size", "per step, both at MuJoCo's dt", "per step, each at its own dt",
                "sim-seconds, each at its own dt"]


def ratios(rows):
    """PBAD over MuJoCo per body that both engines ran (RATIO_HEADER): physics steps/s with PBAD at MuJoCo's Δt,
    physics steps/s and simulated seconds per second with PBAD at its own default Δt."""
    out = []
    for family, dts in (("chain", CHAIN_DTS), ("legged", LEGGED_DTS)):
        for size in sorted({r[1] for r in rows if r[0] == family}):
            rs = [r for r in rows if r[0] == family and r[1] == size]
            mj = [r for r in rs if r[3].startswith("mujoco")]
            same = [r for r in rs if r[3] == "pbad" and r[4] == dts["mujoco"]]
            own = [r for r in rs if r[3] == "pbad" and r[4] == dts["pbad"]]
            if mj and same and own:
                out.append((family, size, same[0][8] / mj[0][8], own[0][8] / mj[0][8], own[0][9] / mj[0][9]))
    return out


def run(args):
    from tqdm import tqdm

    if not args.sim_seconds > 0:
        raise ValueError(f"--sim-seconds must be positive, got {args.sim_seconds}")
    if not 0 < args.tol < 1:
        raise ValueError(f"--tol must be in (0, 1) rad, got {args.tol}")
    if args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")
    for name in ("chain_batch", "legged_batch"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    ns = args.links or ((5, 10) if args.quick else CHAIN_NS)
    legs = args.legs or ((4, 6) if args.quick else LEGS)
    seconds = 0.1 if args.quick else args.sim_seconds
    chain_batch, legged_batch = (8, 8) if args.quick else (args.chain_batch, args.legged_batch)
    with_mujoco = not args.no_mujoco and mujoco_available()
    out = out_dir(args.out, "scaling_n")
    print(f"pbad-bench scaling-n on {machine()}, {stamp()}; {args.threads} threads, {seconds} simulated s per case "
          f"after {WARMUP_SIM} s, "
          f"tol {args.tol:g} rad{'' if args.newton_memory else ', no Newton memory'}"
          f"{'' if with_mujoco else ' (MuJoCo not measured)'}")
    per_body = 2 + with_mujoco
    rows = []
    with tqdm(total=per_body * (len(ns) + len(legs)), desc="scaling-n", unit="case") as bar:
        mem = dict(newton_memory=args.newton_memory, min_wall=0.2 if args.quick else MIN_WALL)
        for row in itertools.chain(chain_cases(ns, chain_batch, args.threads, seconds, with_mujoco, args.tol, **mem),
                                   legged_cases(legs, legged_batch, args.threads, seconds, with_mujoco, args.tol,
                                                **mem)):
            rows.append(row)
            bar.update()
    write_csv(out / "scaling_n.csv", rows, HEADER)
    print_table(rows, HEADER, "physics steps/s and LM iterations per step against body size")
    if with_mujoco:
        table = ratios(rows)
        write_csv(out / "ratios.csv", table, RATIO_HEADER)
        print_table(table, RATIO_HEADER, "PBAD / mujoco.rollout")
    plot(rows, out / "scaling_n.png")
    print(f"wrote {out}/scaling_n.csv, ratios.csv and scaling_n.png")
    return 0
