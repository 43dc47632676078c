"""Articulated body models: links, joints, shapes and builders (plain data the engine consumes)."""
from .body import Body, Link
from .body_arrays import BodyArrays, put_body
from .builders import chain
from .joints import JOINT_DIMS, Joint
from .mjcf import Ground, from_mjcf
from .robots import spider, swimmer
from .shapes import Box, Capsule, Sphere

__all__ = ["Body", "BodyArrays", "put_body", "Link", "Joint", "JOINT_DIMS", "Capsule", "Sphere", "Box", "chain",
           "swimmer", "spider", "from_mjcf", "Ground"]
