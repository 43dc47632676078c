"""Correctness of pbad_gym.lcp.solve: complementarity, reference solutions, AMGS ≡ PGS at Ω = D, dense ≡
matrix-free, batched ≡ one at a time (with padding), warm start."""
import numpy as np
import pytest
from scipy.linalg import solve_triangular
from scipy.optimize import lsq_linear

from pbad_gym import lcp

METHOD_CASES = [("pgs", {}), ("psor", {"omega": 1.3}), ("amgs", {}), ("amgs", {"theta": 0.5}),
                ("block_pgs", {})]


def friction_problem(seed=0, c=8, ratio=1.0):
    return lcp.random_contact_problem(np.random.default_rng(seed), n_contacts=c, mu=0.6, mass_ratio=ratio)


def reference_box_qp(A, b, lo, hi):
    """min ½λᵀAλ + bᵀλ in the box ⇔ min ‖Lᵀλ + L⁻¹b‖² (A = LLᵀ), solved by SciPy's BVLS."""
    L = np.linalg.cholesky(A)
    rhs = -solve_triangular(L, b, lower=True)
    return lsq_linear(L.T, rhs, bounds=(lo, hi), method="bvls", tol=1e-14).x


@pytest.mark.parametrize("method,kw", METHOD_CASES)
def test_complementarity_on_random_problems(method, kw):
    for P in (friction_problem(1), lcp.random_spd_problem(np.random.default_rng(2), batch=3, m=15, cond=30)):
        res = lcp.solve(**P.kwargs(), method=method, max_iter=3000, tol=1e-10, **kw)
        assert bool(np.all(res.converged)), (P.name, res.residual_inf)
        # independent check of the reported residual, from A itself
        inf = lcp.natural_residual(P.A, P.b, res.lam, P.lo, P.hi, friction=P.friction, norm="inf")
        rel = lcp.natural_residual(P.A, P.b, res.lam, P.lo, P.hi, friction=P.friction, norm="rel2")
        assert np.all(inf < 1e-9) and np.all(rel < 1e-9)
        np.testing.assert_allclose(inf, res.residual_inf, rtol=1e-6, atol=1e-14)
        # boxes hold at the returned λ, friction cones included
        lo, hi = lcp.effective_bounds(res.lam, P.lo, P.hi, P.friction)
        assert np.all(res.lam >= lo - 1e-12) and np.all(res.lam <= hi + 1e-12)


@pytest.mark.parametrize("method,kw", METHOD_CASES)
def test_matches_bounded_least_squares_reference(method, kw):
    P = lcp.random_spd_problem(np.random.default_rng(3), batch=4, m=12, cond=50)
    res = lcp.solve(**P.kwargs(), method=method, max_iter=5000, tol=1e-12, **kw)
    for k in range(4):
        ref = reference_box_qp(P.A[k], P.b[k], P.lo[k], P.hi[k])
        np.testing.assert_allclose(res.lam[k], ref, atol=1e-8)


def test_plain_lcp_default_bounds_matches_reference():
    P = lcp.random_spd_problem(np.random.default_rng(4), batch=2, m=10, cond=10, boxed=False)
    res = lcp.solve(P.A, P.b, max_iter=2000, tol=1e-12)
    for k in range(2):
        ref = reference_box_qp(P.A[k], P.b[k], np.zeros(10), np.full(10, np.inf))
        np.testing.assert_allclose(res.lam[k], ref, atol=1e-8)
    assert np.all(res.lam >= 0)


@pytest.mark.parametrize("name", ["capsule", "three_sphere", "friction", "spd_box"])
def test_amgs_with_omega_D_is_pgs_iterate_for_iterate(name):
    P = {"capsule": lcp.sliding_capsule, "three_sphere": lcp.three_sphere_body,
         "friction": lambda: friction_problem(5, c=6),
         "spd_box": lambda: lcp.random_spd_problem(np.random.default_rng(6), batch=2, m=9)}[name]()
    for k in range(1, 7):
        pgs = lcp.solve(**P.kwargs(), method="pgs", max_iter=k, tol=0.0)
        amgs = lcp.solve(**P.kwargs(), method="amgs", theta=1.0, max_iter=k, tol=0.0)
        np.testing.assert_allclose(amgs.lam, pgs.lam, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(amgs.error_history, pgs.error_history, rtol=1e-10, atol=1e-14)


def test_amgs_theta_is_psor_on_free_rows_but_not_on_bounded_rows():
    P = lcp.random_spd_problem(np.random.default_rng(7), batch=2, m=8, boxed=False)
    theta = 0.6
    omega = 2.0 / (1.0 + theta)
    free = dict(lo=np.full((2, 8), -np.inf), hi=np.full((2, 8), np.inf))
    a = lcp.solve(P.A, P.b, method="amgs", theta=theta, max_iter=5, tol=0.0, **free)
    s = lcp.solve(P.A, P.b, method="psor", omega=omega, max_iter=5, tol=0.0, **free)
    np.testing.assert_allclose(a.lam, s.lam, rtol=1e-12, atol=1e-14)
    # with active lower bounds the x₋ memory makes AMGS differ from PSOR (yet both converge)
    a = lcp.solve(P.A, P.b, method="amgs", theta=theta, max_iter=5, tol=0.0)
    s = lcp.solve(P.A, P.b, method="psor", omega=omega, max_iter=5, tol=0.0)
    assert np.abs(a.lam - s.lam).max() > 1e-6


def test_amgs_friction_shift_converges_and_respects_cones():
    P = friction_problem(8, c=10, ratio=10.0)
    for theta in (0.5, 1.0, 2.0):
        res = lcp.solve(**P.kwargs(), method="amgs", theta=theta, max_iter=5000, tol=1e-10)
        assert res.converged[0], (theta, res.residual_inf)
        lam = res.lam[0]
        ni, mu = P.friction.normal_index[0], P.friction.mu[0]
        t = ni >= 0
        assert np.all(np.abs(lam[t]) <= mu[t] * lam[ni[t]] + 1e-12)
        assert np.all(lam[~t] >= 0)


@pytest.mark.parametrize("method,kw", METHOD_CASES)
def test_dense_and_matrix_free_agree(method, kw):
    P = friction_problem(9, c=7)
    d = lcp.solve(**P.kwargs(), method=method, max_iter=25, tol=0.0, **kw)
    f = lcp.solve(**P.mf_kwargs(), method=method, max_iter=25, tol=0.0, **kw)
    scale = np.abs(d.lam).max()
    np.testing.assert_allclose(f.lam, d.lam, rtol=0, atol=1e-12 * scale)
    # with tol = 0 a form whose residual rounds to exactly 0 stops there: compare the sweeps both ran
    k = min(f.error_history.shape[1], d.error_history.shape[1])
    np.testing.assert_allclose(f.error_history[:, :k], d.error_history[:, :k], rtol=1e-8, atol=1e-13)
    for r in (d, f):  # a shorter history ends at an exact zero
        assert r.error_history.shape[1] == 25 or r.error_history[0, -1] == 0.0


@pytest.mark.parametrize("order", ["default", "error", "mass_asc"])
@pytest.mark.parametrize("method,kw", METHOD_CASES)
def test_batched_with_padding_equals_one_at_a_time(method, kw, order):
    if method == "block_pgs" and order != "default":
        pytest.skip("block_pgs orders contacts: default/random only")
    probs = [friction_problem(s, c=c) for s, c in ((10, 3), (11, 6), (12, 4))]
    S = lcp.stack_problems(probs)
    for mf in (False, True):
        kwargs = S.mf_kwargs() if mf else S.kwargs()
        # padded entries hold garbage; the mask must keep them out
        if not mf:
            kwargs["A"] = np.where(S.mask[:, :, None] & S.mask[:, None, :], S.A, 7.0)
        kwargs["b"] = np.where(S.mask, S.b, -3.0)
        batch = lcp.solve(**kwargs, method=method, order=order, max_iter=300, tol=1e-9, **kw)
        for k, P in enumerate(probs):
            one = lcp.solve(**(P.mf_kwargs() if mf else P.kwargs()), method=method, order=order, max_iter=300,
                            tol=1e-9, **kw)
            m = P.m
            assert np.all(batch.lam[k, m:] == 0.0)
            if order == "error":
                # the order is a sort of round-off-level residuals: near-ties may break differently between
                # the batched and the single matmul, so only the answer (to tol) and the effort must agree
                np.testing.assert_allclose(batch.lam[k, :m], one.lam[0], atol=1e-7)
                assert abs(int(batch.iterations[k]) - int(one.iterations[0])) <= 2
                continue
            np.testing.assert_allclose(batch.lam[k, :m], one.lam[0], rtol=1e-10, atol=1e-12)
            assert batch.iterations[k] == one.iterations[0]
            it = int(one.iterations[0])
            np.testing.assert_allclose(batch.error_history[k, :it], one.error_history[0, :it], rtol=1e-8,
                                       atol=1e-14)


@pytest.mark.parametrize("method,kw", METHOD_CASES)
def test_warm_start_from_solution_needs_at_most_one_sweep(method, kw):
    P = friction_problem(13, c=6)
    sol = lcp.solve(**P.kwargs(), method=method, max_iter=3000, tol=1e-11, **kw)
    again = lcp.solve(**P.kwargs(), method=method, max_iter=50, tol=1e-9, warm_start=sol.lam, **kw)
    assert again.iterations[0] <= 1 and again.converged[0]
    cold = lcp.solve(**P.kwargs(), method=method, max_iter=50, tol=1e-9, **kw)
    assert cold.iterations[0] > 1  # the warm start is what made it fast


def test_converged_elements_freeze():
    P = lcp.random_spd_problem(np.random.default_rng(14), batch=3, m=10)
    res = lcp.solve(**P.kwargs(), max_iter=500, tol=1e-6)
    it = res.iterations
    assert it.min() < it.max()  # elements converge at different sweeps
    k = int(np.argmin(it))
    h = res.error_history[k]
    assert np.all(h[it[k] - 1:] == h[it[k] - 1])
    single = lcp.solve(P.A[k:k + 1], P.b[k:k + 1], P.lo[k:k + 1], P.hi[k:k + 1], max_iter=500, tol=1e-6)
    np.testing.assert_allclose(res.lam[k], single.lam[0], rtol=1e-12, atol=1e-14)
