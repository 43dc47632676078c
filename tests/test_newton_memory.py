"""The Newton memory (integrators/newton.py): the second-order warm start, the chord first iteration, what the
State keeps between steps, and the same decisions in the NumPy engine and the numba kernel."""
import warnings

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (registers the environments)
from pbad_gym import Simulator
from pbad_gym.integrators.newton import SMOOTH, TRUST, chord_solve, cholesky_rows, predictor_trust, warm_start
from pbad_gym.kinematics import integrate
from pbad_gym.model import chain
from pbad_gym.optim import levenberg_marquardt


def test_warm_start_is_exact_for_motion_quadratic_in_time():
    """Hinge coordinates are Euclidean: extrapolating the last two differences is exact for q(t) = a + bt + ct²,
    and the first-order guess is off by 2c·Δt²; without q_{k−3} (history2 False) the start is second order."""
    body = chain(4)
    rng = np.random.default_rng(0)
    a, b, c = (rng.uniform(-1, 1, (3, body.nq)) * s for s in (1.0, 1.0, 0.5))
    dt = 0.01
    q = [a + b * t + c * t * t for t in (0.0, dt, 2 * dt, 3 * dt)]
    pred = integrate(body, q[2], q[2] - q[1])
    none = np.zeros(3, bool)
    x0, smooth = warm_start(body, q[0], q[1], q[2], pred, np.ones(3, bool), q[0], none)
    assert smooth.all()
    np.testing.assert_allclose(x0, q[3], atol=1e-14)
    np.testing.assert_allclose(pred - q[3], -2 * c * dt * dt, atol=1e-14)
    x0, smooth = warm_start(body, q[0], q[1], q[2], pred, np.array([True, False, True]), q[0], none)
    assert smooth.tolist() == [True, False, True] and np.array_equal(x0[1], pred[1])


def test_warm_start_is_third_order_where_q_k_minus_3_is_known():
    """On motion cubic in time the second-order start is off by 6d·Δt³ (d the cubic coefficient); with q_{k−3}
    the start extrapolates the third difference too and is exact, row by row where history2 is set; where the
    third difference jumps (a change of the actuation) it is left out."""
    body = chain(4)
    rng = np.random.default_rng(2)
    a, b, c, d = (rng.uniform(-1, 1, (3, body.nq)) * s for s in (1.0, 1.0, 0.5, 5.0))
    dt = 0.001
    q = [a + b * t + c * t * t + d * t ** 3 for t in (0.0, dt, 2 * dt, 3 * dt, 4 * dt)]
    pred = integrate(body, q[3], q[3] - q[2])
    history2 = np.array([True, False, True])
    x0, smooth = warm_start(body, q[1], q[2], q[3], pred, np.ones(3, bool), q[0], history2)
    assert smooth.all()
    assert np.abs(x0[1] - q[4][1]).max() > 1e-9  # (what the third order removes)
    np.testing.assert_allclose(x0[history2], q[4][history2], atol=1e-12)
    np.testing.assert_allclose(x0[1] - q[4][1], -6 * d[1] * dt ** 3, atol=1e-12)
    kicked = q[0].copy()
    kicked[2] += 10 * np.abs(q[3][2] - 2 * q[2][2] + q[1][2]).max()  # Δ³q far beyond SMOOTH·Δ²q
    x1, _ = warm_start(body, q[1], q[2], q[3], pred, np.ones(3, bool), kicked, history2)
    second = integrate(body, q[3], 2 * (q[3] - q[2]) - (q[2] - q[1]))
    np.testing.assert_allclose(x1[2], second[2], atol=1e-14)
    np.testing.assert_array_equal(x1[0], x0[0])


def test_warm_start_falls_back_where_the_motion_is_not_smooth():
    """Where the last step's motion changed by more than SMOOTH of itself (an impact, a violent large step) the
    first-order guess is kept and the chord step is not tried."""
    body = chain(3)
    q_back, q_prev = np.zeros((2, body.nq)), np.zeros((2, body.nq))
    q_back[:, 0] = [-0.01, 0.01]  # row 0: moving steadily at 0.01 per step; row 1: reversed
    q = np.full((2, body.nq), 0.0)
    q[:, 0] = 0.01
    pred = integrate(body, q, q - q_prev)
    x0, smooth = warm_start(body, q_back, q_prev, q, pred, np.ones(2, bool), q_back, np.zeros(2, bool))
    assert smooth.tolist() == [True, False]
    np.testing.assert_array_equal(x0[1], pred[1])
    assert SMOOTH == 0.5


def test_predictor_trust_judges_the_extrapolation_by_the_step_it_predicted():
    """On motion cubic in time the second-order start's error is O(Δt³) against the first-order one's O(Δt²): trusted.
    Where the solutions carry an alternating error (the ringing of a stiff mode: +e, −e, +e) the extrapolation
    amplifies it 7-fold against 3-fold: not trusted. Rows without q_{k−2} (history False) are trusted."""
    body = chain(3)
    rng = np.random.default_rng(1)
    a, b, c, d = (rng.uniform(-1, 1, (4, body.nq)) * s for s in (1.0, 1.0, 0.5, 0.5))
    dt = 0.001
    q = [a + b * t + c * t * t + d * t ** 3 for t in (0.0, dt, 2 * dt, 3 * dt)]
    assert predictor_trust(body, *q, np.ones(4, bool)).all()
    e = 1e-5 * np.array([1.0, -1.0, 1.0, -1.0])
    ringing = [x + s * 1e-5 * np.sign(x) for x, s in zip(q, e / 1e-5)]
    assert not predictor_trust(body, *ringing, np.ones(4, bool)).any()
    assert predictor_trust(body, *ringing, np.zeros(4, bool)).all()
    # the test itself: second-order error against TRUST times the first-order one, coordinate-wise maxima
    u = q[3] - q[2]
    d1, d2 = q[2] - q[1], (q[2] - q[1]) - (q[1] - q[0])
    ratio = np.abs(u - d1 - d2).max(-1) / np.abs(u - d1).max(-1)
    assert (ratio < TRUST).all() and TRUST == 0.25


def test_the_trust_gate_keeps_a_long_chain_from_ringing():
    """An 80-link chain at 0.001 s: ungated, the second-order start rang on its tip modes (1.77 LM iterations per step
    from step ~300 on, against 1.00 without the memory); gated by predictor_trust, and with its one chord step on
    every step, it takes no more than 5 % more iterations than the memoryless solve (each a chord step, not a
    Hessian and its factorisation), and the rows whose trust was withdrawn show it in their memory."""
    pytest.importorskip("numba")
    its = {}
    for memory in (True, False):
        sim = Simulator(chain(80), dt=0.001, num_envs=2, backend="numba", tol=1e-7, newton_memory=memory)
        sim.step(None, substeps=250)
        its[memory] = sim.step(None, substeps=250)["iterations"].mean() / 250
        withdrawn = 0
        sim.step(None, substeps=250)
        for _ in range(300 if memory else 0):  # (steps 750-1050)
            sim.step(None)
            withdrawn += int((~sim.state.newton.trust).sum())
        assert withdrawn > 0 or not memory
    assert its[True] <= 1.05 * its[False] and its[False] <= 1.0


def test_chord_solve_is_the_newton_step_of_the_factored_matrix():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 6, 6))
    A = X @ np.swapaxes(X, 1, 2) + 6 * np.eye(6)
    g = rng.standard_normal((4, 6))
    L, ok = cholesky_rows(A)
    assert ok.all()
    np.testing.assert_allclose(chord_solve(L, g), -np.linalg.solve(A, g[..., None])[..., 0], rtol=1e-12)
    A[2] = -A[2]  # indefinite: no factor for that row alone
    L, ok = cholesky_rows(A)
    assert ok.tolist() == [True, True, False, True] and not L[2].any()


def test_lm_reports_the_last_system_it_solved():
    """A quadratic: one Newton step from any start, and the system it solved is H + μ0·diag(D)."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((3, 5, 5))
    H = X @ np.swapaxes(X, 1, 2) + 5 * np.eye(5)
    x_star = rng.standard_normal((3, 5))

    def value_grad(x, idx):
        h, xs = (H, x_star) if idx is None else (H[idx], x_star[idx])
        d = x - xs
        return 0.5 * np.einsum("bi,bij,bj->b", d, h, d), np.einsum("bij,bj->bi", h, d), h

    res = levenberg_marquardt(value_grad, lambda h: (h, np.ones(h.shape[:2])), lambda x, idx, dx: x + dx,
                              np.zeros((3, 5)), tol=1e-12, track_system=True)
    np.testing.assert_allclose(res.x, x_star, atol=1e-10)
    s = res.system
    assert s.solved.all() and s.finite.all()
    np.testing.assert_array_equal(s.H, H)
    assert (s.mu > 0).all() and (s.mu <= 1e-6).all()
    with pytest.raises(ValueError, match="compact"):
        levenberg_marquardt(value_grad, lambda h: (h, np.ones(h.shape[:2])), lambda x, idx, dx: x + dx,
                            np.zeros((3, 5)), track_system=True, compact=False)


def _chain_run(backend, memory, steps=300, n=10, rows=4):
    sim = Simulator(chain(n), dt=0.001, num_envs=rows, backend=backend, tol=1e-7, newton_memory=True)
    its = 0
    for _ in range(steps):
        if not memory:
            sim.state = sim.state._replace(newton=None)
        its += int(sim.step(None)["iterations"].sum())
    return sim, its / (steps * rows)


def test_memory_saves_hessians_at_no_more_iterations(monkeypatch):
    """A 10-link chain released at 0.001 s: with the memory one step in ten forms a Hessian (without: every step),
    at no more iterations."""
    from pbad_gym.integrators import pbad

    rows = [0]
    hessian = pbad.step_hessian

    def counted(body, ctx):
        rows[0] += ctx.kin.R.shape[0]
        return hessian(body, ctx)

    monkeypatch.setattr(pbad, "step_hessian", counted)
    _, its_mem = _chain_run("numpy", True)
    with_memory, rows[0] = rows[0], 0
    _, its_ref = _chain_run("numpy", False)
    assert with_memory < 0.2 * rows[0] and its_mem <= 1.05 * its_ref


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_memory_changes_a_step_only_within_the_tolerance(backend):
    """From the same states, a step with and without the memory: the same q_{k+1} to the solver tolerance (the
    chain is chaotic, so whole trajectories part at the rate its motion separates any two nearby ones). The
    measure max_j |g_j|/D_j < 1e-7 bounds a solution's error up to the coupling of D⁻¹H, ~10 on this chain."""
    if backend == "numba":
        pytest.importorskip("numba")
    sim, _ = _chain_run(backend, True, steps=100)
    for _ in range(20):
        start = sim.snapshot()
        sim.step(None)
        with_memory = np.array(sim.q)
        sim.restore(start._replace(newton=None))
        sim.step(None)
        np.testing.assert_allclose(with_memory, sim.q, rtol=0, atol=1e-5)
        sim.restore(start)
        sim.step(None)


def test_engines_take_the_same_decisions_with_the_memory():
    """NumPy and the kernel, Spider-v3 (contact, the cone's re-solves, armature) for 4 env steps of 50 physics
    steps: the same trajectories, iteration counts and memories."""
    pytest.importorskip("numba")
    out = []
    for backend in ("numpy", "numba"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make_vec("pbad_gym/Spider-v3", num_envs=3, vectorization_mode="vector_entry_point",
                               backend=backend, newton_memory=True)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        its = []
        for _ in range(4):
            _, _, _, _, info = env.step(rng.uniform(-1, 1, (3,) + env.single_action_space.shape))
            its.append(np.asarray(info["iterations"]))
        out.append((env.unwrapped.sim.state, its))
    (a, ia), (b, ib) = out
    np.testing.assert_allclose(b.q, a.q, atol=1e-10)
    np.testing.assert_array_equal(np.array(ib), np.array(ia))
    assert b.newton.valid.tolist() == a.newton.valid.tolist() and a.newton.valid.any()
    assert b.newton.trust.tolist() == a.newton.trust.tolist()
    np.testing.assert_allclose(b.newton.factor, a.newton.factor, rtol=1e-8, atol=1e-6)
    np.testing.assert_allclose(b.newton.q_back, a.newton.q_back, atol=1e-10)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_reset_row_forgets_its_memory(backend):
    if backend == "numba":
        pytest.importorskip("numba")
    sim = Simulator(chain(3), dt=0.001, num_envs=3, backend=backend, newton_memory=True)
    assert sim.state.newton is None
    for _ in range(3):
        sim.step(None)
    assert sim.state.newton.history.all() and sim.state.newton.valid.all()
    sim.reset(rows=[1])
    m = sim.state.newton
    assert m.history.tolist() == [True, False, True] and m.valid.tolist() == [True, False, True]
    assert m.trust[1]
    sim.step(None)
    assert sim.state.newton.history.all()
    sim.reset()
    assert sim.state.newton is None


def test_one_kernel_call_of_substeps_equals_single_calls():
    """The memory travels in the State: n substeps in one call and n calls of one substep give the same numbers."""
    pytest.importorskip("numba")
    sims = [Simulator(chain(6), dt=0.001, num_envs=2, backend="numba", newton_memory=True) for _ in range(2)]
    for s in sims:
        s.reset(qd=np.full((2, 6), 1.5))
    for _ in range(3):
        sims[0].step(None, substeps=10)
        for _ in range(10):
            sims[1].step(None)
    np.testing.assert_array_equal(sims[0].q, sims[1].q)
    np.testing.assert_array_equal(sims[0].state.newton.factor, sims[1].state.newton.factor)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_memory_is_on_unless_switched_off(backend):
    """By default a State carries a memory; with newton_memory=False none, and a step is the memoryless one: the
    same numbers as a step whose State had its memory dropped; a bad value names the argument."""
    if backend == "numba":
        pytest.importorskip("numba")
    assert Simulator(chain(6), dt=0.001, num_envs=2, backend=backend).options.newton_memory is True
    plain = Simulator(chain(6), dt=0.001, num_envs=2, backend=backend, tol=1e-7, newton_memory=False)
    remembering = Simulator(chain(6), dt=0.001, num_envs=2, backend=backend, tol=1e-7)
    for _ in range(30):
        plain.step(None)
        remembering.step(None)
        remembering.state = remembering.state._replace(newton=None)
    assert plain.state.newton is None
    np.testing.assert_array_equal(plain.q, remembering.q)
    with pytest.raises(ValueError, match="newton_memory"):
        Simulator(chain(2), dt=0.001, newton_memory="yes")
