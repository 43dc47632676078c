"""The force model of a simulation: which energy terms enter the step, with their parameters (plain data)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .contact import GroundContact
from .joints import damping_coefficients
from .penalty import DEFAULT_SPRINGS, check_springs


@dataclass(frozen=True)
class ForceModel:
    """gravity (3,) [m/s²]; drag (L, 3) body-frame coefficients [1/s] or None; contact: GroundContact or None;
    limit_stiffness [N m/rad] for joints with a range (0: off); damping (nv,) [N m s/rad] (default: joints');
    limit_damping [N m s/rad] of the limit penalty (energies/joints.py; 0: off); spring (nv,) joint spring
    stiffnesses [N m/rad or N/m] about the configuration spring_rest (nq,), or both None (off); limit_springs:
    where the limit penalty's spring sits in time within a step, "implicit" or "trapezoidal"
    (energies/penalty.py)."""

    gravity: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, -9.81]))
    drag: np.ndarray | None = None
    contact: GroundContact | None = None
    limit_stiffness: float = 0.0
    damping: np.ndarray | None = None
    limit_damping: float = 0.0
    spring: np.ndarray | None = None
    spring_rest: np.ndarray | None = None
    limit_springs: str = DEFAULT_SPRINGS

    def __post_init__(self):
        check_springs(self.limit_springs, "limit_springs")

    @property
    def has_gravity(self) -> bool:
        return bool(np.any(self.gravity != 0))

    @property
    def has_spring(self) -> bool:
        return self.spring is not None

    @property
    def has_damping(self) -> bool:
        return self.damping is not None and bool(np.any(self.damping > 0))


def drag_coefficients(body, drag):
    """(L, 3) body-frame drag coefficients from a scalar (isotropic), (axial, normal) applied to every link
    (axial along the link frame's x axis), (3,), or an (L, 3) / (L, 2) array."""
    if drag is None:
        return None
    try:
        c = np.asarray(drag, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("drag must be None or non-negative drag rates in 1/s: a scalar (isotropic), (axial, normal), "
                         f"(3,), (L, 2) or (L, 3), got {drag!r}") from None
    if c.ndim == 0:
        c = np.full(3, float(c))
    if c.shape[-1] == 2:
        c = np.concatenate([c[..., :1], c[..., 1:], c[..., 1:]], -1)
    c = np.broadcast_to(c, (body.L, 3)).copy() if c.shape in ((3,), (body.L, 3)) else None
    if c is None or not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("drag must be a non-negative scalar, (axial, normal), (3,), (L, 2) or (L, 3) "
                         f"array of coefficients in 1/s for a body with L={body.L} links, got {drag!r}")
    return c


def make_force_model(body, gravity=(0.0, 0.0, -9.81), drag=None, contact=None, limit_stiffness=0.0,
                     damping=None, limit_damping=0.0, spring=None, spring_rest=None, limit_springs=DEFAULT_SPRINGS):
    """Validated ForceModel for ``body``; contact may be a GroundContact, a dict of its fields, or True; spring a
    stiffness per DOF (nv,) or one for all, spring_rest (nq,) its rest configuration (default ``body.q0()``)."""
    g = np.asarray(gravity, dtype=float).reshape(3)
    if contact is True:
        contact = GroundContact()
    elif isinstance(contact, dict):
        contact = GroundContact(**contact)
    elif contact is not None and not isinstance(contact, GroundContact):
        raise ValueError(f"contact must be None, True, a dict or a GroundContact, got {contact!r}")
    if contact is not None and len(body.contact_points()[0]) == 0:
        raise ValueError("contact needs contact spheres on the body's links")
    if not limit_stiffness >= 0:
        raise ValueError("limit_stiffness must be non-negative")
    if not (limit_damping >= 0 and np.isfinite(limit_damping)):
        raise ValueError(f"limit_damping must be a non-negative number of N m s/rad, got {limit_damping!r}")
    if limit_damping > 0 and not limit_stiffness > 0:
        raise ValueError("limit_damping damps the limit penalty: it needs limit_stiffness > 0")
    damp = damping_coefficients(body) if damping is None else np.broadcast_to(
        np.asarray(damping, float), (body.nv,)).copy()
    if np.any(damp < 0):
        raise ValueError("damping must be non-negative")
    k, rest = spring_arrays(body, spring, spring_rest)
    return ForceModel(g, drag_coefficients(body, drag), contact, float(limit_stiffness), damp, float(limit_damping),
                      k, rest, check_springs(limit_springs, "limit_springs"))


def spring_arrays(body, spring, spring_rest):
    """(stiffness (nv,), rest (nq,)) of the joint springs, validated; (None, None) when ``spring`` is None or all
    zero (no term)."""
    if spring is None:
        if spring_rest is not None:
            raise ValueError("spring_rest is the rest configuration of the joint springs: it needs spring (a "
                             "stiffness in N m/rad or N/m per DOF)")
        return None, None
    try:
        k = np.broadcast_to(np.asarray(spring, dtype=float), (body.nv,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"spring must be a stiffness [N m/rad or N/m] per DOF, shape ({body.nv},) or a scalar, "
                         f"got {spring!r}") from None
    if not (np.all(np.isfinite(k)) and np.all(k >= 0)):
        raise ValueError(f"spring stiffnesses must be finite and non-negative, got {spring!r}")
    if not np.any(k > 0):
        return None, None
    rest = body.q0() if spring_rest is None else np.asarray(spring_rest, dtype=float)
    if rest.shape != (body.nq,) or not np.all(np.isfinite(rest)):
        raise ValueError(f"spring_rest must be a finite configuration of shape ({body.nq},), got {spring_rest!r}")
    for idx in body.quat_q:
        if abs(np.linalg.norm(rest[idx]) - 1.0) > 1e-9:
            raise ValueError(f"spring_rest[{idx[0]}:{idx[-1] + 1}] is a joint's quaternion and must have unit norm, "
                             f"got {rest[idx]!r}")
    return k, rest.copy()
