"""Making the trainers' environments through the public Gymnasium API only."""
from __future__ import annotations

import gymnasium


def make_vec_env(env_cfg, num_envs: int):
    """``gymnasium.make_vec(env_cfg.id, num_envs, **env_cfg.kwargs)``: the id's native vector env when it registers
    a ``vector_entry_point``, otherwise a SyncVectorEnv of single envs (so any registered Box env works, e.g.
    Gymnasium's Pendulum-v1). Importing pbad_gym registers its ids."""
    import pbad_gym  # noqa: F401  (registers pbad_gym/* ids)

    try:
        spec = gymnasium.spec(env_cfg.id)
    except gymnasium.error.Error as exc:
        raise ValueError(f"env.id {env_cfg.id!r} is not a registered Gymnasium id ({exc})") from None
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    return gymnasium.make_vec(env_cfg.id, num_envs=num_envs, vectorization_mode=mode, **dict(env_cfg.kwargs))
