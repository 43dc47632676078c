"""pbad_gym: Gymnasium environments on position-based articulated dynamics (PBAD).

Importing the package registers ``pbad_gym/Swimmer-v0``, ``pbad_gym/Spider-v0`` and their v1 versions
(``pbad_gym/Swimmer-v1``: hinge ranges; ``pbad_gym/Spider-v1``: Ant-v5's dynamics) with Gymnasium (single-env
``entry_point`` and native ``vector_entry_point``) and exports the engine's entry points.
"""
import gymnasium as _gym

from .model import Body, Joint, Link, chain, spider, swimmer
from .simulator import Simulator

__version__ = "0.1.0"

for _name in ("Swimmer", "Spider"):
    for _version, _cls in (("v0", _name), ("v1", _name + "V1")):
        if f"pbad_gym/{_name}-{_version}" not in _gym.registry:
            _gym.register(id=f"pbad_gym/{_name}-{_version}", entry_point=f"pbad_gym.envs:{_cls}Env",
                          vector_entry_point=f"pbad_gym.envs:{_cls}VectorEnv", max_episode_steps=1000)

__all__ = ["Body", "Joint", "Link", "Simulator", "chain", "swimmer", "spider", "__version__"]
