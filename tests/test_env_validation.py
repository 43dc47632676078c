"""Configuration mistakes raise at construction, naming the argument and what it accepts, instead of surfacing
later as NumPy errors or as rows flagged diverged."""
import gymnasium as gym
import numpy as np
import pytest

import pbad_gym  # noqa: F401
from pbad_gym import Simulator, chain
from pbad_gym.arrays import real_number

IDS = ["pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1", "pbad_gym/Spider-v2"]
BAD = [
    ({"tol": 0.0}, ValueError, "tol.*positive"),
    ({"tol": -1.0}, ValueError, "tol.*positive"),
    ({"tol": float("nan")}, ValueError, "tol.*finite"),
    ({"dt": "0.05"}, TypeError, "dt.*real number.*str"),
    ({"dt": -0.01}, ValueError, "dt.*positive"),
    ({"gear": [1.0, 2.0]}, ValueError, r"gear must be a positive number or \d+ positive numbers \(one per actuator"),
    ({"gear": "strong"}, ValueError, "gear must be"),
    ({"forward_reward_weight": float("nan")}, ValueError, "forward_reward_weight must be a finite number"),
    ({"ctrl_cost_weight": float("inf")}, ValueError, "ctrl_cost_weight must be a finite number"),
    ({"ctrl_cost_weight": "0.1"}, TypeError, "ctrl_cost_weight must be a real number"),
    ({"reset_noise_scale": -0.1}, ValueError, "reset_noise_scale"),
]


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("kwargs,error,message", BAD)
def test_bad_env_arguments_are_named(env_id, kwargs, error, message):
    with pytest.raises(error, match=message):
        gym.make_vec(env_id, num_envs=2, **kwargs)


@pytest.mark.parametrize("kwargs,message", [({"healthy_reward": float("nan")}, "healthy_reward"),
                                            ({"healthy_z_range": (0.1, float("nan"))}, "healthy_z_range"),
                                            ({"contact_cost_weight": "x"}, "contact_cost_weight")])
def test_bad_spider_arguments_are_named(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        gym.make_vec("pbad_gym/Spider-v1", num_envs=1, **kwargs)


def test_bad_drag_is_named():
    with pytest.raises(ValueError, match="drag must be None or non-negative drag rates"):
        gym.make_vec("pbad_gym/Swimmer-v1", num_envs=1, drag="x")
    with pytest.raises(ValueError, match="drag"):
        Simulator(chain(3), dt=0.01, drag=[1.0, 2.0, 3.0, 4.0])


def test_single_env_action_shape_error_describes_the_single_env():
    env = gym.make("pbad_gym/Swimmer-v1")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action must have shape \(3,\) \(actuators,\), got \(2,\)"):
        env.step(np.zeros(2, np.float32))


def test_simulator_checks_dt_and_tol_once():
    with pytest.raises(TypeError, match="dt"):
        Simulator(chain(2), dt="0.01")
    with pytest.raises(ValueError, match="tol"):
        Simulator(chain(2), dt=0.01, tol=0)


def test_real_number():
    assert real_number(np.float32(0.5), "x") == 0.5 and real_number(3, "x", positive=True) == 3.0
    with pytest.raises(TypeError, match="flag must be a real number"):
        real_number(True, "flag")
    with pytest.raises(ValueError, match="must be non-negative"):
        real_number(-1, "y", nonnegative=True)


def test_reset_step_info_reports_the_reset_state():
    env = gym.make_vec("pbad_gym/Swimmer-v1", num_envs=2, max_episode_steps=2)
    env.reset(seed=0)
    native = env.unwrapped if hasattr(env, "unwrapped") else env
    for _ in range(2):
        env.step(np.full((2, 3), 0.5, np.float32))
    _, reward, _, _, info = env.step(np.full((2, 3), 0.5, np.float32))  # the autoreset step
    com = native.centre_of_mass(native.sim.kinematics())
    np.testing.assert_array_equal(reward, 0.0)
    np.testing.assert_array_equal(info["x_position"], com[:, 0])
    assert np.all(info["x_position"] != 0.0)


# issue 22: values that used to slip through, each refused naming its argument
@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("gear", ["40", True, "per-actuator strings", "per-actuator bools", "bool array"])
def test_gear_refuses_strings_and_bools(env_id, gear):
    n_act = len(gym.make_vec(env_id, num_envs=1).unwrapped.actuated)
    gear = {"per-actuator strings": ["40"] * n_act, "per-actuator bools": [True] * n_act,
            "bool array": np.ones(n_act, dtype=bool)}.get(gear, gear)
    with pytest.raises(ValueError, match="gear must be a positive number"):
        gym.make_vec(env_id, num_envs=1, gear=gear)


def test_gear_accepts_numbers_of_any_numeric_type():
    env = gym.make_vec("pbad_gym/Swimmer-v1", num_envs=1, gear=np.array([10, 20, 30], dtype=np.int32))
    np.testing.assert_array_equal(env.unwrapped.gear, [10.0, 20.0, 30.0])
    assert gym.make_vec("pbad_gym/Swimmer-v1", num_envs=1, gear=np.float32(25.0)).unwrapped.gear[0] == 25.0


@pytest.mark.parametrize("name, value", [("frame_skip", 2.0), ("max_episode_steps", 20.0), ("num_envs", 2.0),
                                         ("frame_skip", True), ("max_episode_steps", "20"), ("frame_skip", 0)])
def test_counts_must_be_integers(name, value):
    kwargs = {"num_envs": 1, name: value}
    with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
        gym.make_vec("pbad_gym/Swimmer-v1", vectorization_mode="vector_entry_point", **kwargs)


def test_counts_accept_numpy_integers():
    env = gym.make_vec("pbad_gym/Swimmer-v1", num_envs=np.int64(2), frame_skip=np.int32(2),
                       max_episode_steps=np.int64(20))
    assert (env.num_envs, env.unwrapped.frame_skip, env.unwrapped.max_episode_steps) == (2, 2, 20)
    assert type(env.unwrapped.frame_skip) is int


@pytest.mark.parametrize("env_id, name", [(i, "ctrl_cost_weight") for i in IDS]
                         + [(i, "contact_cost_weight") for i in IDS[1:]])
def test_cost_weights_must_be_non_negative(env_id, name):
    with pytest.raises(ValueError, match=f"{name} must be non-negative"):
        gym.make_vec(env_id, num_envs=1, **{name: -0.5})
    assert getattr(gym.make_vec(env_id, num_envs=1, **{name: 0.0}).unwrapped, name) == 0.0


@pytest.mark.parametrize("env_id", IDS + ["pbad_gym/Swimmer-v0", "pbad_gym/Spider-v0", "pbad_gym/Spider-v3"])
def test_reset_noise_scale_is_bounded(env_id):
    with pytest.raises(ValueError, match=r"reset_noise_scale must be in \[0, 1.0\], got 5.0: it is the half-width"):
        gym.make_vec(env_id, num_envs=1, reset_noise_scale=5.0)
    with pytest.raises(ValueError, match=r"reset_noise_scale must be in \[0, 1.0\]"):
        gym.make_vec(env_id, num_envs=1, reset_noise_scale=-0.1)
    with pytest.raises(TypeError, match="reset_noise_scale must be a real number"):
        gym.make_vec(env_id, num_envs=1, reset_noise_scale="0.1")
    for ok in (0.0, 0.1, 1.0):  # the bound itself is accepted
        assert gym.make_vec(env_id, num_envs=1, reset_noise_scale=ok).unwrapped.reset_noise_scale == ok
