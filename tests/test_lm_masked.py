"""The masked Levenberg-Marquardt (the device default: converged rows frozen by ``where`` instead of dropped) gives
the compacted one's numbers bit for bit, and decides on the host once per iteration."""
import gymnasium
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (registers the environments)
from pbad_gym.integrators.pbad import pbad_step
from pbad_gym.kinematics import integrate
from pbad_gym.model import chain
from pbad_gym.optim import lm

from test_lm import G, _states


def _mixed_batch(dt=0.05):
    """A chain batch whose rows need different iteration counts (one at rest, one fast)."""
    body = chain(5)
    q_prev, q, tau = _states(body, 6, 1, dt)
    q_prev[0] = q[0]
    q_prev[1] = integrate(body, q[1:2], -dt * 8.0 * np.ones((1, body.nv)))[0]
    return body, q_prev, q, tau


@pytest.fixture
def masked(monkeypatch):
    """Run every LM of the block masked, as on a device."""
    monkeypatch.setattr(lm, "_compacts", lambda xp: False)


def test_default_is_compacted_on_numpy_and_masked_elsewhere():
    assert lm._compacts(np)

    class FakeModule:
        __name__ = "cupy"

    assert not lm._compacts(FakeModule())


def test_masked_lm_reproduces_the_compacted_one_bit_for_bit(monkeypatch):
    body, q_prev, q, tau = _mixed_batch()
    ref_q, ref = pbad_step(body, q_prev, q, tau, 0.05, G, record_history=True)
    assert len(set(ref.iterations.tolist())) > 1
    monkeypatch.setattr(lm, "_compacts", lambda xp: False)
    new_q, new = pbad_step(body, q_prev, q, tau, 0.05, G, record_history=True)
    np.testing.assert_array_equal(new_q, ref_q)
    for field in ("iterations", "grad_norm", "converged", "energy"):
        np.testing.assert_array_equal(getattr(new, field), getattr(ref, field))
    np.testing.assert_array_equal(np.array(new.energy_history), np.array(ref.energy_history))


def test_masked_lm_decides_on_the_host_once_per_iteration(masked, monkeypatch):
    body, q_prev, q, tau = _mixed_batch()
    decisions, gathers = [], []
    real_nonzero = np.nonzero
    monkeypatch.setattr(lm, "host_bool", lambda a, site="": decisions.append(site) or bool(a))
    monkeypatch.setattr(lm, "host_int", lambda a, site="": decisions.append(site) or int(a))
    monkeypatch.setattr(np, "nonzero", lambda a: gathers.append(1) or real_nonzero(a))
    _, res = pbad_step(body, q_prev, q, tau, 0.05, G)
    per_iteration = [d for d in decisions if d == "lm: any trajectory not converged"]
    assert 0 < len(per_iteration) <= int(res.iterations.max()) + 1
    # the others only where a rejected step is shortened (μ grown, solves only), which replaces energy evaluations
    assert set(decisions) - set(per_iteration) <= {"lm: a rejected step to shorten"}
    assert not gathers  # no index gathers: nothing with a data-dependent shape


@pytest.mark.parametrize("env_id", ["pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1"])
def test_envs_step_the_same_with_the_masked_lm(env_id, monkeypatch):
    """A random-action rollout on the NumPy backend (Spider-v1: contact, Coulomb friction, armature) is
    identical with both LMs, observations, rewards and iteration counts."""
    rng = np.random.default_rng(0)

    def rollout():
        env = gymnasium.make_vec(env_id, num_envs=3, vectorization_mode="vector_entry_point", backend="numpy")
        env.reset(seed=2)
        out = []
        for a in rng.uniform(-1, 1, (8,) + env.action_space.shape):
            obs, rew, _, _, info = env.step(a)
            out.append((obs, rew, info["iterations"]))
        return out

    state = rng.bit_generator.state
    ref = rollout()
    rng.bit_generator.state = state
    monkeypatch.setattr(lm, "_compacts", lambda xp: False)
    for (o1, r1, i1), (o2, r2, i2) in zip(ref, rollout()):
        np.testing.assert_array_equal(o2, o1)
        np.testing.assert_array_equal(r2, r1)
        np.testing.assert_array_equal(i2, i1)


@pytest.mark.parametrize("kwargs", [dict(order=3), dict(order=2, hessian="gauss_newton")], ids=["collocation", "gn"])
def test_simulator_steps_the_same_with_the_masked_lm(kwargs, monkeypatch):
    """Collocation (LM on a square-root factor, solved by QR) and the Gauss-Newton Hessian, masked vs compacted."""
    from pbad_gym import Simulator

    rng = np.random.default_rng(3)
    body = chain(4)
    q0 = integrate(body, np.tile(body.q0(), (5, 1)), rng.uniform(-0.5, 0.5, (5, body.nv)))
    taus = rng.standard_normal((6, 5, body.nv))

    def run():
        sim = Simulator(body, dt=0.02, num_envs=5, backend="numpy", **kwargs)
        sim.reset(q=q0)
        out = []
        for tau in taus:
            info = sim.step(tau)
            out.append((np.array(sim.q), np.array(info["iterations"])))
        return out

    ref = run()
    monkeypatch.setattr(lm, "_compacts", lambda xp: False)
    for (q1, i1), (q2, i2) in zip(ref, run()):
        np.testing.assert_array_equal(q2, q1)
        np.testing.assert_array_equal(i2, i1)
