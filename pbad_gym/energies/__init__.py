"""Terms of the PBAD step energy. Link terms return pose derivatives that kinematics turns into generalised
derivatives; joint terms work on generalised coordinates directly."""
from .actuation import actuation_terms
from .base import JointTerms, LinkTerms
from .gravity import gravity_terms
from .inertia import inertia_targets, inertia_terms

__all__ = ["LinkTerms", "JointTerms", "inertia_targets", "inertia_terms", "gravity_terms", "actuation_terms"]
