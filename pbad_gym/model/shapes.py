"""Collision / mass shapes and their exact mass moments.

A shape sits in its link's frame at ``pos`` with rotation ``rot`` (3x3). Mass moments are returned in the link
frame as (m, c, S): mass [kg], first moment c = ∫ρ p [kg m] and second moment S = ∫ρ p pᵀ [kg m²].
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _as_rot(rot):
    r = np.eye(3) if rot is None else np.asarray(rot, dtype=float).reshape(3, 3)
    if not np.allclose(r @ r.T, np.eye(3), atol=1e-9) or np.linalg.det(r) < 0:
        raise ValueError("shape rot must be a proper rotation matrix")
    return r


def rotation_from_z(axis) -> np.ndarray:
    """A rotation whose third column is the unit vector ``axis`` (maps local z onto it)."""
    z = np.asarray(axis, dtype=float)
    n = np.linalg.norm(z)
    if n == 0:
        raise ValueError("axis must be non-zero")
    z = z / n
    helper = np.array([1.0, 0.0, 0.0]) if abs(z[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    x = np.cross(helper, z)
    x /= np.linalg.norm(x)
    return np.stack([x, np.cross(z, x), z], axis=1)


@dataclass
class Shape:
    """Base class: a solid of uniform ``density`` [kg/m³] at ``pos`` / ``rot`` in the link frame."""

    pos: np.ndarray = field(default_factory=lambda: np.zeros(3))
    rot: np.ndarray | None = None
    density: float = 1000.0

    def __post_init__(self):
        self.pos = np.asarray(self.pos, dtype=float).reshape(3)
        self.rot = _as_rot(self.rot)
        if not self.density > 0:
            raise ValueError(f"shape density must be positive, got {self.density}")

    def principal(self):  # -> mass, principal inertia diag about the centre, in the shape frame
        raise NotImplementedError

    def mass_moments(self):
        """(m, c (3,), S (3, 3)) in the link frame."""
        m, diag_inertia = self.principal()
        inertia = np.diag(diag_inertia)
        s_local = 0.5 * np.trace(inertia) * np.eye(3) - inertia  # since I = tr(S) 1 - S
        s = self.rot @ s_local @ self.rot.T + m * np.outer(self.pos, self.pos)
        return m, m * self.pos, s

    def contact_spheres(self):
        """List of (centre (3,), radius) in the link frame used for ground contact."""
        raise NotImplementedError


@dataclass
class Sphere(Shape):
    radius: float = 0.05

    def principal(self):
        if not self.radius > 0:
            raise ValueError("sphere radius must be positive")
        m = self.density * 4.0 / 3.0 * np.pi * self.radius**3
        return m, np.full(3, 0.4 * m * self.radius**2)

    def contact_spheres(self):
        return [(self.pos.copy(), self.radius)]


@dataclass
class Capsule(Shape):
    """A cylinder of ``length`` along the shape's local z axis, capped by hemispheres of ``radius``."""

    radius: float = 0.01
    length: float = 0.1

    def principal(self):
        r, h, rho = self.radius, self.length, self.density
        if not (r > 0 and h >= 0):
            raise ValueError("capsule needs radius > 0 and length >= 0")
        m_cyl = rho * np.pi * r * r * h
        m_sph = rho * 4.0 / 3.0 * np.pi * r**3
        axial = 0.5 * m_cyl * r * r + 0.4 * m_sph * r * r
        perp = m_cyl * (r * r / 4 + h * h / 12) + m_sph * (0.4 * r * r + h * h / 4 + 3 * h * r / 8)
        return m_cyl + m_sph, np.array([perp, perp, axial])

    @classmethod
    def fromto(cls, p0, p1, radius, density=1000.0):
        """A capsule whose segment runs from ``p0`` to ``p1`` (link frame), like MuJoCo's fromto."""
        p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
        return cls(pos=(p0 + p1) / 2, rot=rotation_from_z(p1 - p0), density=density, radius=radius,
                   length=float(np.linalg.norm(p1 - p0)))

    def contact_spheres(self):
        half = self.rot[:, 2] * self.length / 2
        return [(self.pos - half, self.radius), (self.pos + half, self.radius)]


@dataclass
class Box(Shape):
    """A box with half extents ``half_size`` (3,) along the shape axes."""

    half_size: tuple = (0.05, 0.05, 0.05)

    def principal(self):
        a, b, c = np.asarray(self.half_size, dtype=float)
        if min(a, b, c) <= 0:
            raise ValueError("box half_size entries must be positive")
        m = self.density * 8 * a * b * c
        return m, m / 3.0 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])

    def contact_spheres(self):
        """The 8 corners as zero-radius spheres."""
        hs = np.asarray(self.half_size, float)
        corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * hs
        return [(self.pos + self.rot @ c, 0.0) for c in corners]


def combine(shapes):
    """Sum of the mass moments of ``shapes``: (m, c, S) in the link frame."""
    m, c, s = 0.0, np.zeros(3), np.zeros((3, 3))
    for sh in shapes:
        mi, ci, si = sh.mass_moments()
        m, c, s = m + mi, c + ci, s + si
    return m, c, s
