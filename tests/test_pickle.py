"""Envs (vector and single), the Simulator and a mid-episode state survive pickle and deepcopy: the copy steps to
the same numbers as the original (the array module is stored by device name, not as a module)."""
import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym
from pbad_gym.envs import SpiderVectorEnv, SwimmerVectorEnv

COPIES = {"pickle": lambda x: pickle.loads(pickle.dumps(x)), "deepcopy": copy.deepcopy}


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("cls", [SwimmerVectorEnv, SpiderVectorEnv])
def test_vector_env_copy_continues_identically(cls, how):
    env = cls(num_envs=3, max_episode_steps=4)
    env.reset(seed=0)
    acts = np.random.default_rng(1).uniform(-1, 1, (8,) + env.action_space.shape)
    env.step(acts[0])
    clone = COPIES[how](env)
    for a in acts[1:]:  # runs through the autoreset: the copied generators draw the same reset states
        for x, y in zip(env.step(a), clone.step(a)):
            if isinstance(x, dict):
                assert x.keys() == y.keys()
                for k in x:
                    np.testing.assert_array_equal(x[k], y[k])
            else:
                np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("how", sorted(COPIES))
def test_single_env_from_gym_make_copies(how):
    env = gym.make("pbad_gym/Spider-v0")
    env.reset(seed=3)
    a = env.action_space.sample()
    env.step(a)
    clone = COPIES[how](env)
    out, out_clone = env.step(a), clone.step(a)
    np.testing.assert_array_equal(out[0], out_clone[0])
    assert out[1:4] == out_clone[1:4]


@pytest.mark.parametrize("how", sorted(COPIES))
def test_simulator_mid_trajectory_copies(how):
    sim = pbad_gym.Simulator(pbad_gym.chain(5), dt=0.02, num_envs=2)
    for _ in range(3):
        sim.step()
    clone = COPIES[how](sim)
    for _ in range(3):
        sim.step()
        clone.step()
    np.testing.assert_array_equal(sim.q, clone.q)
    np.testing.assert_array_equal(sim.qd, clone.qd)
    assert clone.xp is np
