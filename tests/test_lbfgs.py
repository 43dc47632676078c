import numpy as np
import pytest
from scipy.optimize import minimize

from pbad_gym.kinematics import quat_conj, quat_exp, quat_mul
from pbad_gym.optim import lbfgs, levenberg_marquardt


def _add(x, idx, dx):
    return x + dx


def _rosen(x, idx):
    a, b = x[:, :-1], x[:, 1:]
    E = np.sum(100.0 * (b - a * a) ** 2 + (1.0 - a) ** 2, -1)
    g = np.zeros_like(x)
    g[:, :-1] += -400.0 * a * (b - a * a) - 2.0 * (1.0 - a)
    g[:, 1:] += 200.0 * (b - a * a)
    return E, g, None


def _rosen_hessian(x):
    n = x.shape[1]
    H = np.zeros((x.shape[0], n, n))
    i = np.arange(n - 1)
    a, b = x[:, :-1], x[:, 1:]
    H[:, i, i] += 1200.0 * a * a - 400.0 * b + 2.0
    H[:, i + 1, i + 1] += 200.0
    H[:, i, i + 1] = H[:, i + 1, i] = -400.0 * a
    return H


def _rosen_starts(n, B=5, seed=0):
    x0 = np.random.default_rng(seed).uniform(-1.5, 1.5, (B, n))
    x0[0] = -1.2  # the classic start (n = 2: (−1.2, −1.2))
    return x0


def _monotone(res):
    hist = np.array(res.energy_history)
    for b in range(hist.shape[1]):
        e = hist[:, b][np.isfinite(hist[:, b])]
        assert np.all(np.diff(e) <= 64 * np.finfo(float).eps * np.abs(e).max())


@pytest.mark.parametrize("n", [2, 10])
@pytest.mark.parametrize("history", [3, 10])
def test_rosenbrock_converges_monotonically(n, history):
    res = lbfgs(_rosen, _add, _rosen_starts(n), tol=1e-10, history=history, record_history=True)
    assert res.converged.all()
    np.testing.assert_allclose(res.x, 1.0, atol=1e-9)
    assert np.all(res.grad_norm < 1e-10)
    assert np.all(res.function_evals >= res.iterations + 1)
    assert len(set(res.iterations.tolist())) > 1  # the starts differ: so do the iteration counts
    assert len(res.energy_history) == res.iterations.max()
    _monotone(res)


def _quadratics(B, n, seed):
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((B, n, n)))[0]
    lam = np.exp(rng.uniform(0.0, np.log(100.0), (B, n)))  # condition numbers up to 100
    # |E*| = O(1): an energy-based line search (SciPy's) resolves x only to ~sqrt(eps·|E*|/λ_min)
    return Q @ (lam[..., None] * np.swapaxes(Q, 1, 2)), 0.5 * rng.standard_normal((B, n))


def _quad_lse(A, c, W):
    """E = ½xᵀAx − cᵀx + log Σ_k exp(w_kᵀx): strictly convex, not quadratic (W None: the pure quadratic)."""

    def value_grad(x, idx):
        Ai, ci = (A, c) if idx is None else (A[idx], c[idx])
        Ax = (Ai @ x[..., None])[..., 0]
        E, g = 0.5 * np.sum(x * Ax, -1) - np.sum(ci * x, -1), Ax - ci
        if W is not None:
            z = x @ W.T
            zm = z.max(-1, keepdims=True)
            p = np.exp(z - zm)
            E = E + np.log(p.sum(-1)) + zm[:, 0]
            g = g + (p / p.sum(-1, keepdims=True)) @ W
        return E, g, None

    return value_grad


@pytest.mark.parametrize("lse", [False, True])
def test_agrees_with_scipy_lbfgsb(lse):
    B, n = 4, 8
    A, c = _quadratics(B, n, 1)
    W = 1.5 * np.random.default_rng(2).standard_normal((5, n)) if lse else None
    vg = _quad_lse(A, c, W)
    x0 = np.random.default_rng(3).standard_normal((B, n))
    res = lbfgs(vg, _add, x0, tol=1e-11)
    assert res.converged.all()
    for b in range(B):
        ref = minimize(lambda v: tuple(a[0] for a in vg(v[None], np.array([b]))[:2]), x0[b], jac=True,
                       method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 0.0, "maxiter": 10000})
        np.testing.assert_allclose(res.x[b], ref.x, rtol=0, atol=1e-7)
        assert res.energy[b] <= ref.fun + 1e-12
    if not lse:  # the pure quadratic has a closed-form minimiser
        np.testing.assert_allclose(res.x, np.linalg.solve(A, c[..., None])[..., 0], atol=1e-9)


def test_masking_gives_each_trajectory_its_solo_result():
    x0 = _rosen_starts(4, B=6, seed=4)
    x0[1] = 1.0  # already at the minimum: converges with 0 iterations while the others run
    res = lbfgs(_rosen, _add, x0, tol=1e-10, history=5, record_history=True)
    assert res.iterations[1] == 0 and len(set(res.iterations.tolist())) > 2
    hist = np.array(res.energy_history)
    for b in range(6):
        one = lbfgs(_rosen, _add, x0[b:b + 1], tol=1e-10, history=5, record_history=True)
        assert one.iterations[0] == res.iterations[b] and one.function_evals[0] == res.function_evals[b]
        assert np.array_equal(one.x[0], res.x[b]) and one.energy[0] == res.energy[b]
        h = hist[: res.iterations[b], b]
        assert np.array_equal(h, np.array(one.energy_history).reshape(-1))
        assert np.all(np.isnan(hist[res.iterations[b]:, b]))


def test_value_grad_sees_only_the_active_trajectories():
    seen = []

    def vg(x, idx):
        seen.append(None if idx is None else idx.copy())
        assert idx is None or len(idx) == x.shape[0]
        return _rosen(x, idx)

    x0 = _rosen_starts(2, B=3)
    x0[2] = 1.0
    lbfgs(vg, _add, x0, tol=1e-10)
    assert seen[0] is None  # the first evaluation is the whole batch
    assert all(s is not None and 2 not in s for s in seen[1:])  # converged at once: never evaluated again


def test_unit_quaternion_with_manifold_retraction():
    """min qᵀSq over unit quaternions, q ⊕ δ = q ⊗ exp(δ): the minimiser is ± the eigenvector of S's least
    eigenvalue."""
    rng = np.random.default_rng(5)
    B = 4
    M = rng.standard_normal((B, 4, 4))
    S = M @ np.swapaxes(M, 1, 2)

    def vg(q, idx):
        Si = S if idx is None else S[idx]
        Sq = (Si @ q[..., None])[..., 0]
        # d/dδ f(q ⊗ exp(δ)) at 0 = ½ (q̄ ⊗ ∇f)_vec with ∇f = 2Sq
        return np.sum(q * Sq, -1), quat_mul(quat_conj(q), Sq)[:, 1:], None

    q0 = quat_exp(rng.standard_normal((B, 3)))
    res = lbfgs(vg, lambda q, idx, d: quat_mul(q, quat_exp(d)), q0, tol=1e-10, record_history=True)
    lam, V = np.linalg.eigh(S)
    assert res.converged.all()
    np.testing.assert_allclose(res.energy, lam[:, 0], rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(res.x * V[:, :, 0], -1)), 1.0, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(res.x, axis=-1), 1.0, atol=1e-12)
    _monotone(res)


def test_scale_sets_the_convergence_test_like_lm():
    B, n = 3, 6
    A, c = _quadratics(B, n, 6)
    vg = _quad_lse(A, c, None)
    x0 = np.zeros((B, n))
    D = np.diagonal(A, axis1=1, axis2=2).copy()
    for s in (D, 1e4 * D):
        res = lbfgs(vg, _add, x0, tol=1e-8, scale=s)
        g = vg(res.x, None)[1]
        assert res.converged.all()
        np.testing.assert_array_equal(res.grad_norm, np.max(np.abs(g) / s, -1))
        assert np.all(res.grad_norm < 1e-8)
    assert np.max(np.abs(g)) > 1e-8  # the large scale stopped where the unscaled test would not have
    lm = levenberg_marquardt(vg, lambda ctx: (A.copy(), D.copy()), _add, x0, tol=1e-8)
    lm_g = vg(lm.x, None)[1]
    np.testing.assert_array_equal(lm.grad_norm, np.max(np.abs(lm_g) / D, -1))  # the same measure
    # a diagonal quadratic with scale = its diagonal: H0 is the exact inverse Hessian, one step (LM: one too)
    h = np.array([[1e4, 1.0, 1e-2]])
    res = lbfgs(lambda x, idx: (0.5 * np.sum(h * (x - 1.0) ** 2, -1), h * (x - 1.0), None), _add, np.zeros((1, 3)),
                tol=1e-12, scale=h)
    assert res.iterations[0] == 1 and res.function_evals[0] == 2 and res.converged[0]


def test_reports_non_convergence():
    res = lbfgs(_rosen, _add, _rosen_starts(10), max_iter=2, tol=1e-10)
    assert not res.converged.any()
    assert np.all(res.iterations == 2)
    assert np.all(res.grad_norm > 1e-10)


def test_float32():
    res = lbfgs(_rosen, _add, _rosen_starts(2).astype(np.float32), tol=1e-3)
    assert res.x.dtype == np.float32 and res.converged.all()
    np.testing.assert_allclose(res.x, 1.0, atol=1e-3)


def test_wrong_gradient_stops_instead_of_looping():
    """A gradient of the wrong sign never gives an Armijo point: the trajectory stops unconverged, x untouched."""
    x0 = _rosen_starts(2, B=2)

    def vg(x, idx):
        E, g, _ = _rosen(x, idx)
        return E, -g, None

    res = lbfgs(vg, _add, x0, max_iter=50)
    assert not res.converged.any() and np.all(res.iterations == 0)
    assert np.all(res.function_evals == 21)  # the initial evaluation and 20 trials
    np.testing.assert_array_equal(res.x, x0)


def test_two_loop_secant_condition_and_reset():
    """H y = s for the newest pair; a reset trajectory (stale slots still in the buffer) gets exactly −H0 g."""
    from pbad_gym.optim.lbfgs import _direction, _Memory

    rng = np.random.default_rng(7)
    B, m, n = 3, 4, 6
    mem = _Memory(np, B, m, n, float)
    rows = np.arange(B)
    for _ in range(m + 2):  # wraps around the ring buffer
        s = rng.standard_normal((B, n))
        mem.push(rows, s, s + 0.3 * rng.standard_normal((B, n)))  # sᵀy > 0: all kept
    assert np.all(mem.count == m)
    mem.push(rows[:1], np.ones((1, n)), -np.ones((1, n)))  # sᵀy < 0: skipped
    assert mem.count[0] == m and mem.head[0] == mem.head[1]
    newest = (mem.head - 1) % m
    s_new, y_new = mem.S[rows, newest], mem.Y[rows, newest]
    d, _, _ = _direction(mem, rows, y_new, None)
    np.testing.assert_allclose(-d, s_new, rtol=1e-12, atol=1e-12)
    mem.reset(rows[1:2])
    g = rng.standard_normal((B, n))
    scale = rng.uniform(0.5, 2.0, (B, n))
    d, gd, t0 = _direction(mem, rows, g, scale)
    np.testing.assert_array_equal(d[1], -(1.0 / scale[1]) * g[1])  # bit for bit: the stale slots add zeros
    assert np.all(gd < 0) and np.all(t0 == 1.0)
