"""Articulated body description: a tree of links, each with a joint, a placement and mass moments.

A body is plain data; the engine reads the topology arrays built here (index maps, subtree matrix, the weights
that assemble generalised Hessians) and never mutates it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .body_arrays import put_body
from .joints import Joint
from .shapes import combine


@dataclass
class Link:
    """One rigid link.

    name: unique name. parent: index of the parent link, -1 for the world. joint: the joint to the parent.
    placement: (rotation (3,3), translation (3,)) of the joint frame in the parent link frame; the link frame is
    the joint frame moved by the joint. shapes: solids giving mass moments and contact spheres unless ``mass``,
    ``com`` and ``inertia`` (about the com, link frame) are given directly; ``mass=0`` with zero com and inertia
    makes a massless frame between two joints (the body as a whole must have mass). contact_spheres: optional explicit
    list of (centre (3,), radius) in the link frame.
    """

    name: str
    parent: int = -1
    joint: Joint = field(default_factory=Joint)
    placement: tuple = None
    shapes: list = field(default_factory=list)
    mass: float | None = None
    com: np.ndarray | None = None
    inertia: np.ndarray | None = None
    contact_spheres: list | None = None

    def __post_init__(self):
        rot, trans = (np.eye(3), np.zeros(3)) if self.placement is None else self.placement
        rot = np.asarray(rot, float).reshape(3, 3)
        if not np.allclose(rot @ rot.T, np.eye(3), atol=1e-9) or np.linalg.det(rot) < 0:
            raise ValueError(f"link {self.name!r}: placement rotation must be a proper rotation")
        self.placement = (rot, np.asarray(trans, float).reshape(3))
        if self.mass is None:
            if not self.shapes:
                raise ValueError(f"link {self.name!r}: give shapes or mass/com/inertia")
            m, c, s = combine(self.shapes)
            self.mass, self.com = m, c / m
            self.inertia = np.trace(s - m * np.outer(self.com, self.com)) * np.eye(3) - (
                s - m * np.outer(self.com, self.com))
        self.com = np.zeros(3) if self.com is None else np.asarray(self.com, float).reshape(3)
        self.inertia = np.asarray(self.inertia, float).reshape(3, 3)
        if self.mass == 0 and not (np.any(self.com) or np.any(self.inertia)):
            pass  # a massless frame between joints (MJCF bodies with several joints); a body needs mass elsewhere
        elif not self.mass > 0:
            raise ValueError(f"link {self.name!r}: mass must be positive, got {self.mass}")
        elif not np.allclose(self.inertia, self.inertia.T) or np.linalg.eigvalsh(self.inertia).min() <= 0:
            raise ValueError(f"link {self.name!r}: inertia must be symmetric positive definite")
        if self.contact_spheres is None:
            self.contact_spheres = [s for sh in self.shapes for s in sh.contact_spheres()]

    @property
    def first_moment(self) -> np.ndarray:
        """c = m·com [kg m], link frame."""
        return self.mass * self.com

    @property
    def second_moment(self) -> np.ndarray:
        """S = ∫ρ p pᵀ [kg m²], link frame."""
        s_com = 0.5 * np.trace(self.inertia) * np.eye(3) - self.inertia
        return s_com + self.mass * np.outer(self.com, self.com)


class Body:
    """A validated tree of links with the index maps the engine needs.

    Attributes: links, nq, nv, L (link count), q_start / v_start (per link), dof_link (nv,), parent (L,),
    armature (nv,) per-DOF rotor inertia from the joints,
    levels (links grouped by depth), subtree (L, L) with subtree[a, i] = 1 if i is a or a descendant of a,
    hess_weight (nv, nv) used to assemble symmetric generalised Hessians, vel_carrier (nv, nv).
    meta: a dict of data for the layers above the engine (the environments and the renderer: which DOFs are
    actuated, the segments to draw, ...), given to the constructor; {} when not given. The engine never reads it.
    """

    def __init__(self, links, name="body", meta=None):
        self.name = name
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict or None, got {type(meta).__name__}")
        self.meta = {} if meta is None else dict(meta)
        self.links = list(links)
        if not self.links:
            raise ValueError("a body needs at least one link")
        names = [lk.name for lk in self.links]
        if len(set(names)) != len(names):
            raise ValueError("link names must be unique")
        self.L = len(self.links)
        self.parent = np.array([lk.parent for lk in self.links], dtype=np.int64)
        for i, p in enumerate(self.parent):
            if not -1 <= p < self.L or p == i:
                raise ValueError(f"link {names[i]!r}: parent index {p} is invalid")
        self.depth = self._depths()
        self._index_maps()
        self._topology()
        if not self.total_mass > 0:
            raise ValueError(f"body {name!r}: its links have no mass")

    # --- construction helpers -----------------------------------------------------------------------------
    def _depths(self):
        depth = np.full(self.L, -1)
        for i in range(self.L):
            seen, j = [], i
            while j != -1 and depth[j] < 0:
                if j in seen:
                    cycle = " -> ".join(self.links[k].name for k in seen + [j])
                    raise ValueError(f"link parents form a cycle: {cycle}")
                seen.append(j)
                j = self.parent[j]
            base = -1 if j == -1 else depth[j]
            for k in reversed(seen):
                base += 1
                depth[k] = base
        return depth

    def _index_maps(self):
        self.q_start, self.v_start = np.zeros(self.L, int), np.zeros(self.L, int)
        nq = nv = 0
        for i, lk in enumerate(self.links):
            self.q_start[i], self.v_start[i] = nq, nv
            nq, nv = nq + lk.joint.nq, nv + lk.joint.nv
        self.nq, self.nv = nq, nv
        self.dof_link = np.concatenate([np.full(lk.joint.nv, i) for i, lk in enumerate(self.links)]).astype(int)
        self.levels = [np.nonzero(self.depth == d)[0] for d in range(self.depth.max() + 1)]
        self.joint_groups = {}
        for i, lk in enumerate(self.links):
            self.joint_groups.setdefault(lk.joint.type, []).append(i)
        self.joint_groups = {k: np.array(v) for k, v in self.joint_groups.items()}

    def _topology(self):
        L, nv = self.L, self.nv
        sub = np.eye(L)
        for i in range(L):
            j = self.parent[i]
            while j != -1:
                sub[j, i] = 1.0
                j = self.parent[j]
        self.subtree = sub
        strict = sub - np.eye(L)
        dl = self.dof_link
        w = strict[dl][:, dl].copy()  # dof j on a strict ancestor link of dof k's link: weight 1 on (j, k)
        carrier = np.zeros((nv, nv))  # carrier[k, j] = 1: within a joint, moving dof k moves dof j's axis
        for i, lk in enumerate(self.links):
            s, n = self.v_start[i], lk.joint.nv
            blk = np.full((n, n), 0.5)  # exp-map coordinates at 0: symmetric second derivatives
            if lk.joint.type == "universal":
                blk = np.array([[0.5, 1.0], [0.0, 0.5]])
                carrier[s, s + 1] = 1.0
            elif lk.joint.type == "ball":
                carrier[s:s + 3, s:s + 3] = 1.0 - np.eye(3)
            elif lk.joint.type == "free":
                blk[:3, 3:], blk[3:, :3] = 1.0, 0.0  # translation (parent frame) carries the rotation axes
                carrier[s:s + 6, s + 3:s + 6] = 1.0
                carrier[s + 3:s + 6, s + 3:s + 6] -= np.eye(3)
            w[s:s + n, s:s + n] = blk
        self.hess_weight = w
        # Jacobian of the trivialised gradient δ ↦ g(q ⊕ δ) (what Newton on a residual needs): off the 3-DOF
        # rotations it equals the symmetric Hessian; inside them the DOF applied first carries the other, so
        # entry (j, k) takes the k-carries-j term only: J = A⊙P + (B⊙P)ᵀ with P[j, k] the j-carries-k term
        jac_a, jac_b = w.copy(), w.copy()
        for i, lk in enumerate(self.links):
            s0 = self.v_start[i]
            rot = {"ball": range(s0, s0 + 3), "free": range(s0 + 3, s0 + 6)}.get(lk.joint.type)
            if rot is not None:
                r = np.array(list(rot))
                jac_a[np.ix_(r, r)] = np.eye(3) * 0.5
                jac_b[np.ix_(r, r)] = 1.0 - np.eye(3) * 0.5
        self.jac_weight_a, self.jac_weight_b = jac_a, jac_b
        self.vel_carrier = carrier
        lin_q, lin_v, quat_q, quat_v = [], [], [], []
        for i, lk in enumerate(self.links):
            qs, vs, t = self.q_start[i], self.v_start[i], lk.joint.type
            if t in ("hinge", "slide", "universal"):
                lin_q += list(range(qs, qs + lk.joint.nq))
                lin_v += list(range(vs, vs + lk.joint.nv))
            elif t == "ball":
                quat_q.append(list(range(qs, qs + 4)))
                quat_v.append(list(range(vs, vs + 3)))
            else:
                lin_q += list(range(qs, qs + 3))
                lin_v += list(range(vs, vs + 3))
                quat_q.append(list(range(qs + 3, qs + 7)))
                quat_v.append(list(range(vs + 3, vs + 6)))
        self.lin_q, self.lin_v = np.array(lin_q, int), np.array(lin_v, int)
        self.quat_q = np.array(quat_q, int).reshape(-1, 4)
        self.quat_v = np.array(quat_v, int).reshape(-1, 3)
        self.mass = np.array([lk.mass for lk in self.links])
        self.armature = np.concatenate([np.full(lk.joint.nv, float(lk.joint.armature)) for lk in self.links])
        self.first_moment = np.stack([lk.first_moment for lk in self.links])
        self.second_moment = np.stack([lk.second_moment for lk in self.links])
        self.place_R = np.stack([lk.placement[0] for lk in self.links])
        self.place_t = np.stack([lk.placement[1] for lk in self.links])
        self.place_T = np.tile(np.eye(4), (self.L, 1, 1))
        self.place_T[:, :3, :3], self.place_T[:, :3, 3] = self.place_R, self.place_t
        self.jump_rounds = self._jump_rounds()
        self.axis1 = np.array([lk.joint.axis if lk.joint.axis is not None else np.zeros(3) for lk in self.links])
        self.axis2 = np.array([lk.joint.axis2 if lk.joint.axis2 is not None else np.zeros(3) for lk in self.links])
        self._xp_cache = {}

    def _jump_rounds(self):
        """Index pairs (links, their current ancestor) of each pointer-jumping round of forward kinematics."""
        rounds, anc = [], self.parent.copy()
        while np.any(anc >= 0):
            act = np.nonzero(anc >= 0)[0]
            rounds.append((act, anc[act].copy()))
            anc = np.where(anc >= 0, anc[np.maximum(anc, 0)], -1)
        return rounds

    # --- public --------------------------------------------------------------------------------------------
    def q0(self) -> np.ndarray:
        """Neutral configuration (nq,)."""
        return np.concatenate([lk.joint.neutral() for lk in self.links])

    @property
    def has_armature(self) -> bool:
        """Whether any DOF carries a rotor inertia (``Joint.armature``)."""
        return bool(np.any(self.armature > 0))

    @property
    def total_mass(self) -> float:
        return float(self.mass.sum())

    def contact_points(self):
        """(link index (S,), centre in link frame (S, 3), radius (S,)) of every contact sphere."""
        idx, pos, rad = [], [], []
        for i, lk in enumerate(self.links):
            for c, r in lk.contact_spheres:
                idx.append(i)
                pos.append(np.asarray(c, float))
                rad.append(float(r))
        return np.array(idx, int), np.array(pos).reshape(-1, 3), np.array(rad)

    def arrays(self, xp, dtype):
        """Model constants as a :class:`BodyArrays` of ``xp`` arrays in ``dtype`` (cached per module and dtype)."""
        key = (xp.__name__, np.dtype(dtype).str)
        if key not in self._xp_cache:
            self._xp_cache[key] = put_body(self, xp, dtype)
        return self._xp_cache[key]

    def __repr__(self):
        return f"Body({self.name!r}, links={self.L}, nq={self.nq}, nv={self.nv})"
