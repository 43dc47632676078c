"""pbad_gym: Gymnasium environments on position-based articulated dynamics (PBAD).

Importing the package registers ``pbad_gym/Swimmer-v0`` and ``pbad_gym/Spider-v0`` with Gymnasium (single-env
``entry_point`` and native ``vector_entry_point``) and exports the engine's entry points.
"""
import gymnasium as _gym

from .model import Body, Joint, Link, chain, spider, swimmer
from .simulator import Simulator

__version__ = "0.1.0"

for _name in ("Swimmer", "Spider"):
    if f"pbad_gym/{_name}-v0" not in _gym.registry:
        _gym.register(id=f"pbad_gym/{_name}-v0", entry_point=f"pbad_gym.envs:{_name}Env",
                      vector_entry_point=f"pbad_gym.envs:{_name}VectorEnv", max_episode_steps=1000)

__all__ = ["Body", "Joint", "Link", "Simulator", "chain", "swimmer", "spider", "__version__"]
