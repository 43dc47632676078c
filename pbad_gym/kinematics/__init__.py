"""Batched kinematics (docs/physics.md §1): rotations and vector algebra, the configuration space, forward kinematics,
spatial mass forms, and the chain rule from link-pose derivatives to generalised derivatives.

Shapes: B trajectories, L links, nv DOFs. Link poses R (B, L, 3, 3), t (B, L, 3) in the world frame. Each DOF j
has a world motion axis s_j = (ω_j, v_j): moving δ_j rotates every descendant link about ω_j and translates it,
dR = [ω_j]× R dδ_j, dt = (ω_j × t + v_j) dδ_j. All functions take the array module from their inputs.
"""
from .algebra import axis_angle, cross, matvec, quat_conj, quat_exp, quat_log, quat_mul, quat_to_rot, skew
from .chain_rule import (cross_hessian, generalized_gradient, generalized_hessian, motion_matrix,
                         pose_gradient_wrench)
from .configuration import (coordinate_cotangent, difference, difference_vjp, integrate, normalize, qdot,
                            tangent_cotangent)
from .forward import Kinematics, forward_kinematics, point_jacobian
from .spatial import (Moments, cross_spatial_form, mixed_moments, spatial_from_moments, weighted_spatial_form,
                      world_moments)

__all__ = ["axis_angle", "cross", "matvec", "quat_conj", "quat_exp", "quat_log", "quat_mul", "quat_to_rot", "skew",
           "cross_hessian", "generalized_gradient", "generalized_hessian", "motion_matrix", "pose_gradient_wrench",
           "coordinate_cotangent", "difference", "difference_vjp", "integrate", "normalize", "qdot",
           "tangent_cotangent", "Kinematics", "forward_kinematics", "point_jacobian",
           "Moments", "cross_spatial_form", "mixed_moments", "spatial_from_moments", "weighted_spatial_form",
           "world_moments"]
