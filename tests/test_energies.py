"""Finite-difference checks of every energy term and of the whole step energy (value ↔ gradient ↔ Hessian)."""
import dataclasses

import numpy as np
import pytest
from conftest import fd_gradient, fd_hessian, random_q, rel_err

from pbad_gym.energies import actuation_terms, gravity_terms, inertia_targets, inertia_terms
from pbad_gym.integrators.pbad import prepare_step, step_energy
from pbad_gym.dynamics import crba
from pbad_gym.kinematics import (forward_kinematics, generalized_gradient, generalized_hessian, integrate,
                                 pose_gradient_wrench)

G = np.array([0.0, 0.0, -9.81])
DT = 0.02


def _setup(body, seed=0, B=2):
    rng = np.random.default_rng(seed)
    qk = random_q(body, B, rng)
    qkm = integrate(body, qk, 0.05 * rng.standard_normal((B, body.nv)))
    q = integrate(body, qk, 0.1 * rng.standard_normal((B, body.nv)))
    tau = rng.standard_normal((B, body.nv))
    return q, qk, qkm, tau


def _link_term_fns(body, make_terms):
    """value / gradient / exact Hessian of a link term through the kinematic chain rule."""
    def value(q):
        return make_terms(forward_kinematics(body, q), False).value

    def derivs(q):
        kin = forward_kinematics(body, q)
        t = make_terms(kin, True)
        wrench, X = pose_gradient_wrench(kin, t.G, t.f)
        return generalized_gradient(body, kin, wrench), generalized_hessian(body, kin, K=t.K, G=t.G, f=t.f, X=X)

    return value, derivs


def test_inertia_gradient_and_hessian(body):
    q, qk, qkm, _ = _setup(body)
    targets = inertia_targets(forward_kinematics(body, qk), forward_kinematics(body, qkm))
    value, derivs = _link_term_fns(body, lambda kin, d: inertia_terms(body, kin, targets, DT, d))
    g, H = derivs(q)
    assert rel_err(g, fd_gradient(value, body, q)) < 1e-6
    assert rel_err(H, fd_hessian(value, body, q)) < 1e-6


def test_gravity_gradient_and_hessian(body):
    q, *_ = _setup(body, seed=1)
    value, derivs = _link_term_fns(body, lambda kin, d: gravity_terms(body, kin, G, d))
    g, H = derivs(q)
    assert rel_err(g, fd_gradient(value, body, q)) < 1e-6
    assert rel_err(H, fd_hessian(value, body, q)) < 1e-6


def test_actuation_gradient_and_hessian(body):
    q, qk, _, tau = _setup(body, seed=2)
    t = actuation_terms(body, q, qk, tau)
    value = lambda x: actuation_terms(body, x, qk, tau, False).value  # noqa: E731
    assert rel_err(t.grad, fd_gradient(value, body, q)) < 1e-6
    fdH = fd_hessian(value, body, q)
    assert np.max(np.abs(t.hess - fdH)) < 1e-6 * max(1.0, np.abs(t.grad).max())


def test_actuation_on_linear_coordinates_is_exact_work():
    from pbad_gym.model import chain

    b = chain(3)
    q, qk, tau = np.array([[0.1, 0.2, 0.3]]), np.zeros((1, 3)), np.array([[1.0, -2.0, 0.5]])
    assert actuation_terms(b, q, qk, tau, False).value[0] == pytest.approx(-(0.1 - 0.4 + 0.15))


@pytest.mark.parametrize("hessian", ["exact", "gauss_newton"])
def test_step_energy_derivatives(body, hessian):
    q, qk, qkm, tau = _setup(body, seed=3)
    data = prepare_step(body, qkm, qk, tau, DT, G)
    E, g, H, D = step_energy(body, q, data, derivatives=True, hessian=hessian)
    value = lambda x: step_energy(body, x, data)  # noqa: E731
    np.testing.assert_allclose(E, value(q))
    assert rel_err(g, fd_gradient(value, body, q)) < 1e-6
    fdH = fd_hessian(value, body, q)
    if hessian == "exact":
        assert rel_err(H, fdH) < 1e-6
    else:  # Gauss-Newton: the mass matrix / Δt² plus the joint-space Hessians
        expect = crba(body, q) / DT**2 + actuation_terms(body, q, qk, tau).hess
        np.testing.assert_allclose(H, expect, rtol=1e-10, atol=1e-12 * np.abs(expect).max())
    np.testing.assert_allclose(H, np.swapaxes(H, 1, 2), atol=1e-9 * np.abs(H).max())
    assert np.all(D > 0)


def test_step_energy_derivatives_with_every_term():
    """The whole step energy with drag, viscous contact, limits and damping (exact Hessian by second differences)."""
    from pbad_gym.energies import make_force_model
    from pbad_gym.model import chain

    body = chain(3, floating=True, link_length=0.2, radius=0.05)
    rng = np.random.default_rng(9)
    qk = random_q(body, 2, rng, scale=0.3)
    qk[:, 2] = 0.03
    qkm = integrate(body, qk, 0.01 * rng.standard_normal((2, body.nv)))
    tau = 0.01 * rng.standard_normal((2, body.nv))
    forces = make_force_model(body, G, drag=rng.uniform(0.5, 3.0, (body.L, 3)),
                              contact=dict(stiffness=500.0, friction="viscous", damping=3.0),
                              damping=np.linspace(0.0, 0.2, body.nv))
    data = prepare_step(body, qkm, qk, tau, DT, forces)
    q = integrate(body, qk, 0.02 * rng.standard_normal((2, body.nv)))
    E, g, H, D = step_energy(body, q, data, derivatives=True)
    value = lambda x: step_energy(body, x, data)  # noqa: E731
    assert rel_err(g, fd_gradient(value, body, q)) < 1e-6
    assert rel_err(H, fd_hessian(value, body, q)) < 1e-6


@pytest.mark.parametrize("springs", ["implicit", "trapezoidal"])
@pytest.mark.parametrize("what", ["contact", "limits"])
def test_step_energy_derivatives_with_compression_and_limit_damping(what, springs):
    """The clamped Kelvin-Voigt contact ((D1 + Dn/Δt)/2·max(0, d − s0)²) and limits ((k + c/Δt)/2·max(0, p − s0)²)
    inside the whole step energy (gradient and exact Hessian by differences), at states where the damping acts;
    with trapezoidal springs (energies/penalty.py) the stiffness and shift read q_{k−1} too."""
    from conftest import mixed_body

    from pbad_gym.energies import make_force_model
    from pbad_gym.model import chain

    rng = np.random.default_rng(11)
    if what == "contact":
        body = chain(3, floating=True, link_length=0.2, radius=0.05)
        qk = random_q(body, 2, rng, scale=0.3)
        qk[:, 2] = 0.03
        forces = make_force_model(body, G, contact=dict(stiffness=500.0, friction="coulomb", normal_damping=4.0,
                                                        springs=springs))
        step = 0.02 * rng.standard_normal((2, body.nv))
        step[:, 2] = -0.01  # every sphere sinks further than at q_k: the damper acts
    else:
        body = mixed_body(limited=True)
        qk = random_q(body, 2, rng, scale=0.5)
        forces = make_force_model(body, G, limit_stiffness=50.0, limit_damping=0.7, limit_springs=springs)
        step = 0.2 * rng.standard_normal((2, body.nv))
    qkm = integrate(body, qk, 0.01 * rng.standard_normal((2, body.nv)))
    tau = 0.01 * rng.standard_normal((2, body.nv))
    data = prepare_step(body, qkm, qk, tau, DT, forces)
    q = integrate(body, qk, step)
    E, g, H, D = step_energy(body, q, data, derivatives=True)
    value = lambda x: step_energy(body, x, data)  # noqa: E731
    assert rel_err(g, fd_gradient(value, body, q)) < 1e-6
    assert rel_err(H, fd_hessian(value, body, q)) < 1e-6
    if springs == "trapezoidal":  # the averaged spring acts on every row: it differs from the implicit one
        off = dataclasses.replace(forces, limit_springs="implicit", contact=forces.contact and dataclasses.replace(
            forces.contact, springs="implicit"))
        share = 1e-5
    else:  # the damper acts on every row
        off = make_force_model(body, G, contact=dict(stiffness=500.0, friction="coulomb")) if what == "contact" \
            else make_force_model(body, G, limit_stiffness=50.0)
        share = 1e-3
    g_off = step_energy(body, q, prepare_step(body, qkm, qk, tau, DT, off), derivatives=True)[1]
    assert np.all(np.abs(g - g_off).max(axis=1) > share * np.abs(g).max())
