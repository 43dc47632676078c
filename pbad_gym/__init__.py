"""pbad_gym: Gymnasium environments on position-based articulated dynamics (PBAD)."""
from .model import Body, Joint, Link, chain

__version__ = "0.1.0"
__all__ = ["Body", "Joint", "Link", "chain", "__version__"]
