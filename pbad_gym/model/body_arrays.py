"""A body's constants as one typed NamedTuple of arrays (the engine's and the compiled kernels' view of a model).

Built once per (array module, dtype) by :func:`put_body`; fields are attributes, so a misspelt name is an
AttributeError rather than a silent KeyError, and a NamedTuple of arrays is what numba kernels accept.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class BodyArrays(NamedTuple):
    """Model constants of a body with L links, nv DOFs and S contact spheres (float fields in the engine dtype).

    Mass moments (link frame): mass (L,) [kg], c (L, 3) first moment [kg m], S (L, 3, 3) second moment [kg m²];
    armature (nv,) [kg m²]. Placements of joint frames in parent frames: place_R (L, 3, 3), place_t (L, 3),
    place_T (L, 4, 4). Joint axes: axis1, axis2 (L, 3) with their outer products and skew matrices (L, 3, 3);
    has_parent (L,) bool. Topology: subtree (L, L) (1 where column link is in row link's subtree), hess_weight,
    jac_weight_a, jac_weight_b (assembly weights of generalised Hessians/Jacobians), dof_anc (nv, nv), link_dofs
    (L, nv), vel_carrier. Contact spheres: contact_link (S,) int, contact_p0 (S, 3) [m] centre in the link
    frame, contact_r (S,) [m], contact_inc (L, S) link-sphere incidence. eye3: the 3×3 identity.
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


def _skew(a):
    """Skew matrices (..., 3, 3) of vectors (..., 3)."""
    out = np.zeros(a.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2], out[..., 1, 2] = -a[..., 2], a[..., 1], -a[..., 0]
    return out - np.swapaxes(out, -1, -2)


def host_constants(body) -> BodyArrays:
    """The constants of ``body`` as float64 / int / bool NumPy arrays."""
    link, p0, rad = body.contact_points()
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
        contact_link=link, contact_p0=p0, contact_r=rad, contact_inc=inc)


def put_body(body, xp=np, dtype=np.float64) -> BodyArrays:
    """``body``'s constants as ``xp`` arrays: floats in ``dtype``, integer and bool arrays kept as they are."""
    dtype = np.dtype(dtype)
    return BodyArrays(*(xp.asarray(v) if np.asarray(v).dtype.kind in "bi" else xp.asarray(v, dtype=dtype)
                        for v in host_constants(body)))
