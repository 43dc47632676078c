"""A Body from an MJCF file, read from MuJoCo's compiled model (docs/mjcf.md, "bring your robot").

MuJoCo's compiler resolves defaults, degrees, ``fromto``, inertia from geoms and every other convenience of the
format into flat arrays; :func:`from_mjcf` maps those arrays, not the XML, so a model means here what it means
in MuJoCo. The generalised coordinates are MuJoCo's: q = qpos and v = qvel, joint for joint (hinge and slide:
the joint value, ``ref`` included; ball: quaternion (w, x, y, z) and body-frame angular velocity; free: world
position and quaternion, world linear velocity and body-frame angular velocity), so states copy between the two
engines unchanged.

Mapping: each MJCF body with joints becomes one link per joint (the joints of one body act in their order, each
about its anchor in the frame the previous ones moved; all but the last link are massless); a body without
joints is welded to its parent (its mass, inertia and geoms join the parent's link); the link frame of a joint
sits at the joint's anchor, with the MJCF body's orientation. Geoms that can touch the floor become contact
spheres: spheres as they are, capsules as their two end spheres (against a plane a capsule's lowest point lies on
one of them), boxes as their eight corners (radius 0).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .body import Body, Link
from .joints import Joint

# MuJoCo's enums (mjtJoint, mjtGeom, mjtTrn, mjtDyn, mjtGain, mjtBias), by value
_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3
_JOINT_NAMES = {_FREE: "free", _BALL: "ball", _SLIDE: "slide", _HINGE: "hinge"}
_PLANE, _SPHERE, _CAPSULE, _BOX = 0, 2, 3, 6
_GEOM_NAMES = {0: "plane", 1: "hfield", 2: "sphere", 3: "capsule", 4: "ellipsoid", 5: "cylinder", 6: "box",
               7: "mesh", 8: "sdf"}
_TRN_JOINT, _DYN_NONE, _GAIN_FIXED, _BIAS_NONE = 0, 0, 0, 0


@dataclass(frozen=True)
class Ground:
    """The MJCF floor: a horizontal plane at ``height`` [m] with sliding friction coefficient ``mu``."""

    height: float
    mu: float


def _load(source):
    """A compiled ``mujoco.MjModel`` from a path, an XML string or an MjModel; errors name the file or the extra."""
    try:
        import mujoco
    except ImportError as e:
        raise ImportError("from_mjcf needs MuJoCo's compiler: pip install 'pbad_gym[mjcf]'") from e
    if isinstance(source, mujoco.MjModel):
        return source, "<MjModel>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not source.lstrip().startswith("<")):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"MJCF file not found: {path}")
        compile_, what = (lambda: mujoco.MjModel.from_xml_path(path)), path
    elif isinstance(source, str):
        compile_, what = (lambda: mujoco.MjModel.from_xml_string(source)), "<XML string>"
    else:
        raise TypeError(f"from_mjcf takes a path, an XML string or a mujoco.MjModel, got {type(source).__name__}")
    try:
        return compile_(), what
    except ValueError as e:  # MuJoCo's parser and compiler errors name the element and line
        raise ValueError(f"MuJoCo could not compile {what}: {e}") from None


def _name(m, kind, i, fallback):
    import mujoco

    return mujoco.mj_id2name(m, kind, i) or fallback


def _quat_mat(q):
    """Rotation matrix (3, 3) of a unit quaternion (w, x, y, z)."""
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _axis_angle(axis, angle):
    """Rotation matrix by ``angle`` [rad] about the unit ``axis`` (Rodrigues)."""
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def _compose(a, b):
    """Frame b (R, t) given in frame a, expressed in a's own parent frame."""
    return a[0] @ b[0], a[0] @ b[1] + a[1]


def _refuse(m, what):
    """Raise ValueError for the MJCF features the engine does not model, naming them."""
    import mujoco

    counts = {"tendons": m.ntendon, "equality constraints": m.neq, "mocap bodies": m.nmocap,
              "flexes": getattr(m, "nflex", 0)}
    for feature, n in counts.items():
        if n:
            raise ValueError(f"{what}: {feature} are not supported ({n} in the model)")
    for j in range(m.njnt):
        name = _name(m, mujoco.mjtObj.mjOBJ_JOINT, j, f"joint {j}")
        if m.jnt_type[j] == _BALL and m.jnt_limited[j]:
            raise ValueError(f"{what}: joint {name!r}: limits on ball joints are not supported")
        dof = m.jnt_dofadr[j]
        if np.any(m.dof_frictionloss[dof:dof + (6 if m.jnt_type[j] == _FREE else 3 if m.jnt_type[j] == _BALL else 1)]):
            raise ValueError(f"{what}: joint {name!r}: frictionloss is not supported")
    for a in range(m.nu):
        name = _name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a, f"actuator {a}")
        if m.actuator_trntype[a] != _TRN_JOINT:
            raise ValueError(f"{what}: actuator {name!r}: only joint transmissions are supported (not tendons, "
                             "sites or bodies)")
        if m.jnt_type[m.actuator_trnid[a, 0]] not in (_HINGE, _SLIDE):
            raise ValueError(f"{what}: actuator {name!r}: only hinge and slide joints can be actuated")
        if (m.actuator_dyntype[a] != _DYN_NONE or m.actuator_gaintype[a] != _GAIN_FIXED
                or m.actuator_biastype[a] != _BIAS_NONE):
            raise ValueError(f"{what}: actuator {name!r}: only motors are supported (no activation dynamics, "
                             "position or velocity servos)")
        if m.actuator_forcelimited[a]:
            raise ValueError(f"{what}: actuator {name!r}: forcerange is not supported (limit the control instead)")


def _ground(m, what):
    """The floor (a Ground) from the world's plane geoms, or None; other colliding static geoms are refused."""
    import mujoco

    planes = []
    for g in range(m.ngeom):
        if m.body_weldid[m.geom_bodyid[g]] != 0:
            continue  # geoms of moving bodies: contact spheres
        name = _name(m, mujoco.mjtObj.mjOBJ_GEOM, g, f"geom {g}")
        if m.geom_type[g] == _PLANE:
            normal = _quat_mat(m.geom_quat[g])[:, 2]
            if m.geom_bodyid[g] != 0 or not np.allclose(normal, (0.0, 0.0, 1.0), atol=1e-9):
                raise ValueError(f"{what}: geom {name!r}: only a horizontal floor plane in the worldbody is "
                                 "supported (non-plane terrain is not)")
            planes.append((g, float(m.geom_pos[g, 2]), float(m.geom_friction[g, 0])))
        elif m.geom_contype[g] or m.geom_conaffinity[g]:
            raise ValueError(f"{what}: geom {name!r}: static {_GEOM_NAMES[m.geom_type[g]]} geoms (terrain other "
                             "than the floor plane) are not supported")
    if len(planes) > 1:
        raise ValueError(f"{what}: {len(planes)} floor planes; one is supported")
    if not planes:
        return None, None
    g, height, mu = planes[0]
    return Ground(height, mu), g


def _touches(m, g, floor):
    """Whether geom g can collide with the floor geom (MuJoCo's contype/conaffinity rule)."""
    return bool((m.geom_contype[g] & m.geom_conaffinity[floor]) or (m.geom_contype[floor] & m.geom_conaffinity[g]))


def _geom_spheres(m, g, frame, what):
    """Contact spheres [(centre (3,), radius)] of geom g, centres in the frame ``frame`` (R, t) of its link."""
    import mujoco

    R, t = _compose(frame, (_quat_mat(m.geom_quat[g]), m.geom_pos[g]))
    size, kind = m.geom_size[g], m.geom_type[g]
    if kind == _SPHERE:
        return [(t, float(size[0]))]
    if kind == _CAPSULE:
        return [(t + s * size[1] * R[:, 2], float(size[0])) for s in (-1.0, 1.0)]
    if kind == _BOX:
        corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * size
        return [(t + R @ c, 0.0) for c in corners]
    name = _name(m, mujoco.mjtObj.mjOBJ_GEOM, g, f"geom {g}")
    raise ValueError(f"{what}: geom {name!r}: {_GEOM_NAMES[kind]} geoms cannot touch the floor here (spheres, "
                     "capsules and boxes can; give it contype=0 conaffinity=0 to make it visual only)")


def _joint_link(m, j, name, parent, placement):
    """The Link of joint j: massless, at ``placement`` (R, t) in the parent link with MJCF's ``ref`` folded in."""
    R, t = placement
    kind, axis, ref = m.jnt_type[j], np.asarray(m.jnt_axis[j], float), float(m.qpos0[m.jnt_qposadr[j]])
    if kind == _SLIDE:
        t = t - ref * (R @ axis)  # MuJoCo moves by qpos − ref: q = qpos
    elif kind == _HINGE:
        R = R @ _axis_angle(axis, -ref)
    dof = m.jnt_dofadr[j]
    rng = (float(m.jnt_range[j, 0]), float(m.jnt_range[j, 1])) if m.jnt_limited[j] else None
    joint = Joint(_JOINT_NAMES[kind], axis=axis if kind in (_HINGE, _SLIDE) else None, range=rng,
                  damping=float(m.dof_damping[dof]), armature=float(m.dof_armature[dof]))
    return Link(name, parent=parent, joint=joint, placement=(R, t), mass=0.0, com=np.zeros(3),
                inertia=np.zeros((3, 3)))


def _add_mass(link, m, b, frame):
    """Add MJCF body b's mass, centre of mass and inertia, given in the frame ``frame`` of ``link``."""
    mass = float(m.body_mass[b])
    if mass == 0:
        return
    Ri = frame[0] @ _quat_mat(m.body_iquat[b])
    com = frame[0] @ m.body_ipos[b] + frame[1]
    inertia = Ri @ np.diag(m.body_inertia[b]) @ Ri.T
    total = link.mass + mass
    c = (link.mass * link.com + mass * com) / total

    def shifted(I, mm, p):  # parallel-axis theorem: about c instead of p
        d = p - c
        return I + mm * (d @ d * np.eye(3) - np.outer(d, d))

    link.inertia = shifted(link.inertia, link.mass, link.com) + shifted(inertia, mass, com)
    link.mass, link.com = total, c


def from_mjcf(source) -> Body:
    """A :class:`Body` from an MJCF model (a file path, an XML string or a compiled ``mujoco.MjModel``; needs the
    ``mjcf`` extra). Coordinates equal MuJoCo's qpos / qvel (module docstring).

    ``body.meta`` holds what the layers above the engine need: ``actuated`` (DOF index per actuator, in actuator
    order), ``gear`` (N m or N per unit control: gear × gain), ``ctrlrange`` (n_act, 2), ``qpos0`` (nq,: MuJoCo's
    reference configuration), ``spring`` (nv,) and ``spring_rest`` (nq,) (joint stiffness and springref),
    ``ground`` (a :class:`Ground` or None), ``gravity`` (3,) [m/s²], ``timestep`` [s], ``medium``
    (density [kg/m³], viscosity [Pa s]: MuJoCo's fluid options, which this Body does not apply), ``body_frames``
    (MJCF body name -> (link index, R (3, 3), t (3,)): the body's frame in that link's frame), ``contact_mu``
    (per contact sphere, in :meth:`Body.contact_points` order: the larger of its geom's and the floor's sliding
    friction, MuJoCo's rule), ``contact_body`` (per contact sphere: its MJCF body id), ``n_mjcf_bodies`` (MuJoCo's
    nbody, the world included), ``joint_names`` and ``actuator_names``; with a floor, ``feet`` ([]: the renderer
    draws the ground).

    Refused, by name: tendons, equality constraints, mocap bodies, flexes, frictionloss, limits on ball joints,
    actuators other than joint motors (with forcerange), a floor that is not one horizontal plane, static geoms
    other than it, and floor-touching geoms other than spheres, capsules and boxes. Only geom–floor contact is
    modelled: collisions between the robot's own geoms are not.
    """
    import mujoco

    m, what = _load(source)
    _refuse(m, what)
    ground, floor = _ground(m, what)
    links, link_of, frame_of = [], {0: -1}, {0: (np.eye(3), np.zeros(3))}
    body_frames, segments, spheres, per_sphere = {}, [], [], {}
    for b in range(1, m.nbody):
        parent = m.body_parentid[b]
        bname = _name(m, mujoco.mjtObj.mjOBJ_BODY, b, f"body{b}")
        local = (_quat_mat(m.body_quat[b]), np.asarray(m.body_pos[b], float))
        joints = range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b])
        if not joints:  # welded to its parent: its frame in the parent's link
            link_of[b], frame_of[b] = link_of[parent], _compose(frame_of[parent], local)
            if link_of[b] < 0:
                continue  # a static body: part of the world (_ground refused its colliding geoms)
        else:
            before = _compose(frame_of[parent], local)  # the body frame before its joints, in the parent link
            up, prev = link_of[parent], None
            for j in joints:
                jname = _name(m, mujoco.mjtObj.mjOBJ_JOINT, j, f"joint{j}")
                if m.jnt_type[j] == _FREE:
                    placement, anchor = (np.eye(3), np.zeros(3)), np.zeros(3)  # qpos is the body's world pose
                else:
                    anchor = np.asarray(m.jnt_pos[j], float)
                    placement = (_compose(before, (np.eye(3), anchor)) if prev is None
                                 else (np.eye(3), anchor - prev))
                name = bname if j == joints[-1] else f"{bname}/{jname}"
                links.append(_joint_link(m, j, name, up, placement))
                up, prev = len(links) - 1, anchor
            link_of[b], frame_of[b] = up, (np.eye(3), -prev)
        link = links[link_of[b]]
        _add_mass(link, m, b, frame_of[b])
        body_frames[bname] = (link_of[b], *frame_of[b])
        for g in range(m.body_geomadr[b], m.body_geomadr[b] + m.body_geomnum[b]):
            _draw(m, g, link_of[b], frame_of[b], segments, spheres)
            if ground is not None and _touches(m, g, floor):
                new = _geom_spheres(m, g, frame_of[b], what)
                link.contact_spheres = link.contact_spheres + new
                mu = max(ground.mu, float(m.geom_friction[g, 0]))
                per_sphere.setdefault(link_of[b], []).extend([(mu, b)] * len(new))
    if not links:
        raise ValueError(f"{what}: the model has no moving bodies")
    spring = np.zeros(m.nv)
    for j in range(m.njnt):
        spring[m.jnt_dofadr[j]:m.jnt_dofadr[j] + Joint(_JOINT_NAMES[m.jnt_type[j]]).nv] = m.jnt_stiffness[j]
    meta = {
        "actuated": np.array([m.jnt_dofadr[m.actuator_trnid[a, 0]] for a in range(m.nu)], dtype=np.int64),
        "gear": np.array([m.actuator_gear[a, 0] * m.actuator_gainprm[a, 0] for a in range(m.nu)]),
        "ctrlrange": np.array([m.actuator_ctrlrange[a] if m.actuator_ctrllimited[a] else (-np.inf, np.inf)
                               for a in range(m.nu)]).reshape(-1, 2),
        "qpos0": np.array(m.qpos0), "spring": spring, "spring_rest": np.array(m.qpos_spring),
        "ground": ground, "gravity": np.array(m.opt.gravity), "timestep": float(m.opt.timestep),
        "medium": (float(m.opt.density), float(m.opt.viscosity)), "body_frames": body_frames,
        "contact_mu": np.array([mu for i in range(len(links)) for mu, _ in per_sphere.get(i, [])]),
        "contact_body": np.array([b for i in range(len(links)) for _, b in per_sphere.get(i, [])], dtype=np.int64),
        "n_mjcf_bodies": int(m.nbody),
        "joint_names": [_name(m, mujoco.mjtObj.mjOBJ_JOINT, j, f"joint{j}") for j in range(m.njnt)],
        "actuator_names": [_name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a, f"actuator{a}") for a in range(m.nu)],
        "segments": segments, "spheres": spheres,
    }
    if ground is not None:
        meta["feet"] = []
    return Body(links, name=_model_name(m, what), meta=meta)


def _model_name(m, what):
    """The ``<mujoco model=...>`` name (the first of MuJoCo's names), else the file's stem."""
    first = bytes(m.names).split(b"\0", 1)[0].decode()
    return first or os.path.splitext(os.path.basename(what))[0].strip("<>") or "mjcf"


def _draw(m, g, link, frame, segments, spheres):
    """Add geom g's capsule segment (link, a (3,), b (3,), radius) or sphere (link, centre (3,), radius), in its
    link's frame, to what the renderer draws."""
    R, t = _compose(frame, (_quat_mat(m.geom_quat[g]), m.geom_pos[g]))
    if m.geom_type[g] == _CAPSULE:
        half = m.geom_size[g, 1] * R[:, 2]
        segments.append((link, t - half, t + half, float(m.geom_size[g, 0])))
    elif m.geom_type[g] == _SPHERE:
        spheres.append((link, t, float(m.geom_size[g, 0])))
