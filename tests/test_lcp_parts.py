"""Building blocks of pbad_gym.lcp: residual, friction bounds, block solve, orders, permutation batches, seed
problems."""
import itertools

import numpy as np
import pytest

from pbad_gym import lcp
from pbad_gym.lcp.orders import fixed_order


def test_natural_residual_hand_cases():
    A = np.array([[[2.0]]])
    b = np.array([[-2.0]])
    # λ = 0: w = -2, clip(0 + 2, 0, ∞) = 2 -> residual 2; at the solution λ = 1 it is 0
    assert lcp.natural_residual(A, b, np.array([[0.0]]))[0] == pytest.approx(2.0)
    assert lcp.natural_residual(A, b, np.array([[1.0]]))[0] == pytest.approx(0.0)
    # relative 2-norm divides by ‖b‖
    assert lcp.natural_residual(A, b, np.array([[0.0]]), norm="rel2")[0] == pytest.approx(1.0)
    # upper bound 0.5: λ = 0.5 is the solution (w = -1 ≤ 0 at the upper bound)
    assert lcp.natural_residual(A, b, np.array([[0.5]]), np.array([[0.0]]), np.array([[0.5]]))[0] == 0.0


def test_friction_bounds_follow_the_normal_at_the_given_lambda():
    fr = lcp.Friction.per_contact(1, 0.5)
    lam = np.array([[2.0, 3.0, -0.4]])
    lo, hi = lcp.effective_bounds(lam, np.zeros((1, 3)), np.full((1, 3), np.inf), fr)
    np.testing.assert_array_equal(lo, [[0.0, -1.0, -1.0]])
    np.testing.assert_array_equal(hi, [[np.inf, 1.0, 1.0]])
    # decoupled A: the tangent row wants λ_t = 3 but the cone caps it at μ λ_n = 1
    A = np.eye(3)[None]
    b = np.array([[-2.0, -3.0, 0.0]])
    r = lcp.natural_residual(A, b, np.array([[2.0, 1.0, 0.0]]), friction=fr)
    assert r[0] == pytest.approx(0.0)
    assert lcp.natural_residual(A, b, np.array([[2.0, 3.0, 0.0]]), friction=fr)[0] == pytest.approx(2.0)


def test_block_solve_is_exact_on_random_contacts():
    rng = np.random.default_rng(0)
    B = 200
    G = rng.normal(size=(B, 3, 3))
    Abb = G @ np.swapaxes(G, 1, 2) + 0.1 * np.eye(3)
    r = rng.normal(size=(B, 3)) * 3
    mu = np.column_stack([np.zeros(B), np.full((B, 2), 0.7)])
    lam = lcp.solve_block(Abb, r, np.zeros((B, 3)), np.zeros(B), np.full(B, np.inf), mu)
    fr = lcp.Friction.per_contact(1, 0.7, batch=B)
    res = lcp.natural_residual(Abb, r, lam, friction=fr)
    assert res.max() < 1e-10
    # one PGS sweep is not enough on the same blocks (the exact solve is doing real work)
    one = lcp.solve(Abb, r, friction=fr, max_iter=1, tol=0.0)
    assert one.residual_inf.max() > 1e-3


def test_block_layout_from_friction():
    fr = lcp.Friction.per_contact(3, 1.0)
    blocks = lcp.build_blocks(fr.normal_index, None, 1, 9)
    np.testing.assert_array_equal(blocks[0], [[0, 1, 2], [3, 4, 5], [6, 7, 8]])
    mask = np.array([[True] * 6 + [False] * 3])
    blocks = lcp.build_blocks(fr.normal_index, mask, 1, 9)
    np.testing.assert_array_equal(blocks[0], [[0, 1, 2], [3, 4, 5]])


def test_mass_orders_sort_effective_mass_both_ways():
    d = np.array([[3.0, 1.0, 2.0]])  # effective masses 1/3, 1, 1/2
    np.testing.assert_array_equal(fixed_order("mass_asc", 1, 3, d), [[0, 2, 1]])
    np.testing.assert_array_equal(fixed_order("mass_desc", 1, 3, d), [[1, 2, 0]])
    with pytest.raises(ValueError):
        fixed_order(np.array([0, 0, 1]), 1, 3, d)


@pytest.mark.parametrize("make", [lcp.sliding_capsule, lcp.three_sphere_body])
@pytest.mark.parametrize("order", ["default", "random", "error", "mass_asc", "mass_desc", "block"])
@pytest.mark.parametrize("method", ["pgs", "amgs"])
def test_every_order_converges_on_seed_problems(make, order, method):
    P = make()
    res = lcp.solve(**P.kwargs(), method=method, order=order, seed=1, max_iter=300, tol=1e-8)
    assert res.converged[0] and res.iterations[0] > 1
    assert lcp.natural_residual(P.A, P.b, res.lam, P.lo, P.hi, friction=P.friction)[0] < 1e-8


def test_seed_problems_geometry():
    cap, tri = lcp.sliding_capsule(), lcp.three_sphere_body()
    assert cap.m == 6 and tri.m == 9
    for P in (cap, tri):
        A = P.A[0]
        np.testing.assert_allclose(A, P.J[0] @ P.MinvJT[0], atol=1e-14)
        assert np.linalg.eigvalsh(A).min() > -1e-12
        # normal rows see gravity over Δt (-9.81·0.01), tangent rows the sliding speed (~10 m/s)
        np.testing.assert_allclose(P.b[0, ::3], -0.0981, atol=1e-12)
        assert np.abs(P.b[0, 1::3]).max() > 5
    # total normal impulse supports the weight over the step: Σλ_n = m g Δt (the body keeps sliding)
    for P in (cap, tri):
        lam = lcp.solve(**P.kwargs(), max_iter=500, tol=1e-12).lam[0]
        assert lam[::3].sum() == pytest.approx(10 * 9.81 * 0.01, rel=1e-6)


def test_permutation_batch_equals_single_permutations():
    P = lcp.three_sphere_body()
    perms = np.array(list(itertools.islice(itertools.permutations(range(9)), 0, 362880, 7257)))
    batch = lcp.solve(P.A, P.b, friction=P.friction, order=perms, max_iter=30, tol=1e-10)
    assert batch.lam.shape == (len(perms), 9)
    for k in (0, 3, len(perms) - 1):
        one = lcp.solve(P.A, P.b, friction=P.friction, order=perms[k], max_iter=30, tol=1e-10)
        it = int(one.iterations[0])
        assert batch.iterations[k] == it
        np.testing.assert_allclose(batch.error_history[k, :it], one.error_history[0, :it], rtol=1e-10,
                                   atol=1e-15)
    # orders genuinely differ in speed
    assert batch.iterations.min() < batch.iterations.max()


def test_order_array_equals_permuting_the_problem():
    P = lcp.three_sphere_body()
    perm = np.array([4, 0, 8, 3, 7, 1, 6, 2, 5])
    inv = np.argsort(perm)
    A2 = P.A[:, perm][:, :, perm]
    b2 = P.b[:, perm]
    ni = P.friction.normal_index[:, perm]
    ni2 = np.where(ni >= 0, inv[np.maximum(ni, 0)], -1)
    fr2 = lcp.Friction(ni2, P.friction.mu[:, perm])
    a = lcp.solve(P.A, P.b, friction=P.friction, order=perm, max_iter=20, tol=0.0)
    b = lcp.solve(A2, b2, friction=fr2, max_iter=20, tol=0.0)
    np.testing.assert_allclose(b.lam[0], a.lam[0, perm], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(b.error_history, a.error_history, rtol=1e-10, atol=1e-14)
