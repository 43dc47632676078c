"""Batched forward kinematics: link poses, joint frames, DOF motion axes and point Jacobians (docs/physics.md §1)."""
from __future__ import annotations

from typing import NamedTuple

from ..arrays import xp_of
from .algebra import cross, matvec, quat_to_rot

class Kinematics(NamedTuple):
    """Link poses and DOF motion axes at one batch of configurations.

    R (B, L, 3, 3), t (B, L, 3): link rotations and origins. w, v (B, nv, 3): motion axes (angular part and linear
    part at the world origin).
    """

    R: object
    t: object
    w: object
    v: object


def _joint_local(body, q, xp, consts):
    """Per-link joint motion as 4x4 transforms (B, L, 4, 4), and the universal joints' first rotations."""
    B = q.shape[0]
    R = xp.empty((B, body.L, 3, 3), dtype=q.dtype)
    R[:] = consts.eye3
    t = xp.zeros((B, body.L, 3), dtype=q.dtype)
    extra = {}
    for jtype, links in body.joint_groups.items():
        qs = body.q_start[links]
        if jtype in ("hinge", "universal"):
            R[:, links] = _hinge_rot(consts.axis1_outer[links], consts.axis1_skew[links], q[:, qs], consts)
            if jtype == "universal":
                R2 = _hinge_rot(consts.axis2_outer[links], consts.axis2_skew[links], q[:, qs + 1], consts)
                extra["universal_R2"] = R2
                R[:, links] = R[:, links] @ R2
        elif jtype == "slide":
            t[:, links] = consts.axis1[links] * q[:, qs, None]
        elif jtype == "ball":
            R[:, links] = quat_to_rot(q[:, qs[:, None] + xp.arange(4)])
        elif jtype == "free":
            t[:, links] = q[:, qs[:, None] + xp.arange(3)]
            R[:, links] = quat_to_rot(q[:, qs[:, None] + 3 + xp.arange(4)])
    T = xp.zeros((B, body.L, 4, 4), dtype=q.dtype)
    T[..., :3, :3], T[..., :3, 3], T[..., 3, 3] = R, t, 1.0
    return T, extra


def _hinge_rot(outer, skew_axis, angle, consts):
    """Rodrigues for constant axes (given as aaᵀ and [a]×, (n, 3, 3)) and angles (B, n): c(1 − aaᵀ) + s[a]× + aaᵀ."""
    xp = xp_of(angle)
    c, s = xp.cos(angle)[..., None, None], xp.sin(angle)[..., None, None]
    return c * (consts.eye3 - outer) + s * skew_axis + outer


def forward_kinematics(body, q):
    """Link poses and motion axes for q (B, nq); returns :class:`Kinematics`."""
    xp = xp_of(q)
    consts = body.arrays(xp, q.dtype)
    Tj, extra = _joint_local(body, q, xp, consts)
    Tplace = consts.place_T
    Tloc = Tplace @ Tj
    T = _compose_tree(body, Tloc, xp)
    R, t = T[..., :3, :3], T[..., :3, 3]
    w, v = _motion_axes(body, q, R, t, extra, xp, consts)
    return Kinematics(R, t, w, v)


def _compose_tree(body, Tloc, xp):
    """World transforms (B, L, 4, 4) from parent-relative ones.

    One pass down the tree, level by level, does the least arithmetic. Deep trees (long chains) would pay one call
    per level, so they use pointer jumping instead: every link is composed with its current ancestor and the
    reach doubles each round (ceil(log2 depth) batched calls). The choice depends on the body only, never on the
    batch size, so a trajectory gets the same bits whether it is simulated alone or in a batch.
    """
    if body.depth.max() >= 24:
        T = Tloc
        for act, anc in body.jump_rounds:
            T = T.copy()
            T[:, act] = T[:, anc] @ T[:, act]
        return T
    T = Tloc.copy()
    for links in body.levels[1:]:
        if len(links) == 1:
            i = int(links[0])
            T[:, i] = T[:, body.parent[i]] @ Tloc[:, i]
        else:
            T[:, links] = T[:, body.parent[links]] @ Tloc[:, links]
    return T


def _motion_axes(body, q, R, t, extra, xp, consts):
    """DOF motion axes from the link poses alone: every joint but the free one's translation has its origin at the
    link origin t_i, and its axes are fixed in the link frame after the joint (a hinge axis is unmoved by its own
    rotation; a universal's first axis is seen through the second rotation R2)."""
    B = q.shape[0]
    w = xp.zeros((B, body.nv, 3), dtype=q.dtype)
    v = xp.zeros((B, body.nv, 3), dtype=q.dtype)
    for jtype, links in body.joint_groups.items():
        vs, Rl, tl = body.v_start[links], R[:, links], t[:, links]
        if jtype in ("hinge", "slide"):
            ax = matvec(Rl, consts.axis1[links])
            if jtype == "hinge":
                w[:, vs], v[:, vs] = ax, cross(tl, ax)
            else:
                v[:, vs] = ax
        elif jtype == "universal":
            w1 = matvec(Rl @ xp.swapaxes(extra["universal_R2"], -1, -2), consts.axis1[links])
            w2 = matvec(Rl, consts.axis2[links])
            w[:, vs], w[:, vs + 1] = w1, w2
            v[:, vs], v[:, vs + 1] = cross(tl, w1), cross(tl, w2)
        elif jtype in ("ball", "free"):
            rot = vs[:, None] + (3 if jtype == "free" else 0) + xp.arange(3)
            cols = xp.swapaxes(Rl, -1, -2)  # (B, n, 3 axes, 3): body axes in world
            w[:, rot] = cols
            v[:, rot] = cross(tl[:, :, None, :], cols)
            if jtype == "free":  # translation in the parent frame: the joint frame's axes
                par = body.parent[links]
                Rpar = xp.where(consts.has_parent[links][:, None, None], R[:, xp.maximum(xp.asarray(par), 0)],
                                consts.eye3)
                v[:, vs[:, None] + xp.arange(3)] = xp.swapaxes(Rpar @ consts.place_R[links], -1, -2)
    return w, v


def point_jacobian(body, kin, link, p0):
    """Jacobian of body points: link (P,) indices, p0 (P, 3) or (B, P, 3) link-frame offsets -> world positions
    (B, P, 3) and J (B, P, 3, nv) with J[..., j] = ω_j × P + v_j for DOFs j moving the link (0 otherwise)."""
    xp = xp_of(kin.R)
    p0 = xp.asarray(p0, dtype=kin.R.dtype)
    P = kin.t[:, link] + matvec(kin.R[:, link], p0)
    moves = xp.asarray(body.subtree[body.dof_link][:, link].T, dtype=kin.R.dtype)  # (P, nv)
    J = cross(kin.w[:, None, :, :], P[:, :, None, :]) + kin.v[:, None, :, :]  # (B, P, nv, 3)
    J = J * moves[None, :, :, None]
    return P, xp.swapaxes(J, -1, -2)
