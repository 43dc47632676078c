"""pbad_gym: Gymnasium environments on position-based articulated dynamics (PBAD).

Importing the package registers ``pbad_gym/Swimmer-v0``, ``pbad_gym/Spider-v0`` and their later versions
(``pbad_gym/Swimmer-v1``: hinge ranges; ``pbad_gym/Spider-v1``: Ant-v5's dynamics; ``pbad_gym/Spider-v2``: Ant-v5's
legs, damped contact and limits, 0.01 s physics under a 0.05 s control step; ``pbad_gym/Spider-v3``: friction inside
its cone, a converged 0.001 s step, clean resets; ``pbad_gym/Spider-v4``: v3 with trapezoidal penalty springs;
``pbad_gym/Spider-v5``: v4 with friction from a contact's first physics step, the one to use), and Gymnasium's
locomotion robots read from their own MJCF files (``pbad_gym/Hopper-v0``, ``Walker2d-v0``, ``HalfCheetah-v0``,
``Ant-v0``: the ``mjcf`` extra) with Gymnasium (single-env ``entry_point`` and native ``vector_entry_point``) and
exports the engine's entry points.
"""
from . import openmp as _openmp  # noqa: F401  (first: sets OpenMP's wait policy before anything loads it)
import gymnasium as _gym

from .model import Body, Joint, Link, chain, spider, swimmer
from .simulator import Simulator

__version__ = "0.1.0"

for _name, _versions in (("Swimmer", ("v0", "v1")), ("Spider", ("v0", "v1", "v2", "v3", "v4", "v5")),
                         ("Hopper", ("v0",)), ("Walker2d", ("v0",)), ("HalfCheetah", ("v0",)), ("Ant", ("v0",))):
    for _version in _versions:
        _cls = _name + ("" if _version == "v0" else _version.upper())
        if f"pbad_gym/{_name}-{_version}" not in _gym.registry:
            _gym.register(id=f"pbad_gym/{_name}-{_version}", entry_point=f"pbad_gym.envs:{_cls}Env",
                          vector_entry_point=f"pbad_gym.envs:{_cls}VectorEnv", max_episode_steps=1000)

__all__ = ["Body", "Joint", "Link", "Simulator", "chain", "swimmer", "spider", "__version__"]
