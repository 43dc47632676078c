"""Joint types and their coordinate layout.

q stores positions (nq per joint), v / δ tangent increments (nv per joint); q ⊕ δ is the update.
- hinge: angle about ``axis``;                       nq = nv = 1
- slide: displacement along ``axis``;                 nq = nv = 1
- universal: hinge about ``axis`` then ``axis2``;     nq = nv = 2
- ball: unit quaternion (w, x, y, z);                 nq = 4, nv = 3 (body-frame rotation increment)
- free: position (3, parent frame) + quaternion;      nq = 7, nv = 6 (linear in parent frame, angular in body frame)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

JOINT_DIMS = {"hinge": (1, 1), "slide": (1, 1), "universal": (2, 2), "ball": (4, 3), "free": (7, 6)}
JOINT_CODES = {name: code for code, name in enumerate(JOINT_DIMS)}  # the compiled kernels' joint type numbers


def _unit(v, what):
    a = np.asarray(v, dtype=float).reshape(-1)
    if a.shape != (3,) or not np.all(np.isfinite(a)) or np.linalg.norm(a) < 1e-12:
        raise ValueError(f"{what} must be a finite non-zero 3-vector, got {v!r}")
    return a / np.linalg.norm(a)


@dataclass
class Joint:
    """A joint: ``type`` in JOINT_DIMS, ``axis`` (unit, joint frame) for hinge/slide/universal, ``axis2`` for the
    universal's second hinge (expressed in the frame after the first rotation), optional ``range`` (lo, hi) per
    DOF for limits [rad or m], ``damping`` [N m s/rad] and ``armature`` [kg m² (rotational DOF) or kg (slide and
    free-joint translation)]: a rotor inertia added to every DOF of the joint (MJCF's ``armature``), i.e. to the
    diagonal of the joint-space mass matrix."""

    type: str = "hinge"
    axis: np.ndarray | None = None
    axis2: np.ndarray | None = None
    range: tuple | None = None
    damping: float = 0.0
    armature: float = 0.0

    def __post_init__(self):
        if self.type not in JOINT_DIMS:
            raise ValueError(f"unknown joint type {self.type!r}; accepted: {sorted(JOINT_DIMS)}")
        if self.type in ("hinge", "slide", "universal"):
            self.axis = _unit((0.0, 0.0, 1.0) if self.axis is None else self.axis, "joint axis")
        else:
            self.axis = None
        if self.type == "universal":
            self.axis2 = _unit((0.0, 1.0, 0.0) if self.axis2 is None else self.axis2, "joint axis2")
            if abs(self.axis @ self.axis2) > 1 - 1e-9:
                raise ValueError("universal joint axes must not be parallel")
        if not self.damping >= 0:
            raise ValueError(f"joint damping must be non-negative, got {self.damping!r}")
        if not (np.isfinite(self.armature) and self.armature >= 0):
            raise ValueError(f"joint armature must be a finite non-negative number, got {self.armature!r}")
        if self.range is not None:
            lo, hi = np.broadcast_arrays(*[np.asarray(x, float) for x in self.range])
            if self.type in ("ball", "free"):
                raise ValueError("joint range is only supported on hinge, slide and universal joints")
            if lo.size not in (1, self.nv) or np.any(lo >= hi):
                raise ValueError(f"joint range must be (lo, hi) with lo < hi, got {self.range!r}")
            self.range = (np.broadcast_to(lo, (self.nv,)).copy(), np.broadcast_to(hi, (self.nv,)).copy())

    @property
    def nq(self) -> int:
        return JOINT_DIMS[self.type][0]

    @property
    def nv(self) -> int:
        return JOINT_DIMS[self.type][1]

    def neutral(self) -> np.ndarray:
        """Neutral position coordinates (zeros, identity quaternions)."""
        q = np.zeros(self.nq)
        if self.type == "ball":
            q[0] = 1.0
        elif self.type == "free":
            q[3] = 1.0
        return q
