"""The trainers' vector env: local, or sharded over Ray actors.

It sits above both ``rollout`` (the evaluator, which the Ray actors run) and ``distributed`` (the actors), so
neither of those imports the other's caller: distributed → rollout is the only edge between them.
"""
from __future__ import annotations

from .distributed import RayVectorEnv
from .vecenv import make_vec_env


def make_train_envs(cfg, env_cfg, num_envs: int):
    """The trainers' vector env of ``num_envs`` rows: ``make_vec_env(env_cfg, num_envs)`` in this process when
    ``cfg.workers`` is 0, else a ``distributed.RayVectorEnv`` whose rows are shared out over ``cfg.workers`` Ray
    actors (Ray itself is imported only then, by the RayVectorEnv)."""
    if not getattr(cfg, "workers", 0):
        return make_vec_env(env_cfg, num_envs)
    return RayVectorEnv(env_cfg, num_envs, cfg.workers, ray_address=cfg.ray_address, worker_cpus=cfg.worker_cpus)
