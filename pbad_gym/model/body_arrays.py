"""A body's constants as one typed NamedTuple of arrays (the engine's and the compiled kernels' view of a model).

Built once per (array module, dtype) by :func:`put_body`; fields are attributes, so a misspelt name is an
AttributeError rather than a silent KeyError, and a NamedTuple of arrays is what numba kernels accept.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .joints import JOINT_CODES


class BodyArrays(NamedTuple):
    """Model constants of a body with L links, nv DOFs and S contact spheres (float fields in the engine dtype): the
    one model type that every backend reads (the NumPy engine by name; the compiled kernels field by field).

    Mass moments (link frame): mass (L,) [kg], c (L, 3) first moment [kg m], S (L, 3, 3) second moment [kg m²];
    armature (nv,) [kg m²]. Placements of joint frames in parent frames: place_R (L, 3, 3), place_t (L, 3),
    place_T (L, 4, 4). Joint axes: axis1, axis2 (L, 3) with their outer products and skew matrices (L, 3, 3);
    has_parent (L,) bool. Topology: subtree (L, L) (1 where column link is in row link's subtree), hess_weight,
    jac_weight_a, jac_weight_b (assembly weights of generalised Hessians/Jacobians), dof_anc (nv, nv), link_dofs
    (L, nv), vel_carrier. Contact spheres: contact_link (S,) int, contact_p0 (S, 3) [m] centre in the link
    frame, contact_r (S,) [m], contact_inc (L, S) link-sphere incidence. eye3: the 3×3 identity.
    Scalar-style topology (the compiled kernels'), int64: jtype (L,) (model.joints.JOINT_CODES), parent (L,)
    (-1: world), order (L,) (parents before children), q_start, v_start (L,), dof_link (nv,), lim_on (nv,) (1 on
    DOFs with a range), lim_q (nv,) (their q index), quat_q, quat_v (n_quat,) (first q / v index of each quaternion
    joint's rotation), lin_q, lin_v (the linear coordinates' q / v indices); lim_lo, lim_hi (nv,) [rad or m]: the
    ranges (0 where there is none).
    """

    mass: object
    armature: object
    c: object
    S: object
    place_R: object
    place_t: object
    place_T: object
    eye3: object
    axis1: object
    axis2: object
    axis1_outer: object
    axis2_outer: object
    axis1_skew: object
    axis2_skew: object
    has_parent: object
    subtree: object
    hess_weight: object
    jac_weight_a: object
    jac_weight_b: object
    dof_anc: object
    link_dofs: object
    vel_carrier: object
    contact_link: object
    contact_p0: object
    contact_r: object
    contact_inc: object
    jtype: object
    parent: object
    order: object
    q_start: object
    v_start: object
    dof_link: object
    lim_on: object
    lim_q: object
    quat_q: object
    quat_v: object
    lin_q: object
    lin_v: object
    lim_lo: object
    lim_hi: object


def _skew(a):
    """Skew matrices (..., 3, 3) of vectors (..., 3)."""
    out = np.zeros(a.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2], out[..., 1, 2] = -a[..., 2], a[..., 1], -a[..., 0]
    return out - np.swapaxes(out, -1, -2)


def _limits(body):
    """(lim_on, lim_q (nv,) int64, lim_lo, lim_hi (nv,)) of the DOFs with a range."""
    nv = body.nv
    lim_on, lim_q, lim_lo, lim_hi = np.zeros(nv, np.int64), np.zeros(nv, np.int64), np.zeros(nv), np.zeros(nv)
    q_of_v = {int(v): int(q) for v, q in zip(body.lin_v, body.lin_q)}
    for i, lk in enumerate(body.links):
        if lk.joint.range is not None:
            for k in range(lk.joint.nv):
                j = body.v_start[i] + k
                lim_on[j], lim_q[j] = 1, q_of_v[j]
                lim_lo[j], lim_hi[j] = lk.joint.range[0][k], lk.joint.range[1][k]
    return lim_on, lim_q, lim_lo, lim_hi


def host_constants(body) -> BodyArrays:
    """The constants of ``body`` as float64 / int64 / bool NumPy arrays (C-contiguous where the kernels read them)."""
    link, p0, rad = body.contact_points()
    i64 = lambda a: np.ascontiguousarray(np.asarray(a, dtype=np.int64))  # noqa: E731
    lim_on, lim_q, lim_lo, lim_hi = _limits(body)
    first = lambda a: a[:, 0] if len(a) else np.zeros(0)  # noqa: E731
    inc = np.zeros((body.L, len(link)))
    inc[link, np.arange(len(link))] = 1.0
    outer = lambda a: a[:, :, None] * a[:, None, :]  # noqa: E731
    return BodyArrays(
        mass=body.mass, armature=body.armature, c=body.first_moment, S=body.second_moment,
        place_R=body.place_R, place_t=body.place_t, place_T=body.place_T, eye3=np.eye(3),
        axis1=body.axis1, axis2=body.axis2, axis1_outer=outer(body.axis1), axis2_outer=outer(body.axis2),
        axis1_skew=_skew(body.axis1), axis2_skew=_skew(body.axis2), has_parent=body.parent >= 0,
        subtree=body.subtree, hess_weight=body.hess_weight, jac_weight_a=body.jac_weight_a,
        jac_weight_b=body.jac_weight_b, dof_anc=body.subtree[body.dof_link][:, body.dof_link],
        link_dofs=body.subtree[body.dof_link].T, vel_carrier=body.vel_carrier,
        contact_link=i64(link), contact_p0=np.ascontiguousarray(p0.reshape(-1, 3)),
        contact_r=np.ascontiguousarray(rad.reshape(-1)), contact_inc=inc,
        jtype=i64([JOINT_CODES[lk.joint.type] for lk in body.links]), parent=i64(body.parent),
        order=i64(np.argsort(body.depth, kind="stable")),  # parents sit one level above their children
        q_start=i64(body.q_start), v_start=i64(body.v_start), dof_link=i64(body.dof_link), lim_on=lim_on,
        lim_q=lim_q, quat_q=i64(first(body.quat_q)), quat_v=i64(first(body.quat_v)), lin_q=i64(body.lin_q),
        lin_v=i64(body.lin_v), lim_lo=lim_lo, lim_hi=lim_hi)


def put_body(body, xp=np, dtype=np.float64) -> BodyArrays:
    """``body``'s constants as C-contiguous ``xp`` arrays (the compiled kernels type each field's layout into
    their signature): floats in ``dtype``, integer and bool arrays kept as they are."""
    dtype = np.dtype(dtype)
    return BodyArrays(*(xp.ascontiguousarray(v) if np.asarray(v).dtype.kind in "bi"
                        else xp.ascontiguousarray(v, dtype=dtype) for v in host_constants(body)))
