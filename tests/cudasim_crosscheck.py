"""Rollouts of the fused GPU kernel (backend="cuda") under numba's CUDA simulator beside the compiled CPU kernel
(backend="numba"), for tests/test_cuda_kernel.py.

Run as a script, in a process whose environment sets NUMBA_ENABLE_CUDASIM=1 before numba is imported:
``python tests/cudasim_crosscheck.py CASE ...``. Prints one JSON line per case: the largest differences between
the two backends over the rollout (q after every step, the velocity, energy terms, kinematics and contact forces
after the last one, observations and rewards for the environments) and whether the LM iteration counts were equal on
every step.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def _diff(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)), initial=0.0))


def _terms(sim, act):
    """The divergence guard's energy terms of ``sim``'s state, by its backend's kernel (envs.divergence)."""
    from pbad_gym.envs.divergence import GuardModel, energy_terms

    model = GuardModel(sim.body, sim.forces, sim.dt, act, np.ones(act.size), sim.backend)
    return energy_terms(model, sim.q, sim.qd)


def _state_diffs(sims, act=None):
    """Largest differences of what the environments read (velocity, the guard's energy terms of the actuators on
    DOFs ``act`` (None: the last nv − 3), kinematics, force)."""
    a, b = sims
    act = np.arange(min(a.body.nv, 3), a.body.nv) if act is None else act
    out = {"qd": _diff(a.qd, b.qd),
           "terms": max(_diff(x, y) for x, y in zip(_terms(a, act), _terms(b, act))),
           "kin": max(_diff(x, y) for x, y in zip(a.kinematics(), b.kinematics()))}
    if a.contact_forces is not None:
        out["force"] = _diff(a.contact_forces, b.contact_forces)
    return out


def _sim_case(body, steps, B, scale, dtype=np.float64, reset_at=None, seed=0, **kw):
    from pbad_gym.simulator import Simulator

    sims = [Simulator(body, num_envs=B, backend=be, dtype=dtype, **kw) for be in ("numba", "cuda")]
    assert [s.backend for s in sims] == ["numba", "cuda"], [s.backend for s in sims]
    rng = np.random.default_rng(seed)
    if not body.links[0].joint.type == "free":
        q0 = rng.uniform(-0.3, 0.3, (B, body.nq))
        for s in sims:
            s.reset(q=q0)
    dq, same_iters, finish = 0.0, True, None
    for k in range(steps):
        tau = scale * rng.standard_normal((B, body.nv))
        infos = [s.step(tau) for s in sims]
        dq = max(dq, _diff(sims[0].q, sims[1].q))
        same_iters &= bool(np.array_equal(infos[0]["iterations"], infos[1]["iterations"]))
        if k == reset_at:  # rows reset mid-rollout: the finish kernel fills their caches
            qr = sims[0].q[:1] + 0.01
            for s in sims:
                s.reset(q=qr, rows=[0])
            finish = _state_diffs(sims)
    out = {"dq": dq, "same_iterations": same_iters, **_state_diffs(sims)}
    if kw.get("newton_memory"):  # rows whose memory holds a factor at the end, in each backend
        out["memory_rows"] = [int(np.asarray(s.state.newton.valid).sum()) for s in sims]
    if finish is not None:
        out["finish"] = max(finish.values())
    return out


def _env_case(env_id, steps, n=2, dtype=np.float64, seed=0, **kwargs):
    import gymnasium

    import pbad_gym  # noqa: F401

    envs = [gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", backend=be, dtype=dtype,
                               **kwargs) for be in ("numba", "cuda")]
    assert [e.unwrapped.sim.backend for e in envs] == ["numba", "cuda"]
    for e in envs:
        e.reset(seed=seed)
    rng = np.random.default_rng(seed)
    dq = dobs = drew = 0.0
    same_iters = True
    for _ in range(steps):
        a = rng.uniform(-1, 1, envs[0].action_space.shape).astype(np.float32)
        (o0, r0, *_, i0), (o1, r1, *_, i1) = (e.step(a) for e in envs)
        dq = max(dq, _diff(envs[0].unwrapped.sim.q, envs[1].unwrapped.sim.q))
        dobs, drew = max(dobs, _diff(o0, o1)), max(drew, _diff(r0, r1))
        same_iters &= bool(np.array_equal(i0["iterations"], i1["iterations"]))
    out = {"dq": dq, "obs": dobs, "reward": drew, "same_iterations": same_iters,
           **_state_diffs([e.unwrapped.sim for e in envs], envs[0].unwrapped.actuated)}
    for e in envs:
        e.close()
    return out


def run(case):
    from conftest import mixed_body

    from pbad_gym.model import chain

    if case == "chain":
        return _sim_case(chain(4), 20, 3, 0.01, dt=0.01, reset_at=9)
    if case == "chain_memory":  # the Newton memory (second-order warm start, chord steps), a row reset mid-way
        return _sim_case(chain(4), 30, 3, 0.01, dt=0.001, tol=1e-7, newton_memory=True, reset_at=14)
    if case == "chain_float32":
        return _sim_case(chain(4), 10, 3, 0.01, dtype=np.float32, dt=0.01)
    if case == "tree":  # every joint type, drag, limits, armature, damping, viscous contact
        return _sim_case(mixed_body(limited=True), 20, 3, 0.02, dt=0.01, drag=(0.2, 1.0), limit_stiffness=50.0,
                         contact=dict(stiffness=1e3, friction="viscous", damping=10.0), reset_at=9)
    if case == "free_ball":  # ball joints, Coulomb contact, Gauss-Newton Hessian
        return _sim_case(chain(3, floating=True, joint="ball"), 20, 2, 0.2, dt=0.01, damping=0.05,
                         contact=dict(stiffness=1e3, friction="coulomb", mu=0.8), hessian="gauss_newton")
    if case == "swimmer":
        return _env_case("pbad_gym/Swimmer-v1", 20)
    if case == "spider":
        return _env_case("pbad_gym/Spider-v1", 15)
    if case == "spider_v2":  # clamped Kelvin-Voigt damping of contact and limits, frame_skip 5 (20 physics steps)
        return _env_case("pbad_gym/Spider-v2", 4)
    if case == "spider_v4":  # trapezoidal penalty springs, the cone's fixed point; 0.005 s, where the shifts reach out
        return _env_case("pbad_gym/Spider-v4", 4, dt=0.005, frame_skip=4)
    if case == "spider_v5":  # friction from a contact's first step: the reset's drop lands within the 0.2 s
        return _env_case("pbad_gym/Spider-v5", 10, dt=0.005, frame_skip=4)
    if case == "spider_float32":
        return _env_case("pbad_gym/Spider-v1", 5, dtype=np.float32)
    raise KeyError(case)


CASES = ("chain", "chain_memory", "chain_float32", "tree", "free_ball", "swimmer", "spider", "spider_v2",
         "spider_v4", "spider_v5", "spider_float32")

if __name__ == "__main__":
    from numba.core import config

    if not config.ENABLE_CUDASIM:
        sys.exit("set NUMBA_ENABLE_CUDASIM=1 in the environment (before numba is imported)")
    for name in sys.argv[1:] or CASES:
        t0 = time.perf_counter()
        result = run(name)
        print(json.dumps({"case": name, "seconds": round(time.perf_counter() - t0, 2), **result}), flush=True)
