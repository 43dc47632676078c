import numpy as np
import pytest
from conftest import random_q
from scipy.optimize import minimize

from pbad_gym.dynamics import crba
from pbad_gym.integrators.pbad import pbad_step, prepare_step, step_energy
from pbad_gym.kinematics import difference, integrate
from pbad_gym.model import chain
from pbad_gym.optim import levenberg_marquardt

G = np.array([0.0, 0.0, -9.81])


def _states(body, B, seed, dt, speed=1.0):
    rng = np.random.default_rng(seed)
    q = random_q(body, B, rng)
    q_prev = integrate(body, q, -dt * speed * rng.standard_normal((B, body.nv)))
    # torques that cause accelerations of order 1 rad/s² (thin links spin wildly under arbitrary torques)
    tau = (crba(body, q) @ rng.standard_normal((B, body.nv, 1)))[..., 0]
    return q_prev, q, tau


def test_accepted_energies_never_increase(body):
    q_prev, q, tau = _states(body, 4, 0, 0.05, speed=3.0)
    # fast random spins at a large step: a hard, non-convex step that needs many damped iterations
    _, res = pbad_step(body, q_prev, q, tau, 0.05, G, record_history=True, tol=1e-12)
    assert res.iterations.max() > 3
    hist = np.array(res.energy_history)
    for b in range(4):
        e = hist[:, b][np.isfinite(hist[:, b])]
        assert np.all(np.diff(e) <= 64 * np.finfo(float).eps * np.abs(e[:-1]).max())


def test_masking_gives_each_trajectory_its_solo_result():
    body = chain(5)
    dt = 0.05
    q_prev, q, tau = _states(body, 6, 1, dt)
    q_prev[0] = q[0]  # at rest: converges in fewer iterations than the fast ones
    q_prev[1] = integrate(body, q[1:2], -dt * 8.0 * np.ones((1, body.nv)))[0]  # fast: needs more
    q_all, res_all = pbad_step(body, q_prev, q, tau, dt, G)
    assert len(set(res_all.iterations.tolist())) > 1, "the batch should need different iteration counts"
    for b in range(6):
        q_one, res_one = pbad_step(body, q_prev[b:b + 1], q[b:b + 1], tau[b:b + 1], dt, G)
        assert res_one.iterations[0] == res_all.iterations[b]
        np.testing.assert_allclose(q_one[0], q_all[b], rtol=0, atol=1e-14)


def test_step_solution_matches_scipy_reference(body):
    """The LM minimiser of the step energy equals an independent BFGS minimisation (SciPy)."""
    dt = 0.02
    q_prev, q, tau = _states(body, 1, 2, dt)
    q_next, res = pbad_step(body, q_prev, q, tau, dt, G, tol=1e-12)
    data = prepare_step(body, q_prev, q, tau, dt, G)
    x0 = integrate(body, q, difference(body, q_prev, q))

    def fun(d):
        E, g, _, _ = step_energy(body, integrate(body, x0, d[None]), data, derivatives=True)
        return E[0], g[0]

    scale = 1.0 / np.sqrt(res.energy[0] ** 2 + 1.0)
    ref = minimize(lambda d: tuple(v * scale for v in fun(d)), np.zeros(body.nv), jac=True, method="BFGS",
                   options={"gtol": 1e-12, "maxiter": 5000})
    q_ref = integrate(body, x0, ref.x[None])
    assert np.max(np.abs(difference(body, q_ref, q_next))) < 1e-6


def test_gauss_newton_and_exact_hessian_reach_the_same_step():
    body = chain(6)
    q_prev, q, tau = _states(body, 3, 3, 0.05)
    a, ra = pbad_step(body, q_prev, q, tau, 0.05, G, hessian="exact", tol=1e-12)
    b, rb = pbad_step(body, q_prev, q, tau, 0.05, G, hessian="gauss_newton", tol=1e-12, max_iter=200)
    assert ra.converged.all() and rb.converged.all()
    np.testing.assert_allclose(a, b, atol=1e-9)
    assert ra.iterations.max() <= rb.iterations.max()


def test_lm_on_a_quadratic_is_one_newton_step():
    A = np.array([[[3.0, 1.0], [1.0, 2.0]]])
    c = np.array([[1.0, -1.0]])

    def value_grad(x, idx):
        E = 0.5 * np.einsum("bi,bij,bj->b", x, A, x) - np.sum(c * x, -1)
        return E, (A @ x[..., None])[..., 0] - c, None

    def hessian(ctx):
        return A.copy(), np.diagonal(A, axis1=1, axis2=2).copy()

    res = levenberg_marquardt(value_grad, hessian, lambda x, idx, d: x + d, np.zeros((1, 2)), mu0=0.0, tol=1e-12)
    np.testing.assert_allclose(res.x[0], np.linalg.solve(A[0], c[0]), atol=1e-14)
    assert res.iterations[0] <= 2 and res.converged[0]


def test_lm_reports_non_convergence():
    body = chain(4)
    q_prev, q, tau = _states(body, 2, 4, 0.05, speed=5.0)
    _, res = pbad_step(body, q_prev, q, tau, 0.05, G, max_iter=1, tol=1e-14)
    assert not res.converged.any() and np.all(res.iterations == 1)
    assert np.all(res.grad_norm > 1e-14)


@pytest.mark.parametrize("dtype", [np.float32])
def test_float32_step_converges(dtype):
    body = chain(4)
    q_prev, q, tau = (a.astype(dtype) for a in _states(body, 3, 5, 0.01))
    q_next, res = pbad_step(body, q_prev, q, tau, 0.01, G.astype(dtype), tol=1e-4)
    assert q_next.dtype == dtype and res.converged.all()


def test_lbfgs_and_lm_reach_the_same_step(body):
    q_prev, q, tau = _states(body, 3, 6, 0.01)
    a, ra = pbad_step(body, q_prev, q, tau, 0.01, G, optimizer="lm", tol=1e-11)
    b, rb = pbad_step(body, q_prev, q, tau, 0.01, G, optimizer="lbfgs", tol=1e-11)
    assert ra.converged.all() and rb.converged.all()
    assert np.max(np.abs(difference(body, a, b))) < 1e-8
    assert rb.iterations.mean() > ra.iterations.mean()


def test_simulator_with_lbfgs():
    from pbad_gym.simulator import Simulator

    sims = [Simulator(chain(5), dt=0.01, optimizer=o, num_envs=2, tol=1e-11) for o in ("lm", "lbfgs")]
    for _ in range(10):
        infos = [s.step() for s in sims]
    assert all(i["converged"].all() for i in infos)
    np.testing.assert_allclose(sims[0].q, sims[1].q, atol=1e-8)


def test_hessian_initialised_lbfgs_reaches_the_lm_step_in_few_iterations():
    body = chain(20)
    q_prev, q, tau = _states(body, 2, 7, 0.01)
    a, ra = pbad_step(body, q_prev, q, tau, 0.01, G, optimizer="lm", tol=1e-10)
    b, rb = pbad_step(body, q_prev, q, tau, 0.01, G, optimizer="lbfgs_hessian", tol=1e-10)
    c, rc = pbad_step(body, q_prev, q, tau, 0.01, G, optimizer="lbfgs", tol=1e-10, max_iter=5000)
    assert ra.converged.all() and rb.converged.all() and rc.converged.all()
    np.testing.assert_allclose(b, a, atol=1e-8)
    assert rb.iterations.max() <= 4 * ra.iterations.max() < rc.iterations.max()


def test_damping_schedule():
    """μ ÷ 3 on acceptance; on rejection × 10, at least MU_AFTER_REJECT (1e-6), at most 1e12; and LM still reaches
    the minimum of E = √(1 + x²) from x = 2, where pure Newton jumps to x = −8 (rejected)."""
    from pbad_gym.optim.lm import MU_AFTER_REJECT, _next_damping

    mu = _next_damping(np.array([3e-7, 3e-9, 5.0, 1e12]), np.array([True, False, False, False]))
    np.testing.assert_allclose(mu, [1e-7, MU_AFTER_REJECT, 50.0, 1e12])

    def value_grad(x, idx):
        E = np.sqrt(1.0 + x[:, 0] ** 2)
        return E, (x[:, 0] / E)[:, None], x

    def hessian(x):
        return ((1.0 + x[:, 0] ** 2) ** -1.5)[:, None, None], np.ones((x.shape[0], 1))

    res = levenberg_marquardt(value_grad, hessian, lambda x, idx, d: x + d, np.array([[2.0]]), tol=1e-10)
    assert res.converged[0] and abs(res.x[0, 0]) < 1e-9


@pytest.mark.parametrize("compact", [True, False])
def test_a_rejected_step_is_retried_at_most_half_as_long(compact):
    """After a rejection μ grows, solving only, until the next trial is at most STEP_SHRINK of the rejected step's
    D-norm: from x = 10 on E = √(1 + x²), Newton's step (−1010) and the ones that barely damp it are never tried
    twice, in either lock-step mode, and LM still converges, with fewer trials than one per decade of μ."""
    from pbad_gym.optim.lm import STEP_SHRINK

    tried = []

    def value_grad(x, idx):
        tried.append(x[:, 0].copy())
        E = np.sqrt(1.0 + x[:, 0] ** 2)
        return E, (x[:, 0] / E)[:, None], (x,)  # a ctx without ndarray.take

    def hessian(ctx):
        x = ctx[0]
        return ((1.0 + x[:, 0] ** 2) ** -1.5)[:, None, None], np.ones((x.shape[0], 1))

    x0 = np.array([[10.0], [0.5]])  # the second row converges by plain Newton steps
    res = levenberg_marquardt(value_grad, hessian, lambda x, idx, d: x + d, x0, tol=1e-10, compact=compact)
    assert res.converged.all() and np.abs(res.x).max() < 1e-9
    first, second = tried[1][0] - 10.0, tried[2][0] - 10.0  # the first two trials of row 0, both from x = 10
    assert first < -1000 and abs(second) <= STEP_SHRINK * abs(first)
    assert res.iterations[0] <= 12
