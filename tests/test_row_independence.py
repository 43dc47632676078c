"""Bit-for-bit row independence (issue 10): a row's trajectory does not depend on the other rows of its batch.

For each model and solver option the environments expose: changing one row's actions, or resetting one row,
leaves every other row's observations, rewards and configurations equal bit for bit (``np.array_equal``); and
the native vector env (all rows in one batched step) equals Gymnasium's sync vector env (one single env, a
batch of 1, per row) bit for bit. Hessian "gauss_newton" (a Simulator option, not an env one) is checked on the
Simulator. Function-level checks pin the sources found: reductions whose summation order followed the batch
size or the memory layout (numpy sums a contiguous axis pairwise but a strided one term by term), and a
size-dependent BLAS/column-sum switch in ``matvec``.
"""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (registers the ids)
from pbad_gym import Simulator
from pbad_gym.arrays import tree_map
from pbad_gym.energies import (GroundContact, actuation_terms, contact_state, contact_terms, damping_terms,
                               limit_terms)
from pbad_gym.kinematics import forward_kinematics, integrate, matvec
from pbad_gym.kinematics.algebra import rowsum
from pbad_gym.model.robots import spider

N = 3  # rows per batch; row 1 is the one changed
ROW = 1
OTHERS = [i for i in range(N) if i != ROW]

def _actions(env, steps, changed=False):
    A = np.random.default_rng(1).uniform(-1, 1, (steps, N) + env.single_action_space.shape).astype(np.float32)
    if changed:
        A[:, ROW] = np.random.default_rng(7).uniform(-1, 1, A[:, ROW].shape)
    return A


def _native(env_id, kw, steps, changed=False, reset_at=None):
    """[(obs, reward, terminated, truncated, q)] per step of a native batch of N rows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make_vec(env_id, num_envs=N, **kw)
    env.reset(seed=0)
    A, out = _actions(env, steps, changed), []
    for t in range(steps):
        if t == reset_at:
            env.reset(options={"reset_mask": np.arange(N) == ROW})
        obs, rew, term, trunc, _ = env.step(A[t])
        out.append((obs, rew, term, trunc, np.array(env.sim.q)))
    env.close()
    return out


def _sync(env_id, kw, steps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make_vec(env_id, num_envs=N, vectorization_mode="sync", **kw)
    env.reset(seed=0)
    A, out = _actions(env, steps), []
    for t in range(steps):
        obs, rew, term, trunc, _ = env.step(A[t])
        q = np.stack([np.asarray(e.unwrapped.sim.q)[0] for e in env.envs])
        out.append((obs, rew, term, trunc, q))
    env.close()
    return out


def _assert_equal(a, b, rows, what):
    for t, (x, y) in enumerate(zip(a, b)):
        for name, u, v in zip(("obs", "reward", "terminated", "truncated", "q"), x, y):
            u, v = np.asarray(u)[rows], np.asarray(v)[rows]
            assert np.array_equal(u, v), (f"{what}: step {t} {name} differs by "
                                          f"{np.max(np.abs(u.astype(float) - v.astype(float))):.3g}")


# (env id, kwargs, steps): every model and solver option of the envs; Spider cases are short (its steps are slow).
# L-BFGS and float32 run on the Swimmer only: on the Spider they take 1-2 s a step (hundreds of iterations), and
# their code paths are the model-independent optimiser and dtype handling (the terms are checked per row below).
CASES = {
    "swimmer-v0": ("pbad_gym/Swimmer-v0", {"backend": "numpy"}, 20),
    "swimmer-v1": ("pbad_gym/Swimmer-v1", {"backend": "numpy"}, 20),
    "spider-v0": ("pbad_gym/Spider-v0", {"backend": "numpy"}, 12),
    "spider-v1": ("pbad_gym/Spider-v1", {"backend": "numpy"}, 12),
    "spider-v1-coulomb": ("pbad_gym/Spider-v1", {"friction": "coulomb", "backend": "numpy"}, 8),
    "spider-v1-impulse": ("pbad_gym/Spider-v1", {"contact_model": "impulse"}, 8),
    "swimmer-v1-lbfgs": ("pbad_gym/Swimmer-v1", {"optimizer": "lbfgs"}, 10),
    "swimmer-v1-lbfgs_hessian": ("pbad_gym/Swimmer-v1", {"optimizer": "lbfgs_hessian"}, 10),
    "swimmer-v1-float32": ("pbad_gym/Swimmer-v1", {"dtype": np.float32, "backend": "numpy"}, 20),
    "swimmer-v1-order3": ("pbad_gym/Swimmer-v1", {"order": 3}, 12),
    # the compiled kernel (the envs' default backend on CPU)
    "swimmer-v1-numba": ("pbad_gym/Swimmer-v1", {"backend": "numba"}, 20),
    "spider-v0-numba": ("pbad_gym/Spider-v0", {"backend": "numba"}, 12),
    "spider-v1-numba": ("pbad_gym/Spider-v1", {"backend": "numba"}, 12),
    "swimmer-v1-float32-numba": ("pbad_gym/Swimmer-v1", {"dtype": np.float32, "backend": "numba"}, 20),
}
_runs = {}


def _base(case):
    if case not in _runs:
        env_id, kw, steps = CASES[case]
        _runs[case] = _native(env_id, kw, steps)
    return _runs[case]


@pytest.mark.parametrize("case", list(CASES))
def test_changing_one_rows_actions_leaves_the_others_bit_for_bit(case):
    env_id, kw, steps = CASES[case]
    _assert_equal(_base(case), _native(env_id, kw, steps, changed=True), OTHERS, f"{case}, row {ROW}'s actions")


@pytest.mark.parametrize("case", list(CASES))
def test_resetting_one_row_leaves_the_others_bit_for_bit(case):
    env_id, kw, steps = CASES[case]
    _assert_equal(_base(case), _native(env_id, kw, steps, reset_at=steps // 3), OTHERS, f"{case}, row {ROW} reset")


@pytest.mark.parametrize("case", ["swimmer-v1", "spider-v1", "swimmer-v0", "spider-v0",
                                  "spider-v1-impulse", "swimmer-v1-order3", "spider-v1-numba"])
def test_native_equals_sync_bit_for_bit(case):
    env_id, kw, steps = CASES[case]
    _assert_equal(_base(case), _sync(env_id, kw, steps), slice(None), f"{case}, native vs sync")


def test_gauss_newton_hessian_rows_are_independent():
    """hessian="gauss_newton" (a Simulator option): a batch equals each row stepped alone, and changing one
    row's torque leaves the others bit for bit."""
    body = spider()
    rng = np.random.default_rng(3)
    q0 = np.broadcast_to(body.q0(), (N, body.nq)).copy()
    q0[:, 2] = 0.45
    q0 = integrate(body, q0, rng.normal(size=(N, body.nv)) * 0.1)
    qd0 = rng.normal(size=(N, body.nv)) * 0.3
    kw = dict(hessian="gauss_newton", contact=True, limit_stiffness=1e4, damping=1.0)
    tau = rng.normal(size=(6, N, body.nv)) * 30

    def run(taus, rows):
        sim = Simulator(body, 0.02, num_envs=len(rows), **kw)
        sim.reset(q0[rows], qd0[rows])
        out = []
        for t in taus:
            sim.step(t[rows])
            out.append(np.array(sim.q))
        return np.array(out)

    batch = run(tau, list(range(N)))
    for i in range(N):
        assert np.array_equal(batch[:, i], run(tau, [i])[:, 0]), f"row {i}: batch vs alone"
    tau2 = tau.copy()
    tau2[:, ROW] *= -1
    assert np.array_equal(batch[:, OTHERS], run(tau2, list(range(N)))[:, OTHERS])


# --- the sources, function by function ------------------------------------------------------------------------
def _deep_spider_states(B=8, seed=0, dtype=np.float64):
    """Random spider configurations with the torso low, so most contact spheres and joint limits are active."""
    body = spider()
    rng = np.random.default_rng(seed)
    q0 = np.broadcast_to(body.q0(), (B, body.nq)).astype(dtype)
    q0[:, 2] = rng.uniform(0.0, 0.3, B)
    q_ref = integrate(body, q0, (rng.normal(size=(B, body.nv)) * 0.5).astype(dtype))
    q = integrate(body, q_ref, (rng.normal(size=(B, body.nv)) * 0.05).astype(dtype))
    return body, q_ref, q, rng


def _rows_match(full, part_of, B):
    for i in list(range(B)) + [[1, 2, 5]]:
        idx = np.atleast_1d(i)
        for a, b in zip(full, part_of(idx)):
            if a is not None:
                assert np.array_equal(a[idx], b), f"rows {idx.tolist()}"


def test_matvec_and_rowsum_do_not_depend_on_batch_or_layout():
    rng = np.random.default_rng(0)
    for n in (3, 6):
        m = rng.normal(size=(64, 9, n, n))
        v = rng.normal(size=(64, 9, n))
        full = matvec(m, v)
        assert all(np.array_equal(full[i:i + 1], matvec(m[i:i + 1], v[i:i + 1])) for i in range(64))
        assert np.array_equal(full[[3, 9, 40]], matvec(m[[3, 9, 40]], v[[3, 9, 40]]))
    x = rng.normal(size=(16, 19))[:, rng.permutation(19)[:12]]  # fancy index along axis 1: column-major
    assert not x.flags.c_contiguous
    s = rowsum(x)
    assert all(np.array_equal(s[i:i + 1], rowsum(x[i:i + 1])) for i in range(16))
    assert all(s[i] == np.sum(np.ascontiguousarray(x[i])) for i in range(16))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_joint_term_values_are_per_row(dtype):
    for seed in range(4):
        body, q_ref, q, rng = _deep_spider_states(seed=seed, dtype=dtype)
        tau = (rng.normal(size=q_ref.shape[:1] + (body.nv,)) * 50).astype(dtype)
        b = np.abs(rng.normal(size=body.nv))
        _rows_match(actuation_terms(body, q, q_ref, tau), lambda i: actuation_terms(body, q[i], q_ref[i], tau[i]), 8)
        _rows_match(limit_terms(body, q, 1e4), lambda i: limit_terms(body, q[i], 1e4), 8)
        _rows_match(damping_terms(body, q, q_ref, b, 0.02),
                    lambda i: damping_terms(body, q[i], q_ref[i], b, 0.02), 8)


@pytest.mark.parametrize("friction", ["viscous", "coulomb"])
def test_contact_energy_values_are_per_row(friction):
    gc = GroundContact(friction=friction)
    for seed in range(8):  # a sum of few non-zero terms is often exact either way: several draws
        body, q_ref, q, _ = _deep_spider_states(seed=seed)
        kin, kin_ref = forward_kinematics(body, q), forward_kinematics(body, q_ref)
        memory = contact_state(body, kin_ref, gc, 0.02)

        def part(i):
            sub = type(kin)(*(a[i] for a in kin))
            return contact_terms(body, sub, gc, tree_map(lambda a: a[i], memory), 0.02)

        _rows_match(contact_terms(body, kin, gc, memory, 0.02), part, 8)
