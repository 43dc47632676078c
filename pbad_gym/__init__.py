"""pbad_gym: Gymnasium environments on position-based articulated dynamics (PBAD)."""
from .model import Body, Joint, Link, chain

__version__ = "0.1.0"

import gymnasium as _gym  # noqa: E402

for _name in ("Swimmer", "Spider"):
    if f"pbad_gym/{_name}-v0" not in _gym.registry:
        _gym.register(id=f"pbad_gym/{_name}-v0", entry_point=f"pbad_gym.envs:{_name}Env",
                      vector_entry_point=f"pbad_gym.envs:{_name}VectorEnv", max_episode_steps=1000)
__all__ = ["Body", "Joint", "Link", "chain", "__version__"]
