"""What a compiled step leaves of the new state (issue 11): velocity, kinematics, contact memory and force — each
against its NumPy reference to 1e-10 (float64), the step's fused values equal to the separate compiled finish bit
for bit; the divergence guard's energy terms of that state by the kernel's code against the NumPy reference, and the
guard's decisions the same on both backends."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import mixed_body

import pbad_gym  # noqa: F401  (registers the ids)
from pbad_gym import Simulator
from pbad_gym.energies import contact_state, sphere_forces
from pbad_gym.envs.divergence import EnergyBudget, GuardModel, energy_terms, energy_terms_reference
from pbad_gym.integrators.state import order2_velocity
from pbad_gym.kernels.numba.contract import finish, step
from pbad_gym.kinematics import forward_kinematics
from pbad_gym.model import chain

TOL = dict(rtol=1e-10, atol=1e-10)
ENVS = {  # env id, kwargs, steps of random actions before the compared states
    "swimmer-v1": ("pbad_gym/Swimmer-v1", {}, 30),
    "spider-v1": ("pbad_gym/Spider-v1", {}, 20),
    "spider-v1-viscous": ("pbad_gym/Spider-v1", {"friction": "viscous"}, 20),
    "spider-v0": ("pbad_gym/Spider-v0", {}, 20),
}


def _env(env_id, kw, backend, B=4):
    return gym.make_vec(env_id, num_envs=B, vectorization_mode="vector_entry_point", backend=backend, **kw)


def _rollout(env, steps, seed=0):
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        env.step(rng.uniform(-1, 1, env.action_space.shape))
    return env


def _assert_terms_close(a, b):
    for name, x, y in zip(a._fields, a, b):
        np.testing.assert_allclose(np.asarray(x, float), np.asarray(y, float), err_msg=name, **TOL)


@pytest.mark.parametrize("case", list(ENVS))
def test_step_leaves_the_numpy_references_values(case):
    env_id, kw, steps = ENVS[case]
    env = _rollout(_env(env_id, kw, "numba"), steps)
    sim = env.sim
    model, old = sim.model, sim.state
    tau = np.zeros((sim.num_envs, sim.body.nv))
    tau[:, env.actuated] = np.random.default_rng(5).uniform(-1, 1, (sim.num_envs, len(env.actuated))) * env.gear
    new, _ = step(model, old, tau, sim.options)
    body = sim.body
    kin = forward_kinematics(body, new.q)
    for x, y in zip(new.kin, kin):
        np.testing.assert_allclose(x, y, **TOL)
    np.testing.assert_allclose(new.velocity, order2_velocity(model, new), **TOL)
    guard = GuardModel(body, sim.forces, sim.dt, env.actuated, env.gear, "numba")
    _assert_terms_close(energy_terms(guard, new.q, new.velocity),
                        energy_terms_reference(guard._replace(backend="numpy"), new.q, order2_velocity(model, new)))
    if sim.forces.contact is not None:
        ref = contact_state(body, kin, sim.forces.contact, sim.dt, prev=old.contact)
        for name, x, y in zip(ref._fields, new.contact, ref):
            np.testing.assert_allclose(np.asarray(x, float), np.asarray(y, float), err_msg=name, **TOL)
        np.testing.assert_allclose(new.force, sphere_forces(body, kin, sim.forces.contact, old.contact, sim.dt),
                                   **TOL)
    # the separate compiled finish (resets, restores) gives the step's values bit for bit
    again = finish(model, new._replace(kin=None, velocity=None))
    for x, y in zip(again.kin, new.kin):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(again.velocity, new.velocity)


def test_terms_of_every_joint_type_with_limits_and_some_actuators():
    """The tree driven into its limits (limit energy > 0), actuators on some of its DOFs; without actuators the
    actuation coefficient is 0 on both paths."""
    body = mixed_body(limited=True)
    kw = dict(num_envs=3, limit_stiffness=50.0, drag=(0.2, 1.0))
    sims = {b: Simulator(body, 0.01, backend=b, **kw) for b in ("numpy", "numba")}
    rng = np.random.default_rng(2)
    taus = 0.3 * rng.normal(size=(15, 3, body.nv))
    q0 = body.q0()
    q0[[11, 13]] = 0.35, 0.03  # the universal joint's first angle and the slide beyond their ranges
    act, gear = np.array([6, 8, 9, 11]), np.array([0.5, 0.2, 0.3, 0.4])
    guards = {k: GuardModel(body, s.forces, s.dt, act, gear, k) for k, s in sims.items()}
    for k, sim in sims.items():
        sim.reset(q0)
        none = guards[k]._replace(actuated=act[:0], gear=gear[:0])
        assert np.all(np.asarray(energy_terms(none, sim.q, sim.qd).actuation) == 0)
        for t in taus:
            sim.step(t)
    a, b = sims["numpy"], sims["numba"]
    np.testing.assert_allclose(a.q, b.q, rtol=0, atol=1e-10)
    ta, tb = energy_terms(guards["numpy"], a.q, a.qd), energy_terms(guards["numba"], b.q, b.qd)
    _assert_terms_close(ta, tb)
    assert np.all(tb.actuation > 0) and np.any(tb.limits > 0)


@pytest.mark.parametrize("case", list(ENVS))
def test_guard_measures_and_decisions_agree_between_backends(case):
    """The same states on both backends (the numba env's, copied into the numpy env): the guard's K, KE and c
    agree to 1e-10, and so do its budgets and decisions over further steps from identical states."""
    env_id, kw, steps = ENVS[case]
    nb = _rollout(_env(env_id, kw, "numba"), steps)
    npy = _rollout(_env(env_id, kw, "numpy"), 0)
    npy.sim.state = nb.sim.state._replace(kin=None, kin_prev=None, velocity=None)
    for x, y in zip(npy.energy_budget.measure(), nb.energy_budget.measure()):
        np.testing.assert_allclose(x, y, **TOL)
    # a kicked state far beyond what the actuators can supply: both flag exactly the same rows
    for env in (nb, npy):
        env.energy_budget.start(np.arange(env.num_envs))
    q, qd = nb._state_numpy()
    kick = np.zeros_like(qd)
    kick[1] = 50.0
    for env in (nb, npy):
        env.sim.reset(q, qd + kick)
    ex_nb, K_nb = nb.energy_budget.check()
    ex_np, K_np = npy.energy_budget.check()
    np.testing.assert_allclose(K_nb, K_np, **TOL)
    np.testing.assert_array_equal(ex_nb, ex_np)
    assert ex_nb[1] and not ex_nb[[0, 2, 3]].any()


def test_swimmer_guard_agrees_along_a_rollout():
    """Swimmer-v1 is not chaotic: 200 steps on both backends stay within 1e-10, and so do the guard's running
    budgets (K, s) and its decisions."""
    envs = [_env("pbad_gym/Swimmer-v1", {}, b, B=3) for b in ("numpy", "numba")]
    rng = np.random.default_rng(4)
    acts = rng.uniform(-1, 1, (200, 3, 3))
    for env in envs:
        env.reset(seed=4)
    for a in acts:
        outs = [env.step(a) for env in envs]
        np.testing.assert_array_equal(outs[0][4]["diverged"], outs[1][4]["diverged"])
        np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=0, atol=1e-5)  # float32 observations
    np.testing.assert_allclose(envs[0].sim.q, envs[1].sim.q, rtol=0, atol=1e-10)
    for name in ("K", "s"):
        np.testing.assert_allclose(getattr(envs[0].energy_budget, name), getattr(envs[1].energy_budget, name),
                                   **TOL)


def test_budget_validates_gear():
    sim = Simulator(chain(2), 0.01, num_envs=2)
    with pytest.raises(ValueError, match="gear"):
        EnergyBudget(sim, [0, 1], [1.0, np.nan])
    g = EnergyBudget(sim, np.array([0, 1]), 2.0)
    assert g.actuated.dtype == np.int64 and g.gear.tolist() == [2.0, 2.0]


def test_explicit_integrators_do_not_keep_stale_terms():
    sim = Simulator(chain(2), 0.01, integrator="rk4", num_envs=2)
    budget = EnergyBudget(sim, [0, 1], [1.0, 1.0])
    before = budget.terms()
    assert budget.terms() is before  # kept while the state is the same
    sim.step(np.ones((2, 2)))
    assert budget.terms() is not before
    assert not np.array_equal(budget.terms().kinetic, before.kinetic)
