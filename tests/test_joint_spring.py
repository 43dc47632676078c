"""Joint springs k/2·‖q ⊖ q_rest‖² (the worked example of docs/architecture.md): the NumPy term's derivatives, the
compiled kernel against it, an analytic oscillator, the energy the guard counts, and the option's validation."""
import numpy as np
import pytest
from conftest import fd_gradient, fd_hessian, random_q, rel_err

from pbad_gym.dynamics import crba
from pbad_gym.energies import joint_potential, make_force_model, spring_terms
from pbad_gym.envs.divergence import GuardModel, energy_terms
from pbad_gym.model import chain, spider
from pbad_gym.simulator import Simulator


def test_spring_term_derivatives(body):
    rng = np.random.default_rng(0)
    q, rest = random_q(body, 3, rng), random_q(body, 1, rng)[0]
    k = np.linspace(0.5, 2.0, body.nv)
    t = spring_terms(body, q, rest, k)
    value = lambda x: spring_terms(body, x, rest, k, False).value  # noqa: E731
    np.testing.assert_allclose(t.value, value(q))
    assert rel_err(t.grad, fd_gradient(value, body, q)) < 1e-6
    assert rel_err(t.hess, fd_hessian(value, body, q)) < 1e-6


def test_spring_on_hinges_is_the_plain_quadratic():
    body = chain(3)
    q, rest, k = np.array([[0.3, -0.2, 0.5]]), np.array([0.1, 0.0, -0.1]), np.array([1.0, 2.0, 3.0])
    assert spring_terms(body, q, rest, k).value[0] == pytest.approx(0.5 * np.sum(k * (q[0] - rest) ** 2), rel=1e-14)


def test_spring_option_is_validated():
    body = spider()
    with pytest.raises(ValueError, match="spring stiffnesses"):
        make_force_model(body, spring=-1.0)
    with pytest.raises(ValueError, match=r"spring must be .* shape \(18,\)"):
        make_force_model(body, spring=[1.0, 2.0])
    with pytest.raises(ValueError, match="spring_rest .* needs spring"):
        make_force_model(body, spring_rest=body.q0())
    with pytest.raises(ValueError, match=r"spring_rest\[3:7\] .* unit norm"):
        make_force_model(body, spring=1.0, spring_rest=np.zeros(body.nq))
    with pytest.raises(ValueError, match="spring_rest must be"):
        make_force_model(body, spring=1.0, spring_rest=np.zeros(3))
    assert not make_force_model(body, spring=0.0).has_spring  # all zero: no term
    with pytest.raises(ValueError, match="springs are PBAD energies"):
        Simulator(chain(2), 0.01, integrator="semi_implicit_euler", spring=1.0)


def _period(backend, dt, order=2, n_periods=2.0):
    """Measured period [s] of a hinge pendulum on a spring without gravity (ω² = k/I), from the zero crossings."""
    body = chain(1)
    I = float(crba(body, body.q0()[None])[0, 0, 0])  # (a single hinge: I does not depend on q)
    k = I * (2 * np.pi / 0.5) ** 2  # exact period 0.5 s
    sim = Simulator(body, dt, gravity=(0, 0, 0), spring=k, backend=backend, order=order)
    sim.reset(np.array([[0.2]]), np.zeros((1, 1)))
    qs = [0.2]
    for _ in range(int(round(n_periods * 0.5 / dt))):
        sim.step()
        qs.append(float(sim.q[0, 0]))
    qs = np.array(qs)
    i = np.nonzero((qs[:-1] > 0) & (qs[1:] <= 0))[0]  # downward crossings, interpolated
    t = (i + qs[i] / (qs[i] - qs[i + 1])) * dt
    return float(np.mean(np.diff(t)))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_spring_oscillates_at_its_natural_frequency_and_converges(backend):
    coarse, fine = _period(backend, 0.005, n_periods=3), _period(backend, 0.0005, n_periods=3)
    assert abs(fine - 0.5) < 0.002 * 0.5
    assert abs(fine - 0.5) < abs(coarse - 0.5) / 5  # the step's error shrinks with Δt, not a property of the spring


def test_collocation_has_the_spring_too():
    assert abs(_period("numpy", 0.01, order=3, n_periods=3) - 0.5) < 0.01 * 0.5


def test_kernel_matches_numpy_with_springs_and_contact():
    body = spider()
    rng = np.random.default_rng(4)
    rest = random_q(body, 1, rng, 0.3)[0]
    kw = dict(num_envs=3, contact=True, limit_stiffness=50.0, spring=np.linspace(0.5, 5.0, body.nv),
              spring_rest=rest)
    sims = {b: Simulator(body, 0.01, backend=b, **kw) for b in ("numpy", "numba")}
    q0 = random_q(body, 3, rng, 0.2)
    q0[:, 2] = 0.6
    tau = 0.5 * rng.uniform(-1, 1, (3, body.nv))
    tau[:, :6] = 0
    for sim in sims.values():
        assert sim.backend in ("numpy", "numba")
        sim.reset(q0, np.zeros((3, body.nv)))
    for _ in range(15):
        info = {b: sim.step(tau) for b, sim in sims.items()}
        np.testing.assert_allclose(sims["numba"].q, sims["numpy"].q, rtol=0, atol=1e-10)
        np.testing.assert_array_equal(info["numba"]["iterations"], info["numpy"]["iterations"])
    assert sims["numba"].backend == "numba"


def test_the_guard_counts_the_spring_as_stored_energy():
    body = chain(3, floating=True, joint="ball")
    rng = np.random.default_rng(1)
    q = random_q(body, 2, rng)
    forces = make_force_model(body, spring=2.0)
    expect = spring_terms(body, q, forces.spring_rest, forces.spring, False).value
    np.testing.assert_allclose(joint_potential(body, forces, q), expect, rtol=1e-14)
    both = make_force_model(body, spring=2.0, limit_stiffness=10.0)
    np.testing.assert_allclose(joint_potential(body, both, q), expect, rtol=1e-14)  # no ranges: no limit energy
    terms = {}
    for b in ("numpy", "numba"):  # the divergence guard's energy terms: NumPy reference and compiled
        sim = Simulator(body, 0.01, num_envs=2, spring=2.0, backend=b)
        act = np.arange(6, body.nv)
        guard = GuardModel(body, sim.forces, sim.dt, act, np.ones(act.size), sim.backend)
        terms[b] = energy_terms(guard, q, np.zeros((2, body.nv))).limits
    np.testing.assert_allclose(terms["numpy"], expect, rtol=1e-12)
    np.testing.assert_allclose(terms["numba"], expect, rtol=1e-10)
