"""Gymnasium environments on PBAD: native vector envs (one batched Simulator) and single-env forms.

``SwimmerVectorEnv`` / ``SwimmerEnv``, ``SpiderVectorEnv`` / ``SpiderEnv`` (v0), their v1 versions
``SwimmerV1VectorEnv`` / ``SwimmerV1Env``, ``SpiderV1VectorEnv`` / ``SpiderV1Env`` and Spider-v2's
``SpiderV2VectorEnv`` / ``SpiderV2Env`` (and v3); Gymnasium's locomotion robots read from their MJCF files
(``HopperVectorEnv``, ``Walker2dVectorEnv``, ``HalfCheetahVectorEnv``, ``AntVectorEnv`` and single-env forms;
they need the ``mjcf`` extra); ``SB3VecEnv`` adapts a native vector env to Stable-Baselines3's VecEnv
API (SB3 is an optional extra: ``pip install pbad_gym[sb3]``); ``render`` holds
the software renderer and ``write_gif``.
"""
from .base import PBADEnv, PBADVectorEnv, validate_solver_options
from .locomotion import (AntEnv, AntVectorEnv, HalfCheetahEnv, HalfCheetahVectorEnv, HopperEnv, HopperVectorEnv,
                         MJCFVectorEnv, Walker2dEnv, Walker2dVectorEnv)
from .spider import (SpiderEnv, SpiderV1Env, SpiderV1VectorEnv, SpiderV2Env, SpiderV2VectorEnv, SpiderV3Env,
                     SpiderV3VectorEnv, SpiderV4Env, SpiderV4VectorEnv, SpiderV5Env, SpiderV5VectorEnv,
                     SpiderVectorEnv)
from .swimmer import SwimmerEnv, SwimmerV1Env, SwimmerV1VectorEnv, SwimmerVectorEnv


def __getattr__(name):
    if name == "SB3VecEnv":  # imported lazily: stable-baselines3 is optional
        from .sb3 import SB3VecEnv

        return SB3VecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PBADEnv", "PBADVectorEnv", "SwimmerEnv", "SwimmerVectorEnv", "SpiderEnv", "SpiderVectorEnv",
           "SwimmerV1Env", "SwimmerV1VectorEnv", "SpiderV1Env", "SpiderV1VectorEnv", "SpiderV2Env", "SpiderV2VectorEnv",
           "SpiderV3Env", "SpiderV3VectorEnv", "SpiderV4Env", "SpiderV4VectorEnv", "SpiderV5Env",
           "SpiderV5VectorEnv", "MJCFVectorEnv", "HopperEnv",
           "HopperVectorEnv", "Walker2dEnv", "Walker2dVectorEnv", "HalfCheetahEnv", "HalfCheetahVectorEnv", "AntEnv",
           "AntVectorEnv", "SB3VecEnv", "validate_solver_options"]
