"""Policies and the population evaluator: parameter layouts, action scaling, rows per candidate, episode ends."""
import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from pbad_gym.agents.policies import FlatPolicy, PolicySpec, policy_outputs
from pbad_gym.agents.config import EnvConfig
from pbad_gym.agents.rollout import evaluate
from pbad_gym.agents.vecenv import make_vec_env
from pbad_gym.agents.stats import RunningStats


class CountdownEnv(gymnasium.Env):
    """Reward 1 per step (plus the action), terminates after ``length`` steps; x_position advances by the action.
    With ``diverge_above`` set, an action above it truncates the episode with info["diverged"] and reward 10."""

    def __init__(self, length=5, diverge_above=None):
        self.length, self.diverge_above = length, diverge_above
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.dt = 0.1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k, self.x = 0, float(self.np_random.uniform(-1, 1))
        return np.array([self.x, 0.0], np.float32), {"x_position": self.x, "diverged": False}

    def step(self, action):
        a = float(np.asarray(action)[0])
        self.k += 1
        if self.diverge_above is not None and a > self.diverge_above:
            return (np.array([self.x, self.k], np.float32), 10.0, False, True,
                    {"x_position": 0.0, "diverged": True})
        self.x += a
        return (np.array([self.x, self.k], np.float32), 1.0 + a, self.k >= self.length, False,
                {"x_position": self.x, "diverged": False})


for _id, _kw in (("T1Test/Countdown-v0", {}), ("T1Test/Diverge-v0", {"length": 30, "diverge_above": 0.5})):
    if _id not in gymnasium.registry:
        gymnasium.register(_id, entry_point=CountdownEnv, kwargs=_kw)


def test_parameter_counts_and_zero_policy():
    assert PolicySpec("linear", 16, 3).n_params == 3 * 16 + 3
    assert PolicySpec("mlp", 16, 3, hidden=(8,)).n_params == 8 * 16 + 8 + 3 * 8 + 3
    assert PolicySpec("oscillator", 16, 3).n_params == 7
    for spec in (PolicySpec("linear", 4, 2), PolicySpec("mlp", 4, 2, (5, 3)), PolicySpec("oscillator", 4, 2)):
        u = policy_outputs(spec, np.zeros((3, spec.n_params)), np.ones((3, 4)), np.arange(3.0))
        assert u.shape == (3, 2) and np.all(u == 0)
    with pytest.raises(ValueError, match="linear"):
        PolicySpec("rnn", 4, 2)


def test_linear_policy_matches_formula_and_action_bounds():
    spec = PolicySpec("linear", 3, 2)
    rng = np.random.default_rng(0)
    theta = rng.normal(size=spec.n_params)
    W, b = theta[:6].reshape(2, 3), theta[6:]
    obs = rng.normal(size=(4, 3))
    u = np.tanh(obs @ W.T + b)
    pol = FlatPolicy(spec, theta, low=[-2.0, 0.0], high=[2.0, 1.0])
    np.testing.assert_allclose(pol.act(obs), np.stack([2 * u[:, 0], 0.5 * (u[:, 1] + 1)], 1), rtol=1e-6)
    stats = RunningStats(3)
    stats.update(rng.normal(3.0, 2.0, size=(100, 3)))
    pol = FlatPolicy(spec, theta, obs_stats=stats)
    np.testing.assert_allclose(pol.act(obs), np.tanh(stats.normalize(obs) @ W.T + b), rtol=1e-6)
    again = FlatPolicy.from_dict(pol.to_dict())
    np.testing.assert_array_equal(again.act(obs), pol.act(obs))


def test_oscillator_is_periodic_in_episode_time():
    spec = PolicySpec("oscillator", 2, 2, frequency=0.5, dt=0.1)
    theta = np.array([0.8, 1.5, 0.0, 1.0, 0.0])  # period 2 s = 20 steps
    pol = FlatPolicy(spec, theta)
    pol.reset(1)
    a = np.concatenate([pol.act(np.zeros((1, 2))) for _ in range(41)])
    np.testing.assert_allclose(a[0], a[20], atol=1e-6)
    np.testing.assert_allclose(a[5], [0.8, np.clip(1.5 * np.sin(np.pi / 2 + 1.0), -1, 1)], atol=1e-6)
    pol.reset(1)
    np.testing.assert_allclose(pol.act(np.zeros((1, 2)))[0], a[0])


def test_rows_run_one_episode_each_and_group_by_candidate():
    envs = make_vec_env(EnvConfig(id="T1Test/Countdown-v0"), 6)
    # candidate c (2 episodes each) acts with the constant c / 4
    params = np.repeat(np.array([[0, 0, 0.25 * c] for c in range(3)]), 2, axis=0)
    params[:, -1] = np.arctanh(params[:, -1])
    res = evaluate(envs, FlatPolicy(PolicySpec("linear", 2, 1), params), 2, max_steps=50, seeds=7)
    np.testing.assert_allclose(res.returns, 5 * (1 + 0.25 * np.arange(3)))  # the autoreset steps are not counted
    np.testing.assert_allclose(res.distances, 5 * 0.25 * np.arange(3), atol=1e-6)
    assert res.env_steps == 30 and not res.diverged.any() and res.obs_stats.count == 6 * 5
    short = evaluate(envs, FlatPolicy(PolicySpec("linear", 2, 1), params), 2, max_steps=3, seeds=7)
    assert short.env_steps == 18


def test_diverged_rows_are_flagged_and_keep_their_last_position():
    envs = make_vec_env(EnvConfig(id="T1Test/Diverge-v0"), 2)
    params = np.zeros((2, 3))
    params[:, -1] = np.arctanh([0.2, 0.9])
    res = evaluate(envs, FlatPolicy(PolicySpec("linear", 2, 1), params), 1, max_steps=40, seeds=[3, 3])
    assert res.diverged.tolist() == [False, True]
    assert res.distances[1] == 0.0 and res.returns[1] == 10.0
    np.testing.assert_allclose(res.distances[0], 30 * 0.2, rtol=1e-5)


def test_native_vector_env_rows_match_make_vec_sync():
    native = make_vec_env(EnvConfig(id="pbad_gym/Swimmer-v0", kwargs={"max_episode_steps": 20}), 2)
    sync = gymnasium.make_vec("pbad_gym/Swimmer-v0", num_envs=2, vectorization_mode="sync", max_episode_steps=20)
    spec = PolicySpec("oscillator", 16, 3, dt=0.05)
    params = np.random.default_rng(1).normal(size=(2, spec.n_params))
    a = evaluate(native, FlatPolicy(spec, params), 1, 20, seeds=5)
    b = evaluate(sync, FlatPolicy(spec, params), 1, 20, seeds=5)
    np.testing.assert_allclose(a.returns, b.returns, rtol=1e-9)
    np.testing.assert_allclose(a.distances, b.distances, rtol=1e-9)
    assert np.all(np.isfinite(a.distances)) and a.env_steps == 40
