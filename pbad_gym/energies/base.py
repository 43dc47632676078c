"""Containers for energy terms and their derivatives."""
from __future__ import annotations

from typing import NamedTuple

from ..kinematics import Moments


class LinkTerms(NamedTuple):
    """An energy expressed on link poses.

    value (B,) [J]; G (B, L, 3, 3) = ∂E/∂R_i; f (B, L, 3) = ∂E/∂t_i [N]; K the Gauss-Newton spatial quadratic form
    ((B, L, 6, 6) or kinematics.Moments) (or None when the term is linear in the pose). Derivative fields are None
    for value-only calls.
    """

    value: object
    G: object = None
    f: object = None
    K: object = None

    def __add__(self, other):
        return LinkTerms(*(_add(a, b) for a, b in zip(self, other)))


class JointTerms(NamedTuple):
    """An energy expressed on generalised coordinates: value (B,), grad (B, nv), hess (B, nv, nv)."""

    value: object
    grad: object = None
    hess: object = None

    def __add__(self, other):
        return JointTerms(*(_add(a, b) for a, b in zip(self, other)))


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, Moments) != isinstance(b, Moments):  # mixed forms: fall back to 6x6 matrices
        a, b = (x.matrix() if isinstance(x, Moments) else x for x in (a, b))
    return a + b
