import numpy as np
import pytest

sb3 = pytest.importorskip("stable_baselines3")

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


def test_sb3_ppo_trains_on_the_native_batch():
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    venv = VecMonitor(SB3VecEnv("pbad_gym/Swimmer-v0", num_envs=4, max_episode_steps=32))
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256)
    assert len(model.ep_info_buffer) >= 4 and all(ep["l"] == 32 for ep in model.ep_info_buffer)
