"""Joint armature (rotor inertia): the step's joint-space inertia term, M in CRBA / RNEA, kinetic energy,
collocation, and agreement of PBAD with the explicit baselines."""
import dataclasses

import numpy as np
import pytest
from conftest import BODIES, collocation_fd_error, fd_gradient, fd_hessian, random_q, rel_err

from pbad_gym.dynamics import crba, energy, forward_dynamics, rnea
from pbad_gym.energies import actuation_terms, armature_terms, make_force_model
from pbad_gym.integrators.pbad import prepare_step, step_energy
from pbad_gym.kinematics import difference, integrate
from pbad_gym.model import Body, Joint, chain
from pbad_gym.simulator import Simulator

DT = 0.02
G = np.array([0.0, 0.0, -9.81])


def with_armature(body, armature):
    """The same body with ``armature`` on every joint (a scalar, or one value per link)."""
    arm = np.broadcast_to(np.asarray(armature, float), (body.L,))
    links = [dataclasses.replace(lk, joint=dataclasses.replace(lk.joint, armature=float(a)))
             for lk, a in zip(body.links, arm)]
    return Body(links, name=body.name)


def _states(body, seed, B=2):
    rng = np.random.default_rng(seed)
    qk = random_q(body, B, rng)
    qkm = integrate(body, qk, 0.05 * rng.standard_normal((B, body.nv)))
    q = integrate(body, qk, 0.1 * rng.standard_normal((B, body.nv)))
    return q, qk, qkm, rng.standard_normal((B, body.nv))


def test_joint_armature_is_validated():
    with pytest.raises(ValueError, match="armature"):
        Joint("hinge", armature=-1.0)
    with pytest.raises(ValueError, match="armature"):
        Joint("hinge", armature=float("nan"))


def test_armature_term_derivatives(body):
    body = with_armature(body, np.linspace(0.1, 0.5, body.L))
    q, qk, qkm, _ = _states(body, 0)
    q_pred = integrate(body, qk, difference(body, qkm, qk))
    a = body.armature
    t = armature_terms(body, q, q_pred, a, DT)
    value = lambda x: armature_terms(body, x, q_pred, a, DT, False).value  # noqa: E731
    np.testing.assert_allclose(t.value, value(q))
    assert rel_err(t.grad, fd_gradient(value, body, q)) < 1e-6
    assert rel_err(t.hess, fd_hessian(value, body, q)) < 1e-6


def test_armature_term_is_the_second_difference_on_hinges():
    body = with_armature(chain(3), 0.3)
    qkm, qk, q = np.array([[0.1, 0.0, -0.2]]), np.array([[0.15, 0.1, -0.1]]), np.array([[0.3, 0.1, 0.2]])
    data = prepare_step(body, qkm, qk, np.zeros((1, 3)), DT, G)
    plain = prepare_step(chain(3), qkm, qk, np.zeros((1, 3)), DT, G)
    extra = step_energy(body, q, data) - step_energy(chain(3), q, plain)
    expect = 0.3 / (2 * DT**2) * np.sum((q - 2 * qk + qkm) ** 2)
    assert extra[0] == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("hessian", ["exact", "gauss_newton"])
def test_step_energy_derivatives_with_armature(body, hessian):
    body = with_armature(body, 0.2)
    q, qk, qkm, tau = _states(body, 3)
    data = prepare_step(body, qkm, qk, tau, DT, G)
    E, g, H, D = step_energy(body, q, data, derivatives=True, hessian=hessian)
    value = lambda x: step_energy(body, x, data)  # noqa: E731
    assert rel_err(g, fd_gradient(value, body, q)) < 1e-6
    if hessian == "exact":
        assert rel_err(H, fd_hessian(value, body, q)) < 1e-6
    elif not len(body.quat_q):  # Gauss-Newton: the armature enters exactly as in M/Δt² (M from CRBA); on
        # quaternion joints its chart, centred on the prediction, bends it away from q_pred
        expect = crba(body, q) / DT**2 + actuation_terms(body, q, qk, tau).hess
        np.testing.assert_allclose(H, expect, rtol=1e-10, atol=1e-12 * np.abs(expect).max())
    np.testing.assert_allclose(D, np.diagonal(crba(body, q), axis1=1, axis2=2) / DT**2, rtol=1e-10)


def test_mass_matrix_inverse_dynamics_and_energy_carry_armature(body):
    arm = with_armature(body, 0.7)
    rng = np.random.default_rng(4)
    q = random_q(body, 3, rng)
    qd, tau = rng.standard_normal((3, body.nv)), rng.standard_normal((3, body.nv))
    np.testing.assert_allclose(crba(arm, q) - crba(body, q), np.broadcast_to(0.7 * np.eye(body.nv), (3, body.nv,
                                                                                                   body.nv)),
                               atol=1e-12)
    qdd = forward_dynamics(arm, q, qd, tau)
    np.testing.assert_allclose(rnea(arm, q, qd, qdd), tau, atol=1e-9)
    ke_arm, pe_arm = energy(arm, q, qd)
    ke, pe = energy(body, q, qd)
    np.testing.assert_allclose(ke_arm - ke, 0.5 * 0.7 * np.sum(qd * qd, -1), rtol=1e-10)
    np.testing.assert_allclose(pe_arm, pe)


def test_power_balance_with_armature(body):
    """dE/dt = q̇ᵀτ along the exact dynamics with armature in M, h and the kinetic energy."""
    body = with_armature(body, 0.4)
    rng = np.random.default_rng(2)
    q = random_q(body, 2, rng)
    qd, tau = rng.standard_normal((2, body.nv)), 0.01 * rng.standard_normal((2, body.nv))
    a = forward_dynamics(body, q, qd, tau)
    e = lambda qq, vv: sum(energy(body, qq, vv))  # noqa: E731

    def central(h):
        return (e(integrate(body, q, h * qd + 0.5 * h * h * a), qd + h * a)
                - e(integrate(body, q, -h * qd + 0.5 * h * h * a), qd - h * a)) / (2 * h)

    dE = (4 * central(1e-5) - central(2e-5)) / 3
    np.testing.assert_allclose(dE, np.sum(qd * tau, -1), rtol=1e-6, atol=1e-8)


def _run(body, integrator, dt, t_end=0.25, order=2):
    sim = Simulator(body, dt=dt, integrator=integrator, order=order, tol=1e-12)
    for _ in range(int(round(t_end / dt))):
        sim.step(np.full(body.nv, 2e-4))
    return sim.q[0].copy()


def test_pbad_and_collocation_agree_with_rk4_with_armature():
    # hinge links of 0.03 kg, 1e-4 kg m² about their joint: an armature of 2e-4 kg m² changes the motion a lot
    body, plain = with_armature(chain(3), 2e-4), chain(3)
    ref = _run(body, "rk4", 5e-4)
    effect = np.max(np.abs(ref - _run(plain, "rk4", 5e-4)))
    assert effect > 0.05
    assert np.max(np.abs(_run(body, "rk4", 1e-3) - ref)) < 1e-6
    err2 = np.max(np.abs(_run(body, "pbad", 1e-3) - ref))
    err3 = np.max(np.abs(_run(body, "pbad", 5e-3, order=3) - ref))
    assert err2 < 0.02 * effect and err3 < 0.02 * effect, (err2, err3, effect)
    # semi-implicit Euler reads the same M
    assert np.max(np.abs(_run(body, "semi_implicit_euler", 5e-4) - ref)) < 0.02 * effect


def test_pbad_with_armature_never_gains_energy():
    sim = Simulator(with_armature(chain(6), 5e-4), dt=0.05)
    e = [float(sum(sim.energy())[0])]
    for _ in range(100):
        sim.step()
        e.append(float(sum(sim.energy())[0]))
    assert np.all(np.isfinite(e)) and np.max(np.diff(e)) <= 1e-12


@pytest.mark.parametrize("K", [3, 4])
@pytest.mark.parametrize("name", ["free_ball", "mixed"])
def test_collocation_residual_jacobian_with_armature_and_damping(K, name):
    body = with_armature(BODIES[name](), 0.3)
    forces = make_force_model(body, damping=np.linspace(0.05, 0.3, body.nv))
    assert collocation_fd_error(body, forces, K, np.random.default_rng(K)) < 1e-6
