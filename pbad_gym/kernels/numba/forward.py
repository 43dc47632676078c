"""Forward kinematics of one row: link poses and joint twists (kinematics/forward.py)."""
from __future__ import annotations

import math

from ...model.joints import JOINT_CODES
from .algebra import quat_to_rot
from .jit import inlined_by_llvm, jitable

HINGE, SLIDE, UNIVERSAL, BALL, FREE = (JOINT_CODES[k] for k in ("hinge", "slide", "universal", "ball", "free"))


@jitable
def _hinge_rot(axes, i, ang, R):
    """R[i] = rotation by ang about axes[i] (Rodrigues as kinematics/forward.py's _hinge_rot)."""
    c, s = math.cos(ang), math.sin(ang)
    a0, a1, a2 = axes[i, 0], axes[i, 1], axes[i, 2]
    for x in range(3):
        for y in range(3):
            o = axes[i, x] * axes[i, y]
            R[i, x, y] = c * ((1.0 if x == y else 0.0) - o) + o
    R[i, 0, 1] -= s * a2
    R[i, 0, 2] += s * a1
    R[i, 1, 2] -= s * a0
    R[i, 1, 0] += s * a2
    R[i, 2, 0] -= s * a1
    R[i, 2, 1] += s * a0


@inlined_by_llvm
def _hinge_pose(m, i, ang, R, t):
    """World pose R[i], t[i] of hinge link i at angle ang: :func:`_hinge_rot`, placement and parent composed as
    in :func:`forward_kinematics`, operation for operation, but in locals (each store through the scratch made
    the compiler reload every operand after it, as it cannot prove the arrays apart)."""
    c, s = math.cos(ang), math.sin(ang)
    ax = m.axis1
    a0, a1, a2 = ax[i, 0], ax[i, 1], ax[i, 2]
    o = a0 * a0
    j00 = c * (1.0 - o) + o
    o = a0 * a1
    j01 = (c * (0.0 - o) + o) - s * a2
    o = a0 * a2
    j02 = (c * (0.0 - o) + o) + s * a1
    o = a1 * a0
    j10 = (c * (0.0 - o) + o) + s * a2
    o = a1 * a1
    j11 = c * (1.0 - o) + o
    o = a1 * a2
    j12 = (c * (0.0 - o) + o) - s * a0
    o = a2 * a0
    j20 = (c * (0.0 - o) + o) - s * a1
    o = a2 * a1
    j21 = (c * (0.0 - o) + o) + s * a0
    o = a2 * a2
    j22 = c * (1.0 - o) + o
    PR, pt = m.place_R, m.place_t
    # local pose: placement ∘ joint (the joint does not translate)
    l00 = PR[i, 0, 0] * j00 + PR[i, 0, 1] * j10 + PR[i, 0, 2] * j20
    l01 = PR[i, 0, 0] * j01 + PR[i, 0, 1] * j11 + PR[i, 0, 2] * j21
    l02 = PR[i, 0, 0] * j02 + PR[i, 0, 1] * j12 + PR[i, 0, 2] * j22
    l10 = PR[i, 1, 0] * j00 + PR[i, 1, 1] * j10 + PR[i, 1, 2] * j20
    l11 = PR[i, 1, 0] * j01 + PR[i, 1, 1] * j11 + PR[i, 1, 2] * j21
    l12 = PR[i, 1, 0] * j02 + PR[i, 1, 1] * j12 + PR[i, 1, 2] * j22
    l20 = PR[i, 2, 0] * j00 + PR[i, 2, 1] * j10 + PR[i, 2, 2] * j20
    l21 = PR[i, 2, 0] * j01 + PR[i, 2, 1] * j11 + PR[i, 2, 2] * j21
    l22 = PR[i, 2, 0] * j02 + PR[i, 2, 1] * j12 + PR[i, 2, 2] * j22
    lt0, lt1, lt2 = pt[i, 0], pt[i, 1], pt[i, 2]  # (the generic path's PR·0 + place_t, without the zeros)
    p = m.parent[i]
    if p < 0:
        R[i, 0, 0], R[i, 0, 1], R[i, 0, 2] = l00, l01, l02
        R[i, 1, 0], R[i, 1, 1], R[i, 1, 2] = l10, l11, l12
        R[i, 2, 0], R[i, 2, 1], R[i, 2, 2] = l20, l21, l22
        t[i, 0], t[i, 1], t[i, 2] = lt0, lt1, lt2
        return
    p00, p01, p02 = R[p, 0, 0], R[p, 0, 1], R[p, 0, 2]
    p10, p11, p12 = R[p, 1, 0], R[p, 1, 1], R[p, 1, 2]
    p20, p21, p22 = R[p, 2, 0], R[p, 2, 1], R[p, 2, 2]
    t0 = p00 * lt0 + p01 * lt1 + p02 * lt2 + t[p, 0]
    t1 = p10 * lt0 + p11 * lt1 + p12 * lt2 + t[p, 1]
    t2 = p20 * lt0 + p21 * lt1 + p22 * lt2 + t[p, 2]
    R[i, 0, 0] = p00 * l00 + p01 * l10 + p02 * l20
    R[i, 1, 0] = p10 * l00 + p11 * l10 + p12 * l20
    R[i, 2, 0] = p20 * l00 + p21 * l10 + p22 * l20
    R[i, 0, 1] = p00 * l01 + p01 * l11 + p02 * l21
    R[i, 1, 1] = p10 * l01 + p11 * l11 + p12 * l21
    R[i, 2, 1] = p20 * l01 + p21 * l11 + p22 * l21
    R[i, 0, 2] = p00 * l02 + p01 * l12 + p02 * l22
    R[i, 1, 2] = p10 * l02 + p11 * l12 + p12 * l22
    R[i, 2, 2] = p20 * l02 + p21 * l12 + p22 * l22
    t[i, 0], t[i, 1], t[i, 2] = t0, t1, t2


@inlined_by_llvm
def forward_kinematics(m, q, R, t, w, v, Rj, R2):
    """Link poses R (L, 3, 3), t (L, 3) and motion axes w, v (nv, 3) of q; Rj, R2 (L, 3, 3) scratch (R2 keeps
    each universal joint's second rotation)."""
    for n in range(m.order.shape[0]):
        i = m.order[n]
        jt, qs = m.jtype[i], m.q_start[i]
        tj0 = tj1 = tj2 = 0.0
        if jt == HINGE:  # the most common joint: its pose in locals, stored once (:func:`_hinge_pose`)
            _hinge_pose(m, i, q[qs], R, t)
            continue
        if jt == UNIVERSAL:
            _hinge_rot(m.axis1, i, q[qs], Rj)
            _hinge_rot(m.axis2, i, q[qs + 1], R2)
            for a in range(3):
                r0 = Rj[i, a, 0] * R2[i, 0, 0] + Rj[i, a, 1] * R2[i, 1, 0] + Rj[i, a, 2] * R2[i, 2, 0]
                r1 = Rj[i, a, 0] * R2[i, 0, 1] + Rj[i, a, 1] * R2[i, 1, 1] + Rj[i, a, 2] * R2[i, 2, 1]
                r2 = Rj[i, a, 0] * R2[i, 0, 2] + Rj[i, a, 1] * R2[i, 1, 2] + Rj[i, a, 2] * R2[i, 2, 2]
                Rj[i, a, 0], Rj[i, a, 1], Rj[i, a, 2] = r0, r1, r2
        elif jt == SLIDE:
            for a in range(3):
                for b in range(3):
                    Rj[i, a, b] = 1.0 if a == b else 0.0
            tj0, tj1, tj2 = m.axis1[i, 0] * q[qs], m.axis1[i, 1] * q[qs], m.axis1[i, 2] * q[qs]
        elif jt == BALL:
            quat_to_rot(q[qs], q[qs + 1], q[qs + 2], q[qs + 3], Rj, i)
        else:
            tj0, tj1, tj2 = q[qs], q[qs + 1], q[qs + 2]
            quat_to_rot(q[qs + 3], q[qs + 4], q[qs + 5], q[qs + 6], Rj, i)
        # local pose: placement ∘ joint
        PR = m.place_R
        p = m.parent[i]
        for a in range(3):
            t[i, a] = PR[i, a, 0] * tj0 + PR[i, a, 1] * tj1 + PR[i, a, 2] * tj2 + m.place_t[i, a]
            for b in range(3):
                R[i, a, b] = PR[i, a, 0] * Rj[i, 0, b] + PR[i, a, 1] * Rj[i, 1, b] + PR[i, a, 2] * Rj[i, 2, b]
        if p >= 0:  # world pose: parent ∘ local
            l0, l1, l2 = t[i, 0], t[i, 1], t[i, 2]
            for a in range(3):
                t[i, a] = R[p, a, 0] * l0 + R[p, a, 1] * l1 + R[p, a, 2] * l2 + t[p, a]
            for b in range(3):
                c0, c1, c2 = R[i, 0, b], R[i, 1, b], R[i, 2, b]
                for a in range(3):
                    R[i, a, b] = R[p, a, 0] * c0 + R[p, a, 1] * c1 + R[p, a, 2] * c2
    # motion axes
    ax1, ax2 = m.axis1, m.axis2
    for i in range(m.jtype.shape[0]):
        jt, vs = m.jtype[i], m.v_start[i]
        if jt == HINGE or jt == SLIDE:
            for a in range(3):
                v[vs, a] = R[i, a, 0] * ax1[i, 0] + R[i, a, 1] * ax1[i, 1] + R[i, a, 2] * ax1[i, 2]
            if jt == HINGE:
                for a in range(3):
                    w[vs, a] = v[vs, a]
                _cross_tw(t, i, w, v, vs)
            else:
                w[vs, 0] = w[vs, 1] = w[vs, 2] = 0.0
        elif jt == UNIVERSAL:
            # w1 = R R2ᵀ a1, w2 = R a2
            u0 = R2[i, 0, 0] * ax1[i, 0] + R2[i, 1, 0] * ax1[i, 1] + R2[i, 2, 0] * ax1[i, 2]
            u1 = R2[i, 0, 1] * ax1[i, 0] + R2[i, 1, 1] * ax1[i, 1] + R2[i, 2, 1] * ax1[i, 2]
            u2 = R2[i, 0, 2] * ax1[i, 0] + R2[i, 1, 2] * ax1[i, 1] + R2[i, 2, 2] * ax1[i, 2]
            for a in range(3):
                w[vs, a] = R[i, a, 0] * u0 + R[i, a, 1] * u1 + R[i, a, 2] * u2
                w[vs + 1, a] = R[i, a, 0] * ax2[i, 0] + R[i, a, 1] * ax2[i, 1] + R[i, a, 2] * ax2[i, 2]
            _cross_tw(t, i, w, v, vs)
            _cross_tw(t, i, w, v, vs + 1)
        else:
            r0 = vs + 3 if jt == FREE else vs
            for k in range(3):
                for a in range(3):
                    w[r0 + k, a] = R[i, a, k]
                _cross_tw(t, i, w, v, r0 + k)
            if jt == FREE:  # translation in the parent frame: columns of R_parent · place_R
                p = m.parent[i]
                PR = m.place_R
                for k in range(3):
                    w[vs + k, 0] = w[vs + k, 1] = w[vs + k, 2] = 0.0
                    for a in range(3):
                        if p >= 0:
                            v[vs + k, a] = (R[p, a, 0] * PR[i, 0, k] + R[p, a, 1] * PR[i, 1, k]
                                            + R[p, a, 2] * PR[i, 2, k])
                        else:
                            v[vs + k, a] = PR[i, a, k]


@jitable
def _cross_tw(t, i, w, v, j):
    """v[j] = t[i] × w[j]."""
    o0 = t[i, 1] * w[j, 2] - t[i, 2] * w[j, 1]
    o1 = t[i, 2] * w[j, 0] - t[i, 0] * w[j, 2]
    o2 = t[i, 0] * w[j, 1] - t[i, 1] * w[j, 0]
    v[j, 0], v[j, 1], v[j, 2] = o0, o1, o2


