"""Position-based collocation (order 3, 4): residual Jacobians by finite differences, convergence order."""
import numpy as np
import pytest
from conftest import BODIES, collocation_fd_error

from pbad_gym.bench.order import final_q
from pbad_gym.energies import make_force_model
from pbad_gym.integrators.collocation import basis_derivatives, collocation_nodes
from pbad_gym.model import Body, Joint, Link, Sphere, chain
from pbad_gym.simulator import Simulator


def test_nodes_are_legendre_roots_and_basis_is_exact_on_polynomials():
    np.testing.assert_allclose(collocation_nodes(3), [-0.5, 0, 0.5, 1])
    a = (1 - 1 / np.sqrt(3)) / 2
    np.testing.assert_allclose(collocation_nodes(4), [-a, 0, a, 1 - a, 1])
    for K in (3, 4):
        t = collocation_nodes(K)
        W1, W2 = basis_derivatives(t, t[2:])
        p = np.polynomial.Polynomial(np.arange(1.0, K + 2))  # degree K
        np.testing.assert_allclose(W1 @ p(t), p.deriv(1)(t[2:]), rtol=1e-10)
        np.testing.assert_allclose(W2 @ p(t), p.deriv(2)(t[2:]), rtol=1e-10)


@pytest.mark.parametrize("K", [3, 4])
@pytest.mark.parametrize("name", ["hinge", "free_ball", "mixed"])
def test_residual_jacobian_gravity_actuation_drag(K, name):
    body = BODIES[name]()
    rng = np.random.default_rng(K)
    assert collocation_fd_error(body, make_force_model(body), K, rng) < 1e-6
    drag = rng.uniform(0.5, 3.0, (body.L, 3))
    assert collocation_fd_error(body, make_force_model(body, drag=drag), K, rng) < 1e-6


@pytest.mark.parametrize("friction", ["viscous", "coulomb", "none"])
def test_residual_jacobian_contact(friction):
    body = chain(3, floating=True, link_length=0.2, radius=0.05)
    forces = make_force_model(body, contact=dict(stiffness=500.0, friction=friction, damping=3.0, mu=0.8,
                                                 slip_velocity=0.5))
    assert collocation_fd_error(body, forces, 3, np.random.default_rng(7), low=True) < 1e-6


def test_residual_jacobian_limits_and_damping():
    sh = [Sphere(radius=0.05, pos=(0.1, 0, 0))]
    body = Body([Link("a", -1, Joint("hinge", axis=(0, 1, 0), range=(-0.2, 0.1), damping=0.3), shapes=sh),
                 Link("b", 0, Joint("universal", range=((-0.1, -0.2), (0.1, 0.3)), damping=0.2),
                      placement=(np.eye(3), (0.2, 0, 0)), shapes=sh)])
    forces = make_force_model(body, limit_stiffness=20.0)
    assert collocation_fd_error(body, forces, 3, np.random.default_rng(8)) < 1e-6


@pytest.mark.parametrize("K", [3, 4])
def test_residual_jacobian_damping_on_quaternion_joints(K):
    body = chain(3, floating=True, joint="ball")
    forces = make_force_model(body, damping=np.linspace(0.05, 0.3, body.nv))
    assert collocation_fd_error(body, forces, K, np.random.default_rng(10)) < 1e-6


def _final_q(dt, order):
    return final_q(order, dt, t_end=0.25, tol=1e-12)  # the convergence benchmark's run (order 0: RK4)


def test_order_three_converges_faster_than_order_two():
    ref = _final_q(1e-4, 0)
    dts = np.array([0.01, 0.005, 0.0025])
    orders = {}
    for K in (2, 3):
        errs = np.array([np.max(np.abs(_final_q(dt, K) - ref)) for dt in dts])
        orders[K] = np.log2(errs[:-1] / errs[1:])
    assert np.all(orders[3] > 1.8) and np.all(orders[2] < 1.2), orders


def test_collocation_conserves_energy_better_than_order_two():
    drift = {}
    for K in (2, 3):
        sim = Simulator(chain(10), dt=0.005, order=K)
        e = [sum(sim.energy())[0]]
        for _ in range(100):
            sim.step()
            e.append(sum(sim.energy())[0])
        drift[K] = np.max(np.abs(np.array(e) - e[0]))
    assert drift[3] < 0.25 * drift[2]


def test_collocation_with_drag_and_contact_runs_and_converges():
    body = chain(3, floating=True, link_length=0.2, radius=0.05)
    q = body.q0().copy()
    q[2] = 0.1
    sim = Simulator(body, dt=0.01, order=3, contact=dict(stiffness=2e3, friction="viscous", damping=5.0),
                    drag=(0.1, 1.0), num_envs=2)
    sim.reset(q=q)
    for _ in range(60):
        info = sim.step()
        assert info["converged"].all()
    assert np.all(np.isfinite(sim.q)) and sim.q[0, 2] < 0.07  # fell onto the ground and rests there
