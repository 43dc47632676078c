"""Drag, contact, limit and damping energies: finite differences, and the physics they must produce."""
import numpy as np
import pytest
from conftest import BODIES, fd_gradient, fd_hessian, random_q, rel_err

from pbad_gym.energies import GroundContact, contact_state, contact_terms, drag_terms, drag_weights
from pbad_gym.energies.joints import damping_terms, limit_terms
from pbad_gym.kinematics import (forward_kinematics, generalized_gradient, generalized_hessian, integrate,
                                 pose_gradient_wrench)
from pbad_gym.model import Body, Box, Joint, Link, Sphere, chain
from pbad_gym.simulator import Simulator

DT = 0.02


def _check_link_term(body, q, make_terms, tol=1e-6, eps=1e-4):
    def value(x):
        return make_terms(forward_kinematics(body, x), False).value

    kin = forward_kinematics(body, q)
    t = make_terms(kin, True)
    wrench, X = pose_gradient_wrench(kin, t.G, t.f)
    g = generalized_gradient(body, kin, wrench)
    H = generalized_hessian(body, kin, K=t.K, G=t.G, f=t.f, X=X)
    assert rel_err(g, fd_gradient(value, body, q)) < tol
    assert rel_err(H, fd_hessian(value, body, q, eps=eps)) < tol
    return g, H


@pytest.mark.parametrize("name", sorted(BODIES))
def test_drag_derivatives(name):
    body = BODIES[name]()
    rng = np.random.default_rng(0)
    qk = random_q(body, 2, rng)
    q = integrate(body, qk, 0.2 * rng.standard_normal((2, body.nv)))
    coeff = rng.uniform(0.5, 5.0, size=(body.L, 3))
    kin_ref = forward_kinematics(body, qk)
    W = drag_weights(kin_ref, coeff)
    _check_link_term(body, q, lambda kin, d: drag_terms(body, kin, kin_ref, W, DT, d))


def _contact_body():
    """A floating 3-link chain low over the ground so that some spheres touch it."""
    return chain(3, floating=True, link_length=0.2, radius=0.05)


def _contact_config(body, rng, B=2):
    q = random_q(body, B, rng, scale=0.3)
    q[:, 2] = 0.03  # base height: some end spheres (r = 0.05) penetrate
    return q


@pytest.mark.parametrize("friction", ["viscous", "coulomb", "none"])
def test_contact_derivatives(friction):
    body = _contact_body()
    rng = np.random.default_rng(1)
    qk = _contact_config(body, rng)
    params = GroundContact(stiffness=500.0, friction=friction, damping=3.0, mu=0.8, slip_velocity=0.5)
    state = contact_state(body, forward_kinematics(body, qk), params, DT)
    if friction == "coulomb":  # anchors away from the spheres: some stick (s < ε), some slide (s > ε)
        state = state._replace(anchor=state.P + rng.normal(scale=0.02, size=state.P.shape))
    assert state.active.any() and not state.active.all()
    q = integrate(body, qk, 0.02 * rng.standard_normal((2, body.nv)))
    # the Huber norm's curvature ~ 1/‖x‖ varies fast: a smaller difference step keeps the FD truncation small
    _check_link_term(body, q, lambda kin, d: contact_terms(body, kin, params, state, DT, d),
                     eps=2e-5 if friction == "coulomb" else 1e-4)


def test_contact_energy_is_continuous_across_the_switch():
    """At d = 0 the normal term's value and gradient match on both sides (C¹); only its Hessian jumps."""
    body = Body([Link("s", -1, Joint("free"), shapes=[Sphere(radius=0.1)])])
    params = GroundContact(stiffness=1e3, friction="none")
    state = contact_state(body, forward_kinematics(body, body.q0()[None]), params, DT)

    def terms(z):
        q = body.q0()[None].copy()
        q[0, 2] = z
        kin = forward_kinematics(body, q)
        t = contact_terms(body, kin, params, state, DT)
        wrench, X = pose_gradient_wrench(kin, t.G, t.f)
        return t.value[0], generalized_gradient(body, kin, wrench)[0], q

    for h in (1e-4, 1e-6, 1e-8):
        (ea, ga, _), (eb, gb, _) = terms(0.1 - h), terms(0.1 + h)
        assert abs(ea - eb) <= 1e3 * h * h and np.max(np.abs(ga - gb)) <= 1e3 * h * 1.01
    e0, g0, q0 = terms(0.1)
    assert e0 == 0 and np.all(g0 == 0)
    # the one-sided difference quotients agree with the gradient at the switch
    fd = fd_gradient(lambda x: contact_terms(body, forward_kinematics(body, x), params, state, DT, False).value,
                     body, q0, eps=1e-7)
    np.testing.assert_allclose(fd[0], g0, atol=1e-4)


def test_limit_and_damping_derivatives():
    body = chain(3, floating=True, joint="ball")
    lk = [Link("a", -1, Joint("hinge", axis=(0, 1, 0), range=(-0.3, 0.2), damping=0.5),
               shapes=[Sphere(radius=0.05, pos=(0.1, 0, 0))]),
          Link("b", 0, Joint("universal", range=((-0.1, -0.2), (0.1, 0.4)), damping=0.2),
               placement=(np.eye(3), (0.2, 0, 0)), shapes=[Sphere(radius=0.05, pos=(0.1, 0, 0))]),
          Link("c", 1, Joint("ball", damping=0.3), placement=(np.eye(3), (0.2, 0, 0)),
               shapes=[Sphere(radius=0.05, pos=(0.1, 0, 0))])]
    limited = Body(lk)
    rng = np.random.default_rng(2)
    for b in (limited, body):
        qk = random_q(b, 3, rng)
        q = integrate(b, qk, 0.3 * rng.standard_normal((3, b.nv)))
        for fun in (lambda x, d: limit_terms(b, x, 50.0, d),
                    lambda x, d: damping_terms(b, x, qk, np.linspace(0.1, 1.0, b.nv), DT, d)):
            t = fun(q, True)
            val = lambda x: fun(x, False).value  # noqa: E731
            assert rel_err(t.grad, fd_gradient(val, b, q)) < 1e-6 or np.abs(t.grad).max() == 0
            fdH = fd_hessian(val, b, q)
            assert np.max(np.abs(t.hess - fdH)) < 1e-5 * max(1.0, np.abs(fdH).max())
    assert np.abs(limit_terms(limited, random_q(limited, 3, rng, scale=1.0), 50.0).grad).max() > 0


# --- physics -----------------------------------------------------------------------------------------------------
def _ball(radius=0.1, density=1000.0):
    return Body([Link("ball", -1, Joint("free"), shapes=[Sphere(radius=radius, density=density)])])


def test_sphere_settles_at_the_static_penetration_and_stays():
    body = _ball()
    k = 2e4
    sim = Simulator(body, dt=0.01, contact=dict(stiffness=k, friction="viscous", damping=50.0))
    q = body.q0().copy()
    q[2] = 0.12
    sim.reset(q=q)
    for _ in range(300):
        sim.step()
    m = body.total_mass
    depth = 0.1 - sim.q[0, 2]
    assert depth == pytest.approx(m * 9.81 / k, rel=0.02)
    z = sim.q[0, 2]
    for _ in range(100):
        sim.step()
    assert abs(sim.q[0, 2] - z) < 1e-6 and np.abs(sim.qd).max() < 1e-4


def _box():
    return Body([Link("box", -1, Joint("free"), shapes=[Box(half_size=(0.1, 0.1, 0.05), density=500.0)])])


def _box_on_ground(friction, **kw):
    body = _box()
    sim = Simulator(body, dt=0.01, contact=dict(stiffness=1e5, friction=friction, **kw))
    q = body.q0().copy()
    q[2] = 0.05 - body.total_mass * 9.81 / 4 / 1e5  # resting depth of the 4 bottom corners
    sim.reset(q=q)
    for _ in range(20):
        sim.step()
    return body, sim


@pytest.mark.parametrize("friction, kw", [("viscous", dict(damping=20.0)), ("coulomb", dict(mu=0.5))])
def test_sliding_box_decelerates_and_stops(friction, kw):
    body, sim = _box_on_ground(friction, **kw)
    qd = np.zeros(body.nv)
    qd[0] = 1.0
    sim.reset(q=sim.q, qd=qd)
    speeds = []
    for _ in range(200):
        sim.step()
        speeds.append(sim.qd[0, 0])
    speeds = np.array(speeds)
    moving = speeds[: np.argmax(speeds < 1e-3)]
    assert speeds[10] < 0.9 and len(moving) > 5 and np.all(np.diff(moving) < 0) and abs(speeds[-1]) < 1e-3
    if friction == "coulomb":  # Coulomb: constant deceleration μg, stopping distance v²/(2μg)
        assert sim.q[0, 0] == pytest.approx(1.0 / (2 * 0.5 * 9.81), rel=0.1)


@pytest.mark.parametrize("load, stuck", [(0.6, True), (1.4, False)])
def test_coulomb_friction_sticks_below_mu_m_g(load, stuck):
    body, sim = _box_on_ground("coulomb", mu=0.5, slip_velocity=1e-3)
    x0 = sim.q[0, 0]
    tau = np.zeros(body.nv)
    tau[0] = load * 0.5 * body.total_mass * 9.81  # fraction of μ m g pushing along x
    for _ in range(200):
        sim.step(tau)
    moved = sim.q[0, 0] - x0
    if stuck:
        assert abs(moved) < 1e-4 and abs(sim.qd[0, 0]) < 1e-4
    else:
        assert moved > 0.05


def test_isotropic_drag_cannot_move_the_centre_of_mass():
    body = chain(4, floating=True)
    sim = Simulator(body, dt=0.05, gravity=(0, 0, 0), drag=2.0)
    rng = np.random.default_rng(3)

    c0 = _com(body, sim.q)
    for k in range(100):
        tau = np.zeros(body.nv)
        tau[6:] = 0.01 * np.sin(2.0 * k * 0.05 + np.arange(3)) + 0.005 * rng.standard_normal(3)
        sim.step(tau)
    assert np.max(np.abs(_com(body, sim.q) - c0)) < 1e-8


def _com(body, q):
    kin = forward_kinematics(body, q)
    c = body.arrays(np, np.float64)
    cw = np.einsum("blij,lj->bli", kin.R, c.c) + c.mass[:, None] * kin.t
    return cw.sum(1)[0] / body.total_mass


def test_anisotropic_drag_travelling_wave_swims_forward():
    """PD-tracked travelling wave (0.6 rad, 0.5 Hz, 120° phase lag from head to tail) on a free 4-link chain."""
    body = chain(4, floating=True)
    sim = Simulator(body, dt=0.05, gravity=(0, 0, 0), drag=(0.1, 10.0))
    com = []
    for k in range(400):
        target = 0.6 * np.sin(2 * np.pi * 0.5 * k * 0.05 - np.arange(3) * 2 * np.pi / 3)
        tau = np.zeros(body.nv)
        tau[6:] = 0.002 * (target - sim.q[0, 7:]) - 0.0004 * sim.qd[0, 6:]
        sim.step(tau)
        com.append(_com(body, sim.q))
    com = np.array(com)
    per_period = com[280::40, 0] - com[240:-40:40, 0]  # one gait period = 40 steps, after a 12 s transient
    # the wave travels towards +x, so the swimmer moves towards −x, steadily, and stays in its plane
    assert np.all(per_period < -0.05) and np.ptp(per_period) < 0.1 * abs(per_period.mean())
    assert np.abs(com[:, 1]).max() < 1e-9 and np.abs(com[:, 2]).max() < 0.01


def test_zero_torque_swimmer_stays_put():
    body = chain(4, floating=True)
    sim = Simulator(body, dt=0.05, gravity=(0, 0, 0), drag=(0.1, 10.0))
    c0 = _com(body, sim.q)
    for _ in range(50):
        sim.step()
    np.testing.assert_allclose(_com(body, sim.q), c0, atol=1e-12)
