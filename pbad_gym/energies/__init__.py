"""Terms of the PBAD step energy. Link terms return pose derivatives that kinematics turns into generalised
derivatives; joint terms work on generalised coordinates directly."""
from .actuation import actuation_terms
from .base import JointTerms, LinkTerms
from .contact import (FRICTION_CAPS, FRICTION_MODELS, FRICTION_ONSETS, ContactMemory, GroundContact, applied_normal,
                      cone_excess, cone_mismatch, contact_state, contact_terms, join_pushed, normal_shift,
                      sphere_centres, sphere_forces)
from .drag import drag_terms, drag_weights
from .forces import ForceModel, drag_coefficients, make_force_model
from .gravity import gravity_terms
from .inertia import inertia_targets, inertia_terms
from .penalty import DEFAULT_SPRINGS, SPRING_SCHEMES
from .joints import armature_terms, damping_terms, joint_potential, limit_terms, spring_terms

__all__ = ["LinkTerms", "JointTerms", "inertia_targets", "inertia_terms", "gravity_terms", "actuation_terms",
           "drag_terms", "drag_weights", "GroundContact", "FRICTION_MODELS", "contact_terms", "contact_state",
           "ContactMemory", "sphere_forces", "FRICTION_CAPS", "FRICTION_ONSETS", "join_pushed", "applied_normal",
           "cone_excess", "cone_mismatch",
           "normal_shift", "sphere_centres", "limit_terms", "damping_terms", "armature_terms", "spring_terms",
           "joint_potential", "ForceModel", "make_force_model", "drag_coefficients", "SPRING_SCHEMES",
           "DEFAULT_SPRINGS"]
