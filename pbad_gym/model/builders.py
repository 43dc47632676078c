"""Builders that return plain Body descriptions."""
from __future__ import annotations

import numpy as np

from .body import Body, Link
from .joints import Joint
from .shapes import Capsule


def chain(n_links: int, link_length: float = 0.1, radius: float = 0.01, density: float = 1000.0,
          floating: bool = False, joint: str = "hinge", axis=(0.0, 1.0, 0.0)) -> Body:
    """A chain of ``n_links`` capsules lying along +x at q = 0.

    Each capsule's segment runs from its joint to the next joint (``link_length`` [m], ``radius`` [m],
    ``density`` [kg/m³]). Joints are ``joint`` ("hinge" about the horizontal ``axis`` by default, or "ball" /
    "universal"); the first one is fixed to the world at the origin, or is a free joint when ``floating``.
    """
    if int(n_links) != n_links or n_links < 1:
        raise ValueError(f"n_links must be a positive integer, got {n_links!r}")
    if not (link_length > 0 and radius > 0):
        raise ValueError("link_length and radius must be positive")
    links = []
    for i in range(int(n_links)):
        jtype = "free" if (floating and i == 0) else joint
        j = Joint(jtype, axis=axis if jtype in ("hinge", "slide", "universal") else None,
                  axis2=(0.0, 0.0, 1.0) if jtype == "universal" else None)
        shape = Capsule.fromto((0.0, 0.0, 0.0), (link_length, 0.0, 0.0), radius, density)
        place = (np.eye(3), np.zeros(3) if i == 0 else np.array([link_length, 0.0, 0.0]))
        links.append(Link(f"link{i}", parent=i - 1, joint=j, placement=place, shapes=[shape]))
    return Body(links, name=f"chain{n_links}")
