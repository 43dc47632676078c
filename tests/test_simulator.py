import numpy as np
import pytest

from pbad_gym.kinematics import integrate
from pbad_gym.model import chain
from pbad_gym.simulator import Simulator


def test_defaults_and_shapes():
    sim = Simulator(chain(4), dt=0.01, num_envs=3)
    assert sim.q.shape == (3, 4) and sim.qd.shape == (3, 4) and sim.time == 0.0
    info = sim.step()
    assert set(info) == {"iterations", "grad_norm", "converged"} and info["converged"].shape == (3,)
    assert sim.time == pytest.approx(0.01)
    assert np.all(sim.q[:, 0] < 0) or np.all(sim.q[:, 0] > 0)  # the chain starts to fall


@pytest.mark.parametrize("integrator", ["pbad", "euler", "semi_implicit_euler", "rk4"])
def test_reset_sets_the_velocity(integrator):
    b = chain(3, floating=True)
    sim = Simulator(b, dt=0.01, integrator=integrator, num_envs=2, gravity=(0, 0, 0))
    qd = np.random.default_rng(0).standard_normal((2, b.nv)) * 0.1
    sim.reset(qd=qd)
    np.testing.assert_allclose(sim.qd, qd, atol=1e-12)


def test_batch_rows_are_independent():
    b = chain(4)
    rng = np.random.default_rng(1)
    q = integrate(b, np.zeros((3, 4)), rng.standard_normal((3, 4)))
    tau = rng.standard_normal((3, 4)) * 1e-3
    sim = Simulator(b, dt=0.02, num_envs=3).reset(q=q)
    for _ in range(10):
        sim.step(tau)
    one = Simulator(b, dt=0.02, num_envs=1).reset(q=q[1:2])
    for _ in range(10):
        one.step(tau[1:2])
    np.testing.assert_allclose(one.q[0], sim.q[1], atol=1e-13)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dt=0.0), "dt"),
    (dict(dt=0.01, integrator="verlet"), "integrator"),
    (dict(dt=0.01, optimizer="newton"), "optimizer"),
    (dict(dt=0.01, num_envs=0), "num_envs"),
    (dict(dt=0.01, dtype=np.int32), "dtype"),
    (dict(dt=0.01, device="tpu"), "device"),
    (dict(dt=0.01, hessian="bfgs"), "hessian"),
])
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Simulator(chain(2), **kwargs)


def test_bad_state_and_torque_raise():
    sim = Simulator(chain(2), dt=0.01, num_envs=2)
    with pytest.raises(ValueError, match="q must have shape"):
        sim.reset(q=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        sim.reset(qd=np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="tau must have shape"):
        sim.step(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        sim.step(np.array([np.inf, 0.0]))


def test_float32_simulation():
    sim = Simulator(chain(5), dt=0.01, num_envs=4, dtype=np.float32)
    for _ in range(20):
        info = sim.step()
    assert sim.q.dtype == np.float32 and np.all(np.isfinite(sim.q)) and info["converged"].all()


@pytest.mark.parametrize("kw", [dict(), dict(order=3), dict(integrator="rk4"),
                                dict(contact=dict(friction="coulomb", mu=0.5), floating=True),
                                dict(contact_model="impulse", contact=dict(mu=0.5), floating=True)])
def test_row_reset_leaves_other_rows_bit_for_bit(kw):
    kw = dict(kw)
    body = chain(3, floating=kw.pop("floating", False))
    rng = np.random.default_rng(4)
    q0 = np.tile(body.q0(), (3, 1))
    if body.links[0].joint.type == "free":
        q0[:, 2] = 0.005
    qd0 = 0.1 * rng.standard_normal((3, body.nv))
    tau = 1e-3 * rng.standard_normal((3, body.nv))

    def run(reset_row):
        sim = Simulator(body, dt=0.01, num_envs=3, **kw).reset(q=q0, qd=qd0)
        for k in range(12):
            if k == 5 and reset_row:
                sim.reset(q=q0[1], qd=np.zeros(body.nv), rows=np.array([False, True, False]))
            sim.step(tau)
        return sim

    a, b = run(False), run(True)
    for r in (0, 2):
        np.testing.assert_array_equal(a.q[r], b.q[r])
        np.testing.assert_array_equal(a.qd[r], b.qd[r])
    assert not np.array_equal(a.q[1], b.q[1])


def test_snapshot_and_restore_rows():
    body = chain(4)
    sim = Simulator(body, dt=0.02, num_envs=3, order=3)
    for _ in range(3):
        sim.step()
    snap = sim.snapshot()
    q_before, qd_before = sim.q.copy(), sim.qd.copy()
    for _ in range(4):
        sim.step()
    sim.restore(snap, rows=[0, 2])
    np.testing.assert_array_equal(sim.q[[0, 2]], q_before[[0, 2]])
    np.testing.assert_array_equal(sim.qd[[0, 2]], qd_before[[0, 2]])
    assert not np.array_equal(sim.q[1], q_before[1])
    sim.restore(snap)
    np.testing.assert_array_equal(sim.q, q_before)
    with pytest.raises(ValueError, match="rows"):
        sim.reset(rows=np.array([True, False]))


def test_row_reset_keeps_the_other_rows_caches_and_fills_its_own():
    """On the compiled backend a row reset computes the reset rows' caches (kinematics, velocity) alone and keeps
    the others': the merged caches equal a recomputation of every row, bit for bit."""
    import gymnasium

    import pbad_gym  # noqa: F401

    env = gymnasium.make_vec("pbad_gym/Spider-v2", num_envs=4, vectorization_mode="vector_entry_point",
                             backend="numba")
    env.reset(seed=0)
    for a in np.random.default_rng(0).uniform(-1, 1, (3, 4, 8)):
        env.step(a)
    sim = env.unwrapped.sim
    before = sim.qd
    q = sim.body.q0()
    q[2] += 0.3
    sim.reset(q=q, rows=np.array([False, True, False, False]))
    merged = sim.state
    assert merged.kin is not None and merged.velocity is not None
    np.testing.assert_array_equal(merged.velocity[[0, 2, 3]], before[[0, 2, 3]])
    sim.state = merged._replace(kin=None, velocity=None)
    sim.qd  # recomputes every row's caches
    for a, b in zip(merged.kin, sim.state.kin):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(merged.velocity, sim.state.velocity)
