"""Builders of the two robots of the environments: a 3-D swimmer and a four-legged spider (plain Body data).

Both return a :class:`Body` built with its layout as ``meta`` (a dict, ``body.meta``): which DOFs are actuated,
the segment lengths and radii the renderer draws, and the ground/height data the environments need.
"""
from __future__ import annotations

import numpy as np

from .body import Body, Link
from .joints import Joint
from .shapes import Capsule, Sphere


def _nv(links):
    """Number of DOFs of a list of links."""
    return sum(lk.joint.nv for lk in links)


def _rot_z(angle):
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rot_y(angle):
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def swimmer(n_links: int = 4, link_length: float = 1.0, radius: float = 0.1, density: float = 1000.0,
            joint_range: float | None = None) -> Body:
    """A free-floating chain of ``n_links`` capsules (the PBAD paper's swimmer: 4 links, 6 + 3 = 9 DOF).

    The base link ``link0`` has a free joint; each following link hangs on a hinge about the vertical z axis
    at the end of the previous one, so the swimmer undulates in the horizontal plane. At q = 0 it lies along −x
    with its head, the base link, in front (as Gymnasium's Swimmer, whose torso leads): link i spans x in
    [−(i+1)·L, −i·L]. Every capsule's segment lies on its link's x axis, the drag model's axial direction.
    Proportions follow Gymnasium's Swimmer-v5 (1 m capsules of radius 0.1 m, density 1000 kg/m³).
    ``joint_range`` (rad): symmetric hinge range for limits, or None.
    """
    if int(n_links) != n_links or n_links < 2:
        raise ValueError(f"n_links must be an integer >= 2, got {n_links!r}")
    if not (link_length > 0 and radius > 0 and density > 0):
        raise ValueError("link_length, radius and density must be positive")
    links = []
    for i in range(int(n_links)):
        if i == 0:
            joint = Joint("free")
            place = (np.eye(3), np.zeros(3))
        else:
            rng = None if joint_range is None else (-float(joint_range), float(joint_range))
            joint = Joint("hinge", axis=(0.0, 0.0, 1.0), range=rng)
            place = (np.eye(3), np.array([-link_length, 0.0, 0.0]))
        shape = Capsule.fromto((0.0, 0.0, 0.0), (-link_length, 0.0, 0.0), radius, density)
        links.append(Link(f"link{i}", parent=i - 1, joint=joint, placement=place, shapes=[shape]))
    meta = {
        "actuated": np.arange(6, _nv(links)),
        "segments": [(i, np.zeros(3), np.array([-link_length, 0.0, 0.0]), radius) for i in range(int(n_links))],
        "spheres": [],
        "seabed_depth": 1.0,  # [m] below the centre of mass: where the renderer draws its grid
    }
    return Body(links, name=f"swimmer{n_links}", meta=meta)


def spider(torso_radius: float = 0.25, hip_offset: float = 0.2 * np.sqrt(2.0), thigh_length: float = 0.2 * np.sqrt(2.0),
           shin_length: float = 0.4 * np.sqrt(2.0), leg_radius: float = 0.08, density: float = 1000.0,
           knee_bend: float = np.deg2rad(60.0), hip_yaw_range: float = np.deg2rad(30.0),
           hip_pitch_range: tuple = (np.deg2rad(-5.0), np.deg2rad(40.0)),
           knee_range: tuple = (np.deg2rad(-15.0), np.deg2rad(30.0)), armature: float = 0.0,
           hip: str = "universal", n_legs: int = 4) -> Body:
    """A spider: a spherical torso on a free joint and four legs, each a thigh on a 2-DOF hip (universal joint:
    yaw about the vertical axis, then pitch about the horizontal axis across the leg) and a shin on a 1-DOF knee
    (hinge, pitch): 6 + 4·3 = 18 DOF, 12 actuated. ``hip="hinge"``: the hip turns about the vertical axis only
    (Ant-v5's legs: 6 + 4·2 = 14 DOF, 8 actuated; ``hip_pitch_range`` is then unused).

    Proportions follow Gymnasium's Ant-v5: torso sphere of radius 0.25 m, legs along the diagonals, hips
    0.28 m out from the centre (the Ant's fixed "aux" capsules belong to the torso here), thighs 0.28 m, shins
    0.57 m, capsule radius 0.08 m, density 1000 kg/m³. At q = 0 the thighs are horizontal and the shins point
    down by ``knee_bend``; positive hip pitch and knee angles bend the leg down. Joint ranges (rad) are for the
    limit penalty that, as the Ant's joint limits do, lets the unactuated robot stand. ``armature`` [kg m²]: rotor
    inertia of every hip and knee DOF (Ant-v5: 1 at density 5). Contact spheres: the torso, the hips, the knees
    and the feet (13 in all). ``n_legs``: legs spread evenly around the torso from the front-left diagonal (4:
    the spider; more make the larger bodies of ``pbad-bench scaling-n``, 6 + 3·n_legs or 6 + 2·n_legs DOF and
    1 + 3·n_legs contact spheres).
    """
    if isinstance(n_legs, bool) or int(n_legs) != n_legs or n_legs < 1:
        raise ValueError(f"n_legs must be a positive integer, got {n_legs!r}")
    n_legs = int(n_legs)
    if hip not in ("universal", "hinge"):
        raise ValueError(f"hip must be 'universal' or 'hinge', got {hip!r}")
    for name, val in (("torso_radius", torso_radius), ("hip_offset", hip_offset), ("thigh_length", thigh_length),
                      ("shin_length", shin_length), ("leg_radius", leg_radius), ("density", density)):
        if not val > 0:
            raise ValueError(f"{name} must be positive, got {val!r}")
    torso_shapes = [Sphere(radius=torso_radius, density=density)]
    torso_spheres = [(np.zeros(3), torso_radius)]
    angles = np.deg2rad(45.0 + 360.0 * np.arange(n_legs) / n_legs)
    for a in angles:
        u = np.array([np.cos(a), np.sin(a), 0.0])
        torso_shapes.append(Capsule.fromto(np.zeros(3), hip_offset * u, leg_radius, density))
        torso_spheres.append((hip_offset * u, leg_radius))
    links = [Link("torso", parent=-1, joint=Joint("free"), shapes=torso_shapes, contact_spheres=torso_spheres)]
    segments = [(0, np.zeros(3), hip_offset * np.array([np.cos(a), np.sin(a), 0.0]), leg_radius) for a in angles]
    names = (("front_left", "back_left", "back_right", "front_right") if n_legs == 4
             else tuple(f"leg{k}" for k in range(n_legs)))
    for a, name in zip(angles, names):
        thigh = len(links)
        u = np.array([np.cos(a), np.sin(a), 0.0])
        if hip == "hinge":
            hip_joint = Joint("hinge", axis=(0.0, 0.0, 1.0), armature=armature,
                              range=(-hip_yaw_range, hip_yaw_range))
        else:
            hip_joint = Joint("universal", axis=(0.0, 0.0, 1.0), axis2=(0.0, 1.0, 0.0), armature=armature,
                              range=((-hip_yaw_range, hip_pitch_range[0]), (hip_yaw_range, hip_pitch_range[1])))
        links.append(Link(f"{name}_thigh", parent=0, joint=hip_joint, placement=(_rot_z(a), hip_offset * u),
                          shapes=[Capsule.fromto(np.zeros(3), (thigh_length, 0.0, 0.0), leg_radius, density)],
                          contact_spheres=[(np.array([thigh_length, 0.0, 0.0]), leg_radius)]))
        knee = Joint("hinge", axis=(0.0, 1.0, 0.0), range=tuple(knee_range), armature=armature)
        links.append(Link(f"{name}_shin", parent=thigh, joint=knee,
                          placement=(_rot_y(knee_bend), np.array([thigh_length, 0.0, 0.0])),
                          shapes=[Capsule.fromto(np.zeros(3), (shin_length, 0.0, 0.0), leg_radius, density)],
                          contact_spheres=[(np.array([shin_length, 0.0, 0.0]), leg_radius)]))
        segments.append((thigh, np.zeros(3), np.array([thigh_length, 0.0, 0.0]), leg_radius))
        segments.append((thigh + 1, np.zeros(3), np.array([shin_length, 0.0, 0.0]), leg_radius))
    # standing height at q = 0 with the feet on the ground
    foot_drop = shin_length * np.sin(knee_bend)
    meta = {
        "actuated": np.arange(6, _nv(links)),
        "segments": segments,
        "spheres": [(0, np.zeros(3), torso_radius)],
        "feet": [(2 + 2 * k, np.array([shin_length, 0.0, 0.0]), leg_radius) for k in range(n_legs)],
        "stand_height": float(foot_drop + leg_radius),
    }
    name = "spider" if hip == "universal" else "spider_hinge_hips"
    return Body(links, name=name if n_legs == 4 else f"{name}_{n_legs}_legs", meta=meta)
