"""Trapezoidal penalty springs (energies/penalty.py, Spider-v4): the force they apply, the energy they keep, the
same numbers in the NumPy engine and the kernel, and the places that refuse them."""
import dataclasses

import gymnasium
import numpy as np
import pytest

import pbad_gym  # noqa: F401
from pbad_gym.bench import contact as checks
from pbad_gym.energies import GroundContact, make_force_model, sphere_centres
from pbad_gym.energies.contact import normal_point_terms, normal_shift, penetration
from pbad_gym.energies.joints import limit_terms
from pbad_gym.integrators.adjoint import check_differentiable
from pbad_gym.kinematics import forward_kinematics
from pbad_gym.model import Body, Capsule, Joint, Link
from pbad_gym.simulator import Simulator

pytestmark = pytest.mark.filterwarnings("ignore:.*out of date:DeprecationWarning")


def _rotor(inertia_length=0.3):
    """One capsule on a hinge about z through the origin, with a range of ±0.2 rad (gravity does no work)."""
    shape = Capsule.fromto((0.0, 0.0, 0.0), (inertia_length, 0.0, 0.0), 0.02, 1000.0)
    return Body([Link("arm", -1, Joint("hinge", axis=(0.0, 0.0, 1.0), range=(-0.2, 0.2)), shapes=[shape])])


def test_limit_force_is_the_newmark_average_of_the_spring_plus_the_damper():
    body = _rotor()
    k, c, dt = 40.0, 0.3, 0.002
    q_back, q_k, q = np.array([[0.201]]), np.array([[0.204]]), np.array([[0.2065]])
    q_pred = 2 * q_k - q_back
    terms = limit_terms(body, q, k, True, q_k, c, dt, q_pred, "trapezoidal")
    p, p_k, p_b = q[0, 0] - 0.2, q_k[0, 0] - 0.2, q_back[0, 0] - 0.2
    expected = k * (p / 4 + p_k / 2 + p_b / 4) + c * (p - p_k) / dt
    assert terms.grad[0, 0] == pytest.approx(expected, rel=1e-12)
    # a joint leaving its limit fast: the force is clamped at zero (the limit never pulls)
    assert limit_terms(body, np.array([[0.1]]), k, True, q_k, c, dt, q_pred, "trapezoidal").grad[0, 0] == 0.0


def test_normal_force_is_the_newmark_average_of_the_spring_plus_the_damper():
    body = checks._ball()
    params = GroundContact(stiffness=2e4, normal_damping=135.0, springs="trapezoidal")
    dt = 0.001
    z = lambda h: np.array([[[0.0, 0.0, h]]])  # noqa: E731  (centres, B = S = 1)
    P_back, P_k, P = z(0.0395), z(0.039), z(0.0388)
    shift = normal_shift(body, P_k, P_back, params, dt)
    _, g, _ = normal_point_terms(body, P, params, True, P_k, dt, shift)
    d, d_k, d_b = (penetration(body, x, 0.0)[0, 0] for x in (P, P_k, P_back))
    expected = 2e4 * (d / 4 + d_k / 2 + d_b / 4) + 135.0 * (d - d_k) / dt
    assert -g[0, 0, 2] == pytest.approx(expected, rel=1e-10)
    assert normal_shift(body, P_k, P_back, GroundContact(normal_damping=135.0), dt) is None  # implicit: its own


def test_at_rest_both_springs_push_with_k_times_the_depth():
    body = checks._ball()
    dt, P = 0.001, np.array([[[0.0, 0.0, 0.039]]])
    forces = []
    for springs in ("implicit", "trapezoidal"):
        params = GroundContact(stiffness=2e4, normal_damping=135.0, springs=springs)
        _, g, _ = normal_point_terms(body, P, params, True, P, dt, normal_shift(body, P, P, params, dt))
        forces.append(-g[0, 0, 2])
    np.testing.assert_allclose(forces, 2e4 * 0.001, rtol=1e-12)


def _limit_bounce(springs, dt):
    """|ω| after / before the rotor bounces off its undamped limit (stiffness 40 N m/rad, inertia 0.013 kg m²:
    the limit's angular frequency is 56 rad/s)."""
    body = _rotor()
    sim = Simulator(body, dt, gravity=(0.0, 0.0, 0.0), limit_stiffness=40.0, limit_springs=springs, backend="numpy")
    sim.reset(q=np.array([0.0]), qd=np.array([2.0]))
    for _ in range(int(round(0.5 / dt))):
        sim.step()
    return abs(float(sim.qd[0, 0])) / 2.0


def test_trapezoidal_limit_returns_an_elastic_bounce_where_the_implicit_step_loses_it():
    """An undamped limit is elastic in continuous time: the trapezoidal spring gives back the speed at a step
    where the implicit one keeps only part of it (the check can fail), and its error falls faster with Δt
    (measured: 1 − ratio = 0.14, 0.029, 0.0094, 0.0028 at 10, 5, 2, 1 ms; implicit 0.56, 0.83, 0.30, 0.16)."""
    assert _limit_bounce("trapezoidal", 0.002) > 0.98
    assert _limit_bounce("implicit", 0.002) < 0.8
    assert 1 - _limit_bounce("trapezoidal", 0.001) < 0.1 * (1 - _limit_bounce("implicit", 0.001))
    assert _limit_bounce("implicit", 0.0005) > 0.9  # the implicit step converges to it as Δt shrinks


def test_trapezoidal_ground_returns_an_undamped_bounce():
    """A ball dropped 0.5 m on the undamped penalty (Δt 1 ms, ωΔt ≈ 0.3): the trapezoidal spring returns nearly
    all the height, the implicit one under half; with Spider-v4's normal damping both stay below 15 %."""
    assert checks.rebound(0.001, springs="trapezoidal", normal_damping=0.0)[0] > 0.9 * 0.5
    assert checks.rebound(0.001, springs="implicit", normal_damping=0.0)[0] < 0.5 * 0.5
    assert checks.rebound(0.001, springs="trapezoidal")[0] < 0.15 * 0.5


def test_analytic_contact_checks_hold_with_implicit_springs():
    """Spider-v3's normal spring (tests/test_contact_physics.py runs the same checks on Spider-v4's)."""
    springs = "implicit"
    assert abs(checks.incline(0.001, 0.97, springs=springs)[0]) < 1e-4
    assert checks.incline(0.001, 1.03, springs=springs)[0] > 1e-3
    _, accel, expected = checks.incline(0.001, theta=np.pi / 3, springs=springs)
    assert accel == pytest.approx(expected, rel=0.01)
    dist, expected = checks.stopping_distance(0.001, springs=springs)
    assert dist == pytest.approx(expected, rel=0.02)
    assert checks.resting_drift(0.001, seconds=2.0, springs=springs) < 1e-4
    for dt in (0.001, 0.0001):
        assert 0.0 <= checks.rebound(dt, springs=springs)[0] < 0.15 * 0.5


@pytest.mark.parametrize("dt, frame_skip, env_steps", [(0.001, 50, 2), (0.01, 5, 15)])
def test_numpy_and_numba_agree_on_spider_v4(dt, frame_skip, env_steps):
    """Same iterations and the same states to 1e-10 over 100 physics steps of Spider-v4 (2 rows), and over 75
    at 0.01 s, where the trapezoidal shift lets the ground push spheres that are just above it (the kernel once
    skipped them as idle)."""
    pytest.importorskip("numba")
    out = []
    for backend in ("numpy", "numba"):
        env = gymnasium.make_vec("pbad_gym/Spider-v4", num_envs=2 if dt < 0.01 else 16, backend=backend,
                                 vectorization_mode="vector_entry_point", dt=dt, frame_skip=frame_skip)
        env.reset(seed=3 if dt < 0.01 else 0)
        rng = np.random.default_rng(0)
        its = []
        for _ in range(env_steps):
            _, _, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
            its.append(info["iterations"])
        out.append((np.asarray(env.sim.q).copy(), np.array(its), env.contact_forces().copy()))
    np.testing.assert_allclose(out[0][0], out[1][0], atol=1e-10)
    np.testing.assert_array_equal(out[0][1], out[1][1])
    np.testing.assert_allclose(out[0][2], out[1][2], atol=1e-6)


def test_spider_v4_is_spider_v3_with_trapezoidal_springs():
    v3 = gymnasium.make_vec("pbad_gym/Spider-v3", num_envs=1, vectorization_mode="vector_entry_point")
    v4 = gymnasium.make_vec("pbad_gym/Spider-v4", num_envs=1, vectorization_mode="vector_entry_point")
    f3, f4 = v3.sim.forces, v4.sim.forces
    assert (f3.limit_springs, f3.contact.springs) == ("implicit", "implicit")
    assert (f4.limit_springs, f4.contact.springs) == ("trapezoidal", "trapezoidal")
    assert dataclasses.replace(f4.contact, springs="implicit") == f3.contact
    assert v4.sim.dt == v3.sim.dt == 0.001 and v4.frame_skip == v3.frame_skip == 50
    back = gymnasium.make_vec("pbad_gym/Spider-v4", num_envs=1, vectorization_mode="vector_entry_point",
                              penalty_springs="implicit")
    assert back.sim.forces.limit_springs == "implicit"


def test_bad_springs_name_the_argument():
    with pytest.raises(ValueError, match="penalty_springs"):
        gymnasium.make("pbad_gym/Spider-v4", penalty_springs="midpoint")
    with pytest.raises(ValueError, match="contact springs"):
        GroundContact(springs="explicit")
    with pytest.raises(ValueError, match="limit_springs"):
        make_force_model(_rotor(), limit_stiffness=1.0, limit_springs=None)


def test_collocation_and_gradients_refuse_trapezoidal_springs():
    with pytest.raises(ValueError, match="limit_springs"):
        Simulator(_rotor(), 0.01, order=3, limit_stiffness=10.0, limit_springs="trapezoidal")
    env = gymnasium.make_vec("pbad_gym/Spider-v4", num_envs=1, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="springs='implicit'"):
        check_differentiable(env.body, env.sim.forces)
    check_differentiable(env.body, dataclasses.replace(  # v3's model is differentiable
        env.sim.forces, limit_springs="implicit", contact=dataclasses.replace(env.sim.forces.contact,
                                                                              springs="implicit")))


def test_first_step_after_a_reset_reads_the_reset_velocity():
    """After a reset q_{k−1} = q_0 ⊖ v_0Δt, so the trapezoidal shift of a resting body is that of rest: a box
    reset at its resting pose with zero velocity stays put on its first steps."""
    body, sim = checks._resting(0.001, springs="trapezoidal")
    q = np.asarray(sim.q).copy()
    P = sphere_centres(body, forward_kinematics(body, q))
    assert penetration(body, P, 0.0).max() > 0
    sim.reset(q=q[0])
    for _ in range(10):
        sim.step()
    assert np.abs(np.asarray(sim.q) - q).max() < 1e-7
