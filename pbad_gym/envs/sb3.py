"""Stable-Baselines3 adapter: a native vector env presented as an SB3 ``VecEnv`` (SB3 is an optional extra).

SB3 resets a finished sub-environment inside the same ``step`` call and hands the final observation over in
``infos[i]["terminal_observation"]`` (with ``"TimeLimit.truncated"`` for time limits); the native env resets on
the next step (NEXT_STEP). The adapter resets the finished rows at once with ``reset(options={"reset_mask": ...})``,
which also cancels their pending autoreset.
"""
from __future__ import annotations

import numpy as np

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("pbad_gym.envs.SB3VecEnv needs stable-baselines3: pip install 'pbad_gym[sb3]'") from err


class SB3VecEnv(VecEnv):
    """Wrap a :class:`pbad_gym.envs.PBADVectorEnv` (or an env id / vector env made by ``gymnasium.make_vec``
    with the vector entry point) for Stable-Baselines3 algorithms."""

    def __init__(self, venv, **make_kwargs):
        if isinstance(venv, str):
            import gymnasium

            venv = gymnasium.make_vec(venv, vectorization_mode="vector_entry_point", **make_kwargs)
        elif make_kwargs:
            raise ValueError("keyword arguments are only accepted with an env id")
        self.venv = venv
        self.render_mode = venv.render_mode
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions = None

    def reset(self):
        seeds = list(self._seeds) if any(s is not None for s in self._seeds) else None
        obs, _ = self.venv.reset(seed=seeds)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions):
        self._actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.venv.step(self._actions)
        done = terminated | truncated
        infos = [{} for _ in range(self.num_envs)]
        for key, val in info.items():
            val = np.asarray(val)
            if val.shape[:1] == (self.num_envs,):
                for i in range(self.num_envs):
                    infos[i][key] = val[i].item() if val.ndim == 1 else val[i]
        if done.any():
            for i in np.nonzero(done)[0]:
                infos[i]["terminal_observation"] = obs[i].copy()
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            obs, _ = self.venv.reset(options={"reset_mask": done})
        return obs, reward.astype(np.float32), done, infos

    def close(self):
        self.venv.close()

    def get_images(self):
        frames = self.venv.render()
        return list(frames) if frames is not None else [None] * self.num_envs

    def _indices(self, indices):
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    def get_attr(self, attr_name, indices=None):
        value = getattr(self.venv, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name, value, indices=None):
        if indices is not None and len(self._indices(indices)) != self.num_envs:
            raise ValueError("the native batch shares its attributes: set them for all sub-environments")
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
        out = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [out for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False for _ in self._indices(indices)]
