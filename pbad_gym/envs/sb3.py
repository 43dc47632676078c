"""Stable-Baselines3 adapter: a native vector env presented as an SB3 ``VecEnv`` (SB3 is an optional extra).

SB3 resets a finished sub-environment inside the same ``step`` call and hands the final observation over in
``infos[i]["terminal_observation"]`` (with ``"TimeLimit.truncated"`` for time limits); the native env resets on
the next step (NEXT_STEP). The adapter resets the finished rows at once with ``reset(options={"reset_mask": ...})``,
which also cancels their pending autoreset.

A diverged sub-environment (``info["diverged"]``) is reported with ``infos[i]["diverged"] = True`` and
``"TimeLimit.truncated" = False``: its last observation is not a state to bootstrap a value from.

The native batch is one object, so attributes and methods are per sub-environment only where the batch stores
them per row: ``get_attr`` / ``env_method`` slice values whose leading axis is ``num_envs`` and hand every index
the same value otherwise; ``set_attr`` writes rows of such per-row arrays and refuses to change a shared
attribute for a subset of the sub-environments.
"""
from __future__ import annotations

import numpy as np

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("pbad_gym.envs.SB3VecEnv needs stable-baselines3: pip install 'pbad_gym[sb3]'") from err


def _split_rows(info, num_envs):
    """Per-sub-environment dicts from a batched info dict (entries whose leading axis is num_envs)."""
    infos = [{} for _ in range(num_envs)]
    for key, val in info.items():
        val = np.asarray(val)
        if val.shape[:1] == (num_envs,):
            for i in range(num_envs):
                infos[i][key] = val[i].item() if val.ndim == 1 else val[i]
    return infos


class SB3VecEnv(VecEnv):
    """Wrap a :class:`pbad_gym.envs.PBADVectorEnv` (or an env id / vector env made by ``gymnasium.make_vec``
    with the vector entry point) for Stable-Baselines3 algorithms."""

    def __init__(self, venv, **make_kwargs):
        if isinstance(venv, str):
            import gymnasium

            venv = gymnasium.make_vec(venv, vectorization_mode="vector_entry_point", **make_kwargs)
        elif make_kwargs:
            raise ValueError("keyword arguments are only accepted with an env id")
        mode = getattr(venv.unwrapped, "autoreset_mode", None)
        if mode is not None and getattr(mode, "name", str(mode)) != "NEXT_STEP":
            # the adapter resets finished rows itself, as SB3 expects; another mode would reset them twice or never
            raise ValueError(f"SB3VecEnv needs autoreset_mode NEXT_STEP (the default), got {mode!r}")
        self.venv = venv
        self.render_mode = venv.render_mode
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions = None

    def reset(self):
        seeds = list(self._seeds) if any(s is not None for s in self._seeds) else None
        obs, info = self.venv.reset(seed=seeds)
        self.reset_infos = _split_rows(info, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions):
        self._actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.venv.step(self._actions)
        done = terminated | truncated
        infos = _split_rows(info, self.num_envs)
        diverged = np.asarray(info.get("diverged", np.zeros(self.num_envs, dtype=bool)), dtype=bool)
        if done.any():
            for i in np.nonzero(done)[0]:
                infos[i]["terminal_observation"] = obs[i].copy()
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i] and not diverged[i])
                infos[i]["diverged"] = bool(diverged[i])
            obs, reset_info = self.venv.reset(options={"reset_mask": done})
            fresh = _split_rows(reset_info, self.num_envs)
            for i in np.nonzero(done)[0]:
                self.reset_infos[i] = fresh[i]
        return obs, reward.astype(np.float32), done, infos

    def close(self):
        self.venv.close()

    def get_images(self):
        frames = self.venv.render()
        return list(frames) if frames is not None else [None] * self.num_envs

    def _indices(self, indices):
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, (int, np.integer)):
            return [int(indices)]
        return [int(i) for i in indices]

    def _per_row(self, value, indices):
        """value[i] for each index when value is batched over the sub-environments, else value for each."""
        rows = self._indices(indices)
        if isinstance(value, np.ndarray) and value.shape[:1] == (self.num_envs,):
            return [value[i] for i in rows]
        if isinstance(value, tuple) and len(value) > 0 and all(
                isinstance(v, np.ndarray) and v.shape[:1] == (self.num_envs,) for v in value):
            return [tuple(v[i] for v in value) for i in rows]
        if isinstance(value, dict) and len(value) > 0 and all(
                np.asarray(v).shape[:1] == (self.num_envs,) for v in value.values()):
            return [{k: np.asarray(v)[i] for k, v in value.items()} for i in rows]
        return [value for _ in rows]

    def get_attr(self, attr_name, indices=None):
        return self._per_row(getattr(self.venv, attr_name), indices)

    def set_attr(self, attr_name, value, indices=None):
        rows = self._indices(indices)
        if len(rows) == self.num_envs and sorted(rows) == list(range(self.num_envs)):
            setattr(self.venv, attr_name, value)
            return
        current = getattr(self.venv, attr_name, None)
        if not (isinstance(current, np.ndarray) and current.shape[:1] == (self.num_envs,)):
            raise ValueError(f"set_attr({attr_name!r}, indices={rows}): {attr_name!r} is shared by the whole "
                             "native batch; set it for all sub-environments (indices=None)")
        updated = current.copy()
        updated[rows] = value
        setattr(self.venv, attr_name, updated)

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
        out = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return self._per_row(out, indices)

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False for _ in self._indices(indices)]
