"""The divergence guard owned by the environments (envs/divergence.py): its energy terms are a pure function of the
states a step reports (every substep's q and q̇), computed by the backend's kernel. Along random-action rollouts
with forced blow-ups, its decisions (exceeded flags) and running budgets (K, s) equal those of a reference guard
fed with the NumPy reference terms of the same states (:func:`energy_terms_reference`), step by step, on the numba
and numpy backends, with one and with several substeps per env step."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (registers the ids)
from pbad_gym.envs.divergence import EnergyBudget, EnergyTerms, energy_terms_reference


class _Tee:
    """The env's EnergyBudget, with a reference budget on the same Simulator alongside: every call goes to both
    (the reference measures with the NumPy reference terms, checks with the NumPy arithmetic); the env acts on the
    real one's results. ``log``: (exceeded, K, s) of both after every check."""

    def __init__(self, real, ground):
        self.real, self.log = real, []
        self.ref = EnergyBudget(real.sim, real.actuated, real.gear, ground, real.safety)
        self.ref.model = real.model._replace(backend="numpy")
        self.ref._compiled = None

    def __getattr__(self, name):
        return getattr(self.real, name)

    def start(self, rows, com=None, view=None):
        self.real.start(rows, com, view)
        self.ref.start(rows, com, view)

    def check_step(self, view, info):
        got = self.real.check_step(view, info)
        q, qd = info.substep_q, info.substep_qd
        if q is None:  # one step: the new state's, through the reference
            ref_terms = self.ref.current(view)
        else:  # the substeps' states, state by state through the reference
            per = [energy_terms_reference(self.ref.model, np.asarray(q[k], np.float64), np.asarray(qd[k], np.float64))
                   for k in range(q.shape[0])]
            ref_terms = EnergyTerms(*(np.stack(f) for f in zip(*per)))
        want = self.ref.check_unguarded(terms=ref_terms)
        self.log.append((got[0].copy(), self.real._pending[0].copy(), self.real._pending[1].copy(),
                         want[0].copy(), self.ref._pending[0].copy(), self.ref._pending[1].copy()))
        return got

    def accept(self, rows=None):
        self.real.accept(rows)
        self.ref.accept(rows)


def _kick(env, rng, t):
    """A forced blow-up: a huge velocity on one row, a moderate one on the next."""
    sim, B = env.sim, env.num_envs
    q, qd = np.asarray(sim.q, np.float64), np.asarray(sim.qd, np.float64)
    kick = np.zeros_like(qd)
    kick[t % B] = 30.0 * (1 + rng.uniform(size=qd.shape[1]))
    kick[(t + 1) % B, 0] = 3.0
    sim.reset(q, qd + kick)


@pytest.mark.parametrize("backend,frame_skip,steps", [("numba", 1, 30), ("numba", 3, 20), ("numpy", 1, 12),
                                                      ("numpy", 2, 8)])
def test_guard_decisions_equal_the_reference_along_rollouts_with_blow_ups(backend, frame_skip, steps):
    env = gym.make_vec("pbad_gym/Spider-v2", num_envs=4, vectorization_mode="vector_entry_point", backend=backend,
                       frame_skip=frame_skip)
    env.reset(seed=3)
    tee = env.energy_budget = _Tee(env.energy_budget, env.sim.forces.contact.height)
    tee.ref.start(np.arange(env.num_envs))  # the reference budget from the same (reset) state
    assert tee.ref.floor == tee.real.floor and tee.ref.c_gravity == tee.real.c_gravity
    rng = np.random.default_rng(3)
    flagged = 0
    for t in range(steps):
        if t in (3, steps // 2):
            _kick(env, rng, t)
        *_, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        flagged += int(info["diverged"].sum())
    assert flagged > 0 and len(tee.log) == steps
    for t, (ex, K, s, ex_ref, K_ref, s_ref) in enumerate(tee.log):
        np.testing.assert_array_equal(ex, ex_ref, err_msg=f"step {t}")
        if backend == "numpy":  # the same reference terms: the same numbers
            np.testing.assert_array_equal(K, K_ref)
            np.testing.assert_array_equal(s, s_ref)
        else:  # the kernel's arithmetic against NumPy's: round-off (NaN rows alike)
            np.testing.assert_allclose(K, K_ref, rtol=1e-9, atol=1e-9, err_msg=f"step {t}")
            np.testing.assert_allclose(s, s_ref, rtol=1e-9, atol=1e-9, err_msg=f"step {t}")
