"""The step's adjoint (integrators/adjoint.py) against central finite differences of the solver itself."""
import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym  # noqa: F401
from pbad_gym import Simulator
from pbad_gym.arrays import tree_map
from pbad_gym.energies.contact import contact_state
from pbad_gym.integrators.adjoint import step_vjp
from pbad_gym.integrators.options import SolverOptions
from pbad_gym.integrators.pbad import prepare_step, solve_step_in_cone
from pbad_gym.kinematics import coordinate_cotangent, difference, forward_kinematics, integrate, tangent_cotangent
from pbad_gym.model import chain

OPTIONS = SolverOptions.create(np.float64, optimizer="lm", max_iter=200, tol=1e-13, hessian="exact")


def _sim_of(env_id, B):
    return gym.make_vec(env_id, num_envs=B, vectorization_mode="vector_entry_point").unwrapped.sim


def _solve(sim, q_prev, q, tau):
    data = prepare_step(sim.body, q_prev, q, tau, sim.dt, sim.forces)
    q_next, res, data = solve_step_in_cone(sim.body, data, OPTIONS)
    assert res.converged.all()
    return q_next, data


def _fd(sim, q_prev, q, tau, q_next, gbar, which, h):
    """Central differences of gbar·(step(θ ⊕ h e_j) ⊖ q_next) for each tangent direction e_j of input ``which``."""
    body, B = sim.body, q.shape[0]
    out = np.zeros((B, body.nv))
    for j in range(body.nv):
        e = np.zeros((B, body.nv))
        e[:, j] = h
        val = []
        for s in (1.0, -1.0):
            args = [q_prev, q, tau]
            k = ("q_prev", "q_cur", "tau").index(which)
            args[k] = args[k] + s * e if which == "tau" else integrate(body, args[k], s * e)
            val.append(np.sum(gbar * difference(body, q_next, _solve(sim, *args)[0]), -1))
        out[:, j] = (val[0] - val[1]) / (2 * h)
    return out


def _check(sim, q_prev, q, tau, seed=0):
    rng = np.random.default_rng(seed)
    q_next, data = _solve(sim, q_prev, q, tau)
    gbar = rng.standard_normal((q.shape[0], sim.body.nv))
    ct, _ = step_vjp(sim.body, data, q_prev, q_next, gbar)
    for which, h in (("q_prev", 1e-6), ("q_cur", 1e-6), ("tau", 1e-3)):
        fd = _fd(sim, q_prev, q, tau, q_next, gbar, which, h)
        got = getattr(ct, which)
        np.testing.assert_allclose(got, fd, rtol=0, atol=1e-6 * np.abs(fd).max(), err_msg=which)


def _start(sim, B, rng, spread=0.1, speed=0.5):
    q0 = np.repeat(np.asarray(sim.state.q[:1]), B, 0)
    q = integrate(sim.body, q0, spread * rng.standard_normal((B, sim.body.nv)))
    q_prev = integrate(sim.body, q, -sim.dt * speed * rng.standard_normal((B, sim.body.nv)))
    return q_prev, q, rng.standard_normal((B, sim.body.nv))


@pytest.mark.parametrize("damping", [None, 0.3])
def test_chain_under_gravity_with_and_without_joint_damping(damping):
    sim = Simulator(chain(4), 0.01, num_envs=3, damping=damping)
    _check(sim, *_start(sim, 3, np.random.default_rng(1)))


def test_swimmer_drag_limits_and_free_base():
    sim = _sim_of("pbad_gym/Swimmer-v1", 3)  # anisotropic drag, limit penalty, quaternion base
    _check(sim, *_start(sim, 3, np.random.default_rng(2)))


def test_quaternion_damping_and_damped_limits_past_their_bounds():
    sw = _sim_of("pbad_gym/Swimmer-v1", 1)
    sim = Simulator(sw.body, 0.05, num_envs=3, drag=sw.forces.drag, gravity=(0, 0, -1.0), limit_stiffness=3000.0,
                    limit_damping=20.0, damping=np.full(sw.body.nv, 0.7))
    rng = np.random.default_rng(3)
    q_prev, q, tau = _start(sim, 3, rng)
    hinge = sim.body.lin_q[-3:]  # the hinges (±100°): row 0 inside, row 1 past the upper bound at q_k, row 2 below
    q[1, hinge], q_prev[1, hinge] = 1.9, 1.85
    q[2, hinge], q_prev[2, hinge] = -1.8, -1.9
    _check(sim, q_prev, q, tau)


def test_spider_body_armature_and_damped_limits_without_contact():
    sp = _sim_of("pbad_gym/Spider-v3", 1)
    sim = Simulator(sp.body, 0.01, num_envs=3, limit_stiffness=1000.0, limit_damping=60.0, damping=sp.forces.damping)
    _check(sim, *_start(sim, 3, np.random.default_rng(4)))


def _standing_spider(B, contact):
    """A Spider-v3 body after 1 s of zero actions then 0.15 s of random ones (feet on the ground, some slipping),
    simulated with ``contact`` (GroundContact field overrides) and a re-solve to a tight cone fixed point."""
    env = gym.make_vec("pbad_gym/Spider-v3", num_envs=B, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for a in [np.zeros((B, 8))] * 20 + [rng.uniform(-0.5, 0.5, (B, 8)) for _ in range(3)]:
        env.step(a)
    sp = env.unwrapped.sim
    params = dataclasses.replace(sp.forces.contact, **{"cone_tol": 1e-13, "cone_passes": 200, **contact})
    sim = Simulator(sp.body, sp.dt, num_envs=B, contact=params, limit_stiffness=sp.forces.limit_stiffness,
                    limit_damping=sp.forces.limit_damping, damping=sp.forces.damping)
    return sim, sp.state


@pytest.mark.parametrize("contact", [{}, {"friction_cap": "lagged_spring"},
                                     {"friction": "viscous", "damping": 20.0}],
                         ids=["coulomb-applied", "coulomb-lagged-spring", "viscous"])
def test_spider_contact_and_friction(contact):
    B = 2
    sim, state = _standing_spider(B, contact)
    body, params = sim.body, sim.forces.contact
    rng = np.random.default_rng(1)
    q_prev, q, anchor = np.array(state.q_prev), np.array(state.q), np.array(state.contact.anchor)
    assert state.contact.active.any(axis=1).all()
    tau = np.zeros((B, body.nv))
    tau[:, 6:] = 150 * rng.uniform(-1, 1, (B, 8))

    def solve(q_prev, q, tau, anchor):
        memory = contact_state(body, forward_kinematics(body, q), params, sim.dt)._replace(anchor=anchor)
        data = prepare_step(body, q_prev, q, tau, sim.dt, sim.forces, contact=memory)
        q_next, res, data = solve_step_in_cone(body, data, OPTIONS)
        assert res.converged.all()
        return q_next, data

    q_next, data = solve(q_prev, q, tau, anchor)
    gbar = rng.standard_normal((B, body.nv))
    ct, _ = step_vjp(body, data, q_prev, q_next, gbar)

    def fd(which, h):
        active = np.nonzero(state.contact.active.any(0))[0]  # the anchors that are read
        cols = [(j, None) for j in range(body.nv)] if which != "anchor" else [(s, a) for s in active for a in (0, 1)]
        out = []
        for j, a in cols:
            val = []
            for sgn in (1.0, -1.0):
                args = [q_prev, q, tau, anchor]
                if which == "anchor":
                    e = np.zeros_like(anchor)
                    e[:, j, a] = sgn * h
                    args[3] = anchor + e
                else:
                    e = np.zeros((B, body.nv))
                    e[:, j] = sgn * h
                    k = ("q_prev", "q_cur", "tau").index(which)
                    args[k] = args[k] + e if which == "tau" else integrate(body, args[k], e)
                val.append(np.sum(gbar * difference(body, q_next, solve(*args)[0]), -1))
            out.append((val[0] - val[1]) / (2 * h))
        got = getattr(ct, which)
        got = got[:, active, :2].reshape(B, -1) if which == "anchor" else got
        return got, np.stack(out, -1)

    for which, h in (("q_prev", 1e-7), ("q_cur", 1e-7), ("tau", 1e-4), ("anchor", 1e-7)):
        got, want = fd(which, h)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max(), err_msg=which)


def test_coulomb_capped_by_the_last_steps_force_without_re_solves_is_refused_by_name():
    sim, state = _standing_spider(1, {"cone_passes": 0})
    data = prepare_step(sim.body, np.array(state.q_prev), np.array(state.q), np.zeros((1, sim.body.nv)), sim.dt,
                        sim.forces)
    with pytest.raises(ValueError, match="cone_passes"):
        step_vjp(sim.body, data, np.array(state.q_prev), np.array(state.q), np.ones((1, sim.body.nv)))


def test_cotangent_conversions_invert_each_other_on_the_tangent_plane():
    sim = _sim_of("pbad_gym/Swimmer-v1", 4)
    rng = np.random.default_rng(5)
    q = integrate(sim.body, np.repeat(np.asarray(sim.state.q[:1]), 4, 0), rng.standard_normal((4, sim.body.nv)))
    g = rng.standard_normal((4, sim.body.nv))
    np.testing.assert_allclose(tangent_cotangent(sim.body, q, coordinate_cotangent(sim.body, q, g)), g, atol=1e-14)
    # a cotangent c on coordinates pairs with q ⊕ δ − q as its tangent form pairs with δ
    c, d = rng.standard_normal(q.shape), 1e-6 * rng.standard_normal((4, sim.body.nv))
    np.testing.assert_allclose(np.sum(c * (integrate(sim.body, q, d) - q), -1),
                               np.sum(tangent_cotangent(sim.body, q, c) * d, -1), rtol=1e-5)


@pytest.mark.parametrize("contact", [{}, {"friction_cap": "lagged_spring"}, {"friction": "viscous", "damping": 20.0}],
                         ids=["coulomb-applied", "coulomb-lagged-spring", "viscous"])
def test_ground_force_adjoint(contact):
    """F = −∂E_c/∂P at q_{k+1} as a function of q_{k+1}, q_k and the anchors (the cap included)."""
    from pbad_gym.energies.contact import sphere_forces
    from pbad_gym.integrators.contact_adjoint import memory_of, points_to_tangent, sphere_force_vjp

    sim, state = _standing_spider(2, contact)
    body, params, dt = sim.body, sim.forces.contact, sim.dt
    rng = np.random.default_rng(0)
    q, anchor = np.array(state.q), np.array(state.contact.anchor)
    q_next = integrate(body, q, 1e-3 * rng.standard_normal((2, body.nv)))

    def forces(q_next, q, anchor):
        kn, kc = forward_kinematics(body, q_next), forward_kinematics(body, q)
        return sphere_forces(body, kn, params, memory_of(body, params, dt, kc, anchor, kn), dt)

    Fbar = rng.standard_normal(forces(q_next, q, anchor).shape)
    kn, kc = forward_kinematics(body, q_next), forward_kinematics(body, q)
    g_next, g_Pk, g_anchor = sphere_force_vjp(body, params, dt, kn, memory_of(body, params, dt, kc, anchor, kn), Fbar)
    got = {"q_next": g_next, "q": points_to_tangent(body, kc, g_Pk), "anchor": g_anchor.reshape(2, -1)}
    h = 1e-7
    for k, name in enumerate(("q_next", "q", "anchor")):
        fd = []
        for j in range(body.nv if k < 2 else anchor[0].size):
            val = []
            for sgn in (1.0, -1.0):
                args = [q_next, q, anchor]
                if k == 2:
                    e = np.zeros_like(anchor)
                    e.reshape(2, -1)[:, j] = sgn * h
                    args[2] = anchor + e
                else:
                    e = np.zeros((2, body.nv))
                    e[:, j] = sgn * h
                    args[k] = integrate(body, args[k], e)
                val.append(np.sum(Fbar * forces(*args), (1, 2)))
            fd.append((val[0] - val[1]) / (2 * h))
        fd = np.stack(fd, -1)
        np.testing.assert_allclose(got[name], fd, rtol=0, atol=1e-6 * max(np.abs(fd).max(), 1e-12), err_msg=name)


def _kernel_cases():
    """(name, Simulator, q_prev, q, tau, contact memory or None) for the kernel's cross-check: every energy term
    and joint type the adjoint covers."""
    from conftest import mixed_body

    out = []
    sim = Simulator(chain(4), 0.01, num_envs=3, damping=0.3)
    out.append(("chain", sim, *_start(sim, 3, np.random.default_rng(1)), None))
    sim = Simulator(mixed_body(limited=True), 0.01, num_envs=4, limit_stiffness=500.0, limit_damping=5.0,
                    damping=0.05, gravity=(0, 0, -9.81))
    out.append(("every joint type", sim, *_start(sim, 4, np.random.default_rng(5), spread=0.3), None))
    sim = _sim_of("pbad_gym/Swimmer-v1", 3)
    out.append(("swimmer", sim, *_start(sim, 3, np.random.default_rng(2)), None))
    sw = _sim_of("pbad_gym/Swimmer-v1", 1)
    sim = Simulator(sw.body, 0.05, num_envs=3, drag=sw.forces.drag, gravity=(0, 0, -1.0), limit_stiffness=3000.0,
                    limit_damping=20.0, damping=np.full(sw.body.nv, 0.7))
    q_prev, q, tau = _start(sim, 3, np.random.default_rng(3))
    hinge = sim.body.lin_q[-3:]
    q[1, hinge], q_prev[1, hinge] = 1.9, 1.85
    q[2, hinge], q_prev[2, hinge] = -1.8, -1.9
    out.append(("quaternion damping, damped limits", sim, q_prev, q, tau, None))
    sp = _sim_of("pbad_gym/Spider-v3", 1)
    sim = Simulator(sp.body, 0.01, num_envs=3, limit_stiffness=1000.0, limit_damping=60.0, damping=sp.forces.damping)
    out.append(("spider armature", sim, *_start(sim, 3, np.random.default_rng(4)), None))
    for contact, fresh in (({}, False), ({}, True), ({"friction_cap": "lagged_spring"}, False),
                           ({"friction": "viscous", "damping": 20.0}, False), ({"normal_damping": 0.0}, False),
                           ({"friction": "none"}, False)):
        sim, state = _standing_spider(2, contact)
        body = sim.body
        tau = np.zeros((2, body.nv))
        tau[:, 6:] = 150 * np.random.default_rng(1).uniform(-1, 1, (2, 8))
        q_prev, q = np.array(state.q_prev), np.array(state.q)
        memory = contact_state(body, forward_kinematics(body, q), sim.forces.contact, sim.dt)
        if not fresh:  # the stick anchors carried from the stance (some slipping), else at the centres
            memory = memory._replace(anchor=np.array(state.contact.anchor))
        out.append((f"spider contact {contact}{' fresh memory' if fresh else ''}", sim, q_prev, q, tau, memory))
    return out


@pytest.mark.parametrize("launch", ["serial", "parallel"])
def test_kernel_adjoint_equals_the_numpy_adjoint(launch):
    from pbad_gym.kernels.numba import threads
    from pbad_gym.kernels.numba.vjp import step_vjp_numba

    old = threads.launch_policy()
    threads.set_launch_policy(launch)
    try:
        for name, sim, q_prev, q, tau, memory in _kernel_cases():
            if launch == "parallel":  # at least SERIAL_BELOW rows, so that the pool runs them
                q_prev, q, tau = (np.concatenate([a, a]) for a in (q_prev, q, tau))
                memory = None if memory is None else tree_map(lambda a: np.concatenate([a, a]), memory)
            data = prepare_step(sim.body, q_prev, q, tau, sim.dt, sim.forces, contact=memory)
            q_next, res, data = solve_step_in_cone(sim.body, data, OPTIONS)
            assert res.converged.all(), name
            gbar = np.random.default_rng(0).standard_normal((q.shape[0], sim.body.nv))
            want, lam = step_vjp(sim.body, data, q_prev, q_next, gbar)
            got, lam_k = step_vjp_numba(sim.body, sim.forces, sim.dt, q_prev, q, tau, q_next, gbar, contact=memory)
            pairs = [("lambda", lam, lam_k)] + [(f, getattr(want, f), getattr(got, f)) for f in want._fields]
            for field, a, b in pairs:
                assert (a is None) == (b is None), (name, field)
                if a is not None:
                    assert np.abs(a).max() > 0 or field == "anchor", (name, field)
                    np.testing.assert_allclose(b, a, rtol=0, atol=1e-10 * np.abs(a).max(), err_msg=f"{name}: {field}")
            _check_whole_backward(name, sim, data, (q_prev, q, tau, memory), q_next)
    finally:
        threads.set_launch_policy(old)


def test_kernel_adjoint_refuses_what_the_numpy_adjoint_refuses():
    from pbad_gym.kernels.numba.vjp import step_vjp_numba

    sim, state = _standing_spider(1, {"cone_passes": 0})
    z = np.zeros((1, sim.body.nv))
    with pytest.raises(ValueError, match="cone_passes"):
        step_vjp_numba(sim.body, sim.forces, sim.dt, state.q_prev, state.q, z, state.q, z, contact=state.contact)


def _check_whole_backward(name, sim, data, inputs, q_next):
    """The kernel's whole backward of a differentiable step (coordinates in and out, the new memory's anchors'
    cotangent, a fresh memory) = diff.functions' NumPy path on the same step."""
    from types import SimpleNamespace

    from pbad_gym.diff.functions import step_cotangents
    from pbad_gym.kernels.numba.vjp import step_backward_numba

    rng = np.random.default_rng(7)
    B, S = q_next.shape[0], sim.body.arrays(np, float).contact_r.shape[0]
    spec = SimpleNamespace(body=sim.body, forces=sim.forces, dt=sim.dt)
    grad_q = rng.standard_normal(q_next.shape)
    grad_anchor = None if sim.forces.contact is None else rng.standard_normal((B, S, 3))
    for fresh in (False, True):
        want = step_cotangents(spec, data, inputs, q_next, grad_q, grad_anchor, fresh)
        got = step_backward_numba(sim.body, sim.forces, sim.dt, *inputs[:3], q_next, grad_q, grad_anchor,
                                  inputs[3], fresh)
        for field in want._fields:
            a, b = getattr(want, field), getattr(got, field)
            assert (a is None) == (b is None), (name, field)
            if a is not None:
                np.testing.assert_allclose(b, a, rtol=0, atol=1e-10 * np.abs(a).max(),
                                           err_msg=f"{name}: {field}, fresh {fresh}")
