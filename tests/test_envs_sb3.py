import numpy as np
import pytest

sb3 = pytest.importorskip("stable_baselines3", reason="stable-baselines3 is an optional extra; install it with "
                         'pip install -e ".[sb3]" to run the SB3 adapter tests')

import pbad_gym  # noqa: E402,F401
from pbad_gym.envs import SB3VecEnv, SwimmerVectorEnv  # noqa: E402


def test_sb3_adapter_resets_in_the_same_step_with_terminal_observation():
    venv = SB3VecEnv(SwimmerVectorEnv(num_envs=3, max_episode_steps=4))
    venv.seed(0)
    obs = venv.reset()
    assert obs.shape == (3, 16) and obs.dtype == np.float32
    for k in range(4):
        venv.step_async(np.zeros((3, 3), np.float32))
        obs, reward, done, infos = venv.step_wait()
    assert done.all() and reward.shape == (3,)
    for i in range(3):
        assert infos[i]["TimeLimit.truncated"]
        assert infos[i]["terminal_observation"].shape == (16,)
        assert not np.array_equal(infos[i]["terminal_observation"], obs[i])  # obs is the fresh episode's
    # the native env does not reset these rows a second time on the next step
    venv.step_async(np.zeros((3, 3), np.float32))
    _, reward, done, _ = venv.step_wait()
    assert not done.any() and np.all(reward != 0)


@pytest.mark.parametrize("env_id, kwargs", [("pbad_gym/Swimmer-v0", {}),
                                            ("pbad_gym/Spider-v2", {"terminate_when_unhealthy": False})])
def test_sb3_ppo_trains_on_the_native_batch(env_id, kwargs):
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    venv = VecMonitor(SB3VecEnv(env_id, num_envs=4, max_episode_steps=32, **kwargs))
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256)
    assert len(model.ep_info_buffer) >= 4 and all(ep["l"] == 32 for ep in model.ep_info_buffer)


def test_sb3_reports_divergence_apart_from_time_limits():
    venv = SB3VecEnv(SwimmerVectorEnv(num_envs=2, max_episode_steps=50, max_iter=2, tol=1e-15,
                                      max_unconverged_steps=2))
    venv.seed(0)
    venv.reset()
    for _ in range(3):
        venv.step_async(np.full((2, 3), 0.5, np.float32))
        _, _, done, infos = venv.step_wait()
    assert done.all()
    for i in range(2):
        assert infos[i]["diverged"] is True and infos[i]["TimeLimit.truncated"] is False


def test_sb3_keeps_reset_infos():
    venv = SB3VecEnv(SwimmerVectorEnv(num_envs=3, max_episode_steps=2))
    venv.seed(0)
    venv.reset()
    assert len(venv.reset_infos) == 3 and all("x_position" in info for info in venv.reset_infos)
    first = [info["x_position"] for info in venv.reset_infos]
    assert len(set(first)) == 3  # each sub-environment's own reset state
    for _ in range(2):
        venv.step_async(np.zeros((3, 3), np.float32))
        venv.step_wait()
    assert [info["x_position"] for info in venv.reset_infos] != first  # refreshed by the in-step resets


def test_sb3_attributes_and_methods_act_per_sub_environment():
    native = SwimmerVectorEnv(num_envs=3)
    venv = SB3VecEnv(native)
    venv.reset()
    com = venv.env_method("centre_of_mass", native.sim.kinematics(), indices=[0, 2])
    assert len(com) == 2 and com[0].shape == (3,)
    np.testing.assert_array_equal(com[1], native.centre_of_mass(native.sim.kinematics())[2])
    native.row_weights = np.arange(3.0)
    assert venv.get_attr("row_weights", indices=1) == [1.0]
    venv.set_attr("row_weights", 7.0, indices=[0, 2])
    np.testing.assert_array_equal(native.row_weights, [7.0, 1.0, 7.0])
    assert venv.get_attr("dt") == [native.dt] * 3
    with pytest.raises(ValueError, match="shared by the whole native batch"):
        venv.set_attr("dt", 0.1, indices=[0])


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_adapter_refuses_other_autoreset_modes(mode):
    with pytest.raises(ValueError, match="autoreset_mode"):
        SB3VecEnv("pbad_gym/Swimmer-v1", num_envs=2, autoreset_mode=mode)
