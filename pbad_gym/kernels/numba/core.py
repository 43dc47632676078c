"""The compiled order-2 PBAD step: scalar-style numba functions for ONE trajectory, and the batch loop.

Every function mirrors one NumPy reference (named in its docstring) term by term, so that the two agree to
round-off: forward kinematics (kinematics/forward.py), the link terms inertia, gravity, drag and penalty contact
(energies/), the joint terms actuation, limits, damping and armature, the wrench pass (kinematics/chain_rule.py),
the exact / Gauss-Newton Hessian (integrators/pbad.py step_hessian) and the Levenberg-Marquardt loop
(optim/lm.py: same accept test, damping schedule, round-off band and convergence measure max_j |g_j|/D_j).
The damped system is solved by a hand-written Cholesky (LU with partial pivoting when the exact Hessian makes it
indefinite, as LAPACK's solve would) on scratch allocated once per chunk of trajectories.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .model import (F_ARMATURE, F_CAP_APPLIED, F_CONE_PASSES, F_CONTACT, F_DAMPING, F_DRAG, F_EXACT, F_FRICTION,
                    F_GRAVITY, F_LIMITS, F_MAX_ITER, N_TERMS, S_CONE_TOL, S_CONTACT_D, S_CONTACT_DN, S_CONTACT_K,
                    S_DT, S_HEIGHT, S_LIMIT_D,
                    S_LIMIT_K, S_MACH_EPS, S_MU, S_MU0, S_SLIP_EPS, S_TOL, T_ACTUATION, T_COM, T_CONTACT, T_KINETIC,
                    T_LIMITS, KernelForces, KernelModel)
from .scratch import alloc_scratch

_EPS_BAND = 64.0  # optim/lm.py's round-off band in units of machine epsilon · |E|
# optim/lm.py's damping schedule (copied, not imported: numba's cache is keyed on this file alone, so a constant
# read from another module would not recompile the kernel when it changes; a test checks the copies agree)
_MU_SHRINK, _MU_GROW, _MU_AFTER_REJECT, _MU_MAX, _STEP_SHRINK = 3.0, 10.0, 1e-6, 1e12, 0.5
HINGE, SLIDE, UNIVERSAL, BALL, FREE = 0, 1, 2, 3, 4

# helpers compile into the one entry point (one cache entry, one fast load; no per-helper CPython wrapper)
_jit = register_jitable


def _row_loop_options():
    """njit options of the loops that run rows on preallocated scratch: no reference counting (numba's private
    ``_nrt`` target option — nothing there allocates, and the counts' atomic traffic on every helper call's array
    arguments cost two thirds of an energy-and-gradient evaluation; where a numba lacks the option the loops
    compile with counting: the same numbers, about half the speed) and IEEE division (``error_model="numpy"``:
    no ZeroDivisionError branches; a division by zero gives inf or NaN, which the LM's finite test and the
    divergence guard catch, as in NumPy's reference)."""
    from numba.core.cpu import CPUTargetOptions

    options = dict(cache=True, nogil=True, error_model="numpy")
    if hasattr(CPUTargetOptions, "_nrt"):
        options["_nrt"] = False
    return options


ROW_LOOP_OPTIONS = _row_loop_options()


# --- quaternions (kinematics/algebra.py) ------------------------------------------------------------------------
@_jit
def quat_mul(aw, ax, ay, az, bw, bx, by, bz):
    return (aw * bw - (ax * bx + ay * by + az * bz),
            aw * bx + bw * ax + (ay * bz - az * by),
            aw * by + bw * ay + (az * bx - ax * bz),
            aw * bz + bw * az + (ax * by - ay * bx))


@_jit
def quat_exp(px, py, pz):
    th = math.sqrt(px * px + py * py + pz * pz)
    half = 0.5 * th
    if th < 1e-8:
        k = 0.5 - th * th / 48.0
    else:
        k = math.sin(half) / th
    return math.cos(half), k * px, k * py, k * pz


@_jit
def quat_log(w, x, y, z):
    if w < 0:
        w, x, y, z = -w, -x, -y, -z
    vn = math.sqrt(x * x + y * y + z * z)
    if vn < 1e-8:
        k = 2.0 / max(w, 1e-300)
    else:
        k = 2.0 * math.atan2(vn, w) / vn
    return k * x, k * y, k * z


@_jit
def quat_to_rot(w, x, y, z, R, ri):
    n = math.sqrt(w * w + x * x + y * y + z * z)
    w, x, y, z = w / n, x / n, y / n, z / n
    R[ri, 0, 0] = 1 - 2 * (y * y + z * z)
    R[ri, 0, 1] = 2 * (x * y - w * z)
    R[ri, 0, 2] = 2 * (x * z + w * y)
    R[ri, 1, 0] = 2 * (x * y + w * z)
    R[ri, 1, 1] = 1 - 2 * (x * x + z * z)
    R[ri, 1, 2] = 2 * (y * z - w * x)
    R[ri, 2, 0] = 2 * (x * z - w * y)
    R[ri, 2, 1] = 2 * (y * z + w * x)
    R[ri, 2, 2] = 1 - 2 * (x * x + y * y)


# --- configuration space (kinematics/configuration.py) --------------------------------------------------------
@_jit
def integrate(m, q, dq, out):
    """out = q ⊕ dq (out may be q)."""
    for i in range(m.lin_q.shape[0]):
        out[m.lin_q[i]] = q[m.lin_q[i]] + dq[m.lin_v[i]]
    for i in range(m.quat_q.shape[0]):
        a, b = m.quat_q[i], m.quat_v[i]
        ew, ex, ey, ez = quat_exp(dq[b], dq[b + 1], dq[b + 2])
        w, x, y, z = quat_mul(q[a], q[a + 1], q[a + 2], q[a + 3], ew, ex, ey, ez)
        n = math.sqrt(w * w + x * x + y * y + z * z)
        out[a], out[a + 1], out[a + 2], out[a + 3] = w / n, x / n, y / n, z / n


@_jit
def difference(m, q0, q1, out):
    """out = q1 ⊖ q0."""
    for i in range(m.lin_q.shape[0]):
        out[m.lin_v[i]] = q1[m.lin_q[i]] - q0[m.lin_q[i]]
    for i in range(m.quat_q.shape[0]):
        a, b = m.quat_q[i], m.quat_v[i]
        w, x, y, z = quat_mul(q0[a], -q0[a + 1], -q0[a + 2], -q0[a + 3], q1[a], q1[a + 1], q1[a + 2], q1[a + 3])
        out[b], out[b + 1], out[b + 2] = quat_log(w, x, y, z)


# --- forward kinematics (kinematics/forward.py) -----------------------------------------------------------------
@_jit
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


@_jit
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


@_jit
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


@_jit
def _cross_tw(t, i, w, v, j):
    """v[j] = t[i] × w[j]."""
    o0 = t[i, 1] * w[j, 2] - t[i, 2] * w[j, 1]
    o1 = t[i, 2] * w[j, 0] - t[i, 0] * w[j, 2]
    o2 = t[i, 0] * w[j, 1] - t[i, 1] * w[j, 0]
    v[j, 0], v[j, 1], v[j, 2] = o0, o1, o2


# --- link terms (energies/inertia.py, drag.py, gravity.py, contact.py) ----------------------------------------
@_jit
def _drag_link(mass, c, S, i, R, t, A, b, W, scale, G, f, s33):
    """The drag term scale · ∫ρ‖R p0 + t − (A p0 + b)‖²_W of link i (every array indexed by link; mass, c, S:
    the links' mass moments; W (L, 3, 3) the drag weights): adds ∂/∂R, ∂/∂t to G[i], f[i] and returns the
    value (s33 (≥3, 3, 3) scratch: D, ½∂/∂R, u | ½∂/∂t). The inertia term (W = 1) is :func:`_inertia_gravity`.

    Helpers called per link or per sphere take the arrays they read, not the KernelModel: a call that LLVM does
    not inline passes every field of a NamedTuple argument (26 arrays), which cost more than the arithmetic."""
    mi = mass[i]
    for a in range(3):
        s33[2, 0, a] = t[i, a] - b[i, a]
        for k in range(3):
            s33[0, a, k] = R[i, a, k] - A[i, a, k]
    for a in range(3):
        for k in range(3):
            s33[1, a, k] = (s33[0, a, 0] * S[i, 0, k] + s33[0, a, 1] * S[i, 1, k] + s33[0, a, 2] * S[i, 2, k]
                            + s33[2, 0, a] * c[i, k])
        s33[2, 1, a] = s33[0, a, 0] * c[i, 0] + s33[0, a, 1] * c[i, 1] + s33[0, a, 2] * c[i, 2] + mi * s33[2, 0, a]
    # W·(½∂/∂R), W·(½∂/∂t): columns transformed in place through locals
    for k in range(3):
        g0, g1, g2 = s33[1, 0, k], s33[1, 1, k], s33[1, 2, k]
        for a in range(3):
            s33[1, a, k] = W[i, a, 0] * g0 + W[i, a, 1] * g1 + W[i, a, 2] * g2
    g0, g1, g2 = s33[2, 1, 0], s33[2, 1, 1], s33[2, 1, 2]
    for a in range(3):
        s33[2, 1, a] = W[i, a, 0] * g0 + W[i, a, 1] * g1 + W[i, a, 2] * g2
    sr = 0.0
    for a in range(3):
        for k in range(3):
            sr += s33[1, a, k] * s33[0, a, k]
    st = 0.0
    for a in range(3):
        st += s33[2, 0, a] * s33[2, 1, a]
    val = scale * (sr + st)
    for a in range(3):
        f[i, a] += 2.0 * scale * s33[2, 1, a]
        for k in range(3):
            G[i, a, k] += 2.0 * scale * s33[1, a, k]
    return val


@_jit
def _inertia_gravity(mass, c, S, R, t, A, b, scale, grav, g, G, f):
    """The inertia term of every link (:func:`_drag_link`'s locals path, W = 1) and, with ``grav``, gravity's:
    returns (Σ_i inertia value, Σ_i (R c + m t)·g) and WRITES their pose gradients into G, f (the first terms of
    :func:`link_terms`: no zeroing pass, no second pass over G; the same sums in the same order as inertia then
    gravity each added to zeros)."""
    val_in = 0.0
    vg = 0.0
    two = 2.0 * scale
    for i in range(mass.shape[0]):
        mi = mass[i]
        sr = 0.0
        st = 0.0
        sg = 0.0
        for a in range(3):
            e = t[i, a] - b[i, a]
            d0, d1, d2 = R[i, a, 0] - A[i, a, 0], R[i, a, 1] - A[i, a, 1], R[i, a, 2] - A[i, a, 2]
            h0 = d0 * S[i, 0, 0] + d1 * S[i, 1, 0] + d2 * S[i, 2, 0] + e * c[i, 0]
            h1 = d0 * S[i, 0, 1] + d1 * S[i, 1, 1] + d2 * S[i, 2, 1] + e * c[i, 1]
            h2 = d0 * S[i, 0, 2] + d1 * S[i, 1, 2] + d2 * S[i, 2, 2] + e * c[i, 2]
            u = d0 * c[i, 0] + d1 * c[i, 1] + d2 * c[i, 2] + mi * e
            sr += h0 * d0
            sr += h1 * d1
            sr += h2 * d2
            st += e * u
            if grav:
                ga = g[a]
                cw = R[i, a, 0] * c[i, 0] + R[i, a, 1] * c[i, 1] + R[i, a, 2] * c[i, 2] + mi * t[i, a]
                sg += cw * ga
                f[i, a] = two * u + -mi * ga
                G[i, a, 0] = two * h0 + -ga * c[i, 0]
                G[i, a, 1] = two * h1 + -ga * c[i, 1]
                G[i, a, 2] = two * h2 + -ga * c[i, 2]
            else:
                f[i, a] = two * u
                G[i, a, 0] = two * h0
                G[i, a, 1] = two * h1
                G[i, a, 2] = two * h2
        val_in += scale * (sr + st)
        vg += sg
    return val_in, vg


@_jit
def _normal_depth(sph_r, sc, s, pz, cP):
    """(d_eff [m], k_eff [N/m]) of sphere s with centre height pz (energies/contact.py _normal_depth): the penalty's
    depth and stiffness, or with normal damping the clamped Kelvin-Voigt form (k + c/Δt)/2·max(0, d − s0)² (cP holds
    every sphere's centre at q_k)."""
    k_n, h = sc[S_CONTACT_K], sc[S_HEIGHT]
    d = max(0.0, sph_r[s] - (pz - h))
    k_d = sc[S_CONTACT_DN] / sc[S_DT]
    if k_d > 0:
        d_k = max(0.0, sph_r[s] - (cP[s, 2] - h))
        d = max(0.0, d - d_k * k_d / (k_n + k_d))
        k_n = k_n + k_d
    return d, k_n


@_jit
def sphere_point_terms(sph_link, p0, sph_r, fr, sc, s, R, t, cP, cact, cnorm, canc, gP, HP, want_h, P):
    """Ground-contact point energy of sphere s (links sph_link, centres p0, radii sph_r; friction code fr,
    KernelForces scalars sc) at poses (R, t): value, ∂/∂P into gP (3,), ∂²/∂P² into HP (3, 3) when ``want_h``;
    its centre into P (3,). Returns the value."""
    l = sph_link[s]
    for a in range(3):
        P[a] = t[l, a] + (R[l, a, 0] * p0[s, 0] + R[l, a, 1] * p0[s, 1] + R[l, a, 2] * p0[s, 2])
    d, k_n = _normal_depth(sph_r, sc, s, P[2], cP)
    val = 0.5 * k_n * d * d
    gP[0] = gP[1] = 0.0
    gP[2] = -k_n * d
    if want_h:
        for a in range(3):
            for b in range(3):
                HP[a, b] = 0.0
        HP[2, 2] = k_n if d > 0 else 0.0
    if fr == 0:  # viscous
        kk = sc[S_CONTACT_D] / sc[S_DT] * (1.0 if cact[s] else 0.0)
        x0, x1 = P[0] - cP[s, 0], P[1] - cP[s, 1]
        val += 0.5 * (kk * (x0 * x0 + x1 * x1))
        gP[0] += kk * x0
        gP[1] += kk * x1
        if want_h:
            HP[0, 0] += kk
            HP[1, 1] += kk
    elif fr == 1:  # smoothed Coulomb
        eps = sc[S_SLIP_EPS]
        kk = sc[S_MU] * cnorm[s] * (1.0 if cact[s] else 0.0)
        x0, x1 = P[0] - canc[s, 0], P[1] - canc[s, 1]
        sn = math.sqrt(x0 * x0 + x1 * x1)
        phi = 0.5 * sn * sn / eps if sn < eps else sn - 0.5 * eps
        val += kk * phi
        inv = 1.0 / max(sn, eps)
        gP[0] += kk * inv * x0
        gP[1] += kk * inv * x1
        if want_h:
            c = kk * inv
            xh0, xh1 = x0 * inv, x1 * inv
            sl = 1.0 if sn >= eps else 0.0
            HP[0, 0] += c * (1.0 - sl * xh0 * xh0)
            HP[0, 1] += c * (0.0 - sl * xh0 * xh1)
            HP[1, 0] += c * (0.0 - sl * xh1 * xh0)
            HP[1, 1] += c * (1.0 - sl * xh1 * xh1)
    return val


@_jit
def applied_normal(sph_link, p0, sph_r, sc, s, R, t, cP):
    """Normal force [N] the ground applies on sphere s at poses (R, t) in a step from centres cP (energies/contact.py
    applied_normal): (D1 + Dn/Δt)·max(0, d − s0), the spring force D1·d without normal damping."""
    l = sph_link[s]
    pz = t[l, 2] + (R[l, 2, 0] * p0[s, 0] + R[l, 2, 1] * p0[s, 1] + R[l, 2, 2] * p0[s, 2])
    d, k_n = _normal_depth(sph_r, sc, s, pz, cP)
    return k_n * d


@_jit
def cone_refresh(m, sc, R, t, cP, cact, cnorm):
    """The fixed point's test (integrators/pbad.py solve_step_in_cone): when an active sphere's normal force at poses
    (R, t) differs from its friction cap cnorm by more than S_CONE_TOL of the larger, every sphere's cap becomes
    its applied normal force and True is returned (the row re-solves); else nothing changes."""
    rtol = sc[S_CONE_TOL]
    n_s = m.sph_link.shape[0]
    gap = False
    for s in range(n_s):
        if cact[s]:
            n = applied_normal(m.sph_link, m.sph_p0, m.sph_r, sc, s, R, t, cP)
            if abs(n - cnorm[s]) > rtol * max(n, cnorm[s]):
                gap = True
    if gap:
        for s in range(n_s):
            cnorm[s] = applied_normal(m.sph_link, m.sph_p0, m.sph_r, sc, s, R, t, cP)
    return gap


@_jit
def _sphere_idle(sph_link, p0, sph_r, h, s, R, t, cact):
    """True when sphere s adds exactly zero to the energy, its gradient and its Hessian at poses (R, t): no
    penetration (its centre's height as :func:`sphere_point_terms` computes it) and no lagged friction (not in
    the contact memory's active set). A non-finite pose is never idle (its NaN must propagate as before)."""
    if cact[s]:
        return False
    l = sph_link[s]
    pz = t[l, 2] + (R[l, 2, 0] * p0[s, 0] + R[l, 2, 1] * p0[s, 1] + R[l, 2, 2] * p0[s, 2])
    return sph_r[s] - (pz - h) <= 0.0


@_jit
def link_terms(m, fo, R, t, A, bt, Rr, tr, Wd, cP, cact, cnorm, canc, G, f, s33, s3):
    """Value of the link terms (inertia, gravity, drag, contact) at poses (R, t); their pose gradients G, f."""
    sc, fl = fo.scalars, fo.flags
    dt = sc[S_DT]
    L = m.mass.shape[0]
    val_in, vg = _inertia_gravity(m.mass, m.c, m.S, R, t, A, bt, 0.5 / (dt * dt), fl[F_GRAVITY] != 0, fo.gravity,
                                  G, f)
    val = val_in
    if fl[F_GRAVITY]:
        val += -vg
    if fl[F_DRAG]:
        vd = 0.0
        for i in range(L):
            vd += _drag_link(m.mass, m.c, m.S, i, R, t, Rr, tr, Wd, 0.5 / dt, G, f, s33)
        val += vd
    if fl[F_CONTACT]:
        gP, HP, P = s3[3], s33[3], s3[4]
        vc = 0.0
        sl, sp, sr_, fr, h = m.sph_link, m.sph_p0, m.sph_r, fl[F_FRICTION], sc[S_HEIGHT]
        for s in range(sl.shape[0]):
            if _sphere_idle(sl, sp, sr_, h, s, R, t, cact):  # adds exactly nothing: skip (most spheres, most steps)
                continue
            v_s = sphere_point_terms(sl, sp, sr_, fr, sc, s, R, t, cP, cact, cnorm, canc, gP, HP, False, P)
            vc += v_s
            l, p0 = m.sph_link[s], m.sph_p0
            for a in range(3):
                f[l, a] += gP[a]
                for k in range(3):
                    G[l, a, k] += gP[a] * p0[s, k]
        val += vc
    return val


# --- joint terms (energies/actuation.py, joints.py) ----------------------------------------------------------
@_jit
def _chart_column(x, rw, rx, ry, rz):
    """Column x of J = w_r 1 + [vec r]× (rows (rw, −rz, ry), (rz, rw, −rx), (−ry, rx, rw)), chosen by branches
    (no runtime index into a tuple, which the GPU target would spill to local memory)."""
    if x == 0:
        return rw, rz, -ry
    if x == 1:
        return -rz, rw, rx
    return ry, -rx, rw


@_jit
def _chart_quat_hessian(H, v0, b0, b1, b2, rw, rx, ry, rz, e0, e1, e2):
    """Adds the Hessian of ½ Σ_k b_k d_k² (d = 2 vec r, e = b·d) over a quaternion joint's rotation DOFs
    v0 … v0+2 to H: Jᵀ diag(b) J − ½ (e·vec r) 1 with J = w_r 1 + [vec r]×."""
    corr = 0.5 * (e0 * rx + e1 * ry + e2 * rz)
    for x in range(3):
        c0, c1, c2 = _chart_column(x, rw, rx, ry, rz)
        for y in range(3):
            d0, d1, d2 = _chart_column(y, rw, rx, ry, rz)
            H[v0 + x, v0 + y] += c0 * b0 * d0 + c1 * b1 * d1 + c2 * b2 * d2
        H[v0 + x, v0 + x] -= corr


@_jit
def _chart_damping(lin_q, lin_v, quat_q, quat_v, q, qref, b, g):
    """½ Σ b_j d_j² with d = q ⊖ q_ref in the actuation chart (b: a row of KernelForces.chart, damping b/Δt or
    armature a/Δt²): value; adds the gradient to g. Takes the coordinate maps, not the KernelModel (see
    :func:`_drag_link`)."""
    val = 0.0
    for i in range(lin_q.shape[0]):
        j = lin_v[i]
        d = q[lin_q[i]] - qref[lin_q[i]]
        bj = b[j]
        val += 0.5 * bj * d * d
        g[j] += bj * d
    for i in range(quat_q.shape[0]):
        a, v0 = quat_q[i], quat_v[i]
        rw, rx, ry, rz = quat_mul(qref[a], -qref[a + 1], -qref[a + 2], -qref[a + 3], q[a], q[a + 1], q[a + 2],
                                  q[a + 3])
        b0, b1, b2 = b[v0], b[v0 + 1], b[v0 + 2]
        d0, d1, d2 = 2.0 * rx, 2.0 * ry, 2.0 * rz
        val += 0.5 * b0 * d0 * d0
        val += 0.5 * b1 * d1 * d1
        val += 0.5 * b2 * d2 * d2
        e0, e1, e2 = b0 * d0, b1 * d1, b2 * d2
        for y in range(3):  # grad = Jᵀ (b d)
            c0, c1, c2 = _chart_column(y, rw, rx, ry, rz)
            g[v0 + y] += c0 * e0 + c1 * e1 + c2 * e2
    return val


@_jit
def _chart_damping_hessian(lin_v, quat_q, quat_v, q, qref, b, H):
    """Adds the Hessian of :func:`_chart_damping` to H."""
    for i in range(lin_v.shape[0]):
        j = lin_v[i]
        H[j, j] += b[j]
    for i in range(quat_q.shape[0]):
        a, v0 = quat_q[i], quat_v[i]
        rw, rx, ry, rz = quat_mul(qref[a], -qref[a + 1], -qref[a + 2], -qref[a + 3], q[a], q[a + 1], q[a + 2],
                                  q[a + 3])
        b0, b1, b2 = b[v0], b[v0 + 1], b[v0 + 2]
        _chart_quat_hessian(H, v0, b0, b1, b2, rw, rx, ry, rz, b0 * (2.0 * rx), b1 * (2.0 * ry), b2 * (2.0 * rz))


@_jit
def _limit_depth(m, j, q, qref, k_l, c_l):
    """How far DOF j's coordinate is past its range (signed, 0 inside), with limit damping c_l > 0 the clamped
    Kelvin-Voigt depth past its shift s0 = p_k·c/(kΔt + c) of q_k's depth p_k."""
    qi = q[m.lim_q[j]]
    over = max(0.0, qi - m.lim_hi[j]) - max(0.0, m.lim_lo[j] - qi)
    if c_l > 0:
        qk = qref[m.lim_q[j]]
        p_k = max(0.0, qk - m.lim_hi[j]) + max(0.0, m.lim_lo[j] - qk)
        shift = p_k * c_l / (k_l + c_l) if p_k > 0 else 0.0  # the same 0 without a division
        over = max(0.0, over - shift) - max(0.0, -over - shift)
    return over


@_jit
def joint_terms(m, fo, q, qref, qpred, tau, g):
    """Value of the joint terms (actuation, limits, damping, armature); adds their gradient to g."""
    sc, fl = fo.scalars, fo.flags
    val = 0.0
    for i in range(m.lin_q.shape[0]):
        j = m.lin_v[i]
        val -= tau[j] * (q[m.lin_q[i]] - qref[m.lin_q[i]])
        g[j] += -tau[j]
    for i in range(m.quat_q.shape[0]):
        a, v0 = m.quat_q[i], m.quat_v[i]
        rw, rx, ry, rz = quat_mul(qref[a], -qref[a + 1], -qref[a + 2], -qref[a + 3], q[a], q[a + 1], q[a + 2],
                                  q[a + 3])
        t0, t1, t2 = tau[v0], tau[v0 + 1], tau[v0 + 2]
        val -= 2.0 * (t0 * rx + t1 * ry + t2 * rz)
        # −(w_r τ − vec r × τ)
        g[v0] += -(rw * t0 - (ry * t2 - rz * t1))
        g[v0 + 1] += -(rw * t1 - (rz * t0 - rx * t2))
        g[v0 + 2] += -(rw * t2 - (rx * t1 - ry * t0))
    if fl[F_LIMITS]:
        k_l, c_l = sc[S_LIMIT_K], sc[S_LIMIT_D] / sc[S_DT]
        k_lc = k_l + c_l
        vl = 0.0
        for j in range(m.lim_on.shape[0]):
            if m.lim_on[j]:
                over = _limit_depth(m, j, q, qref, k_l, c_l)
                vl += over * over
                g[j] += k_lc * over
        val += 0.5 * k_lc * vl
    if fl[F_DAMPING]:
        val += _chart_damping(m.lin_q, m.lin_v, m.quat_q, m.quat_v, q, qref, fo.chart[0], g)
    if fl[F_ARMATURE]:
        val += _chart_damping(m.lin_q, m.lin_v, m.quat_q, m.quat_v, q, qpred, fo.chart[1], g)
    return val


@_jit
def joint_hessian(m, fo, q, qref, qpred, tau, H):
    """Adds the Hessian of :func:`joint_terms` to H (each entry's additions in the order joint_terms made them
    when it also built the Hessian)."""
    sc, fl = fo.scalars, fo.flags
    for i in range(m.quat_q.shape[0]):
        a, v0 = m.quat_q[i], m.quat_v[i]
        rw, rx, ry, rz = quat_mul(qref[a], -qref[a + 1], -qref[a + 2], -qref[a + 3], q[a], q[a + 1], q[a + 2],
                                  q[a + 3])
        dg = 0.5 * (tau[v0] * rx + tau[v0 + 1] * ry + tau[v0 + 2] * rz)
        for k in range(3):
            H[v0 + k, v0 + k] += dg
    if fl[F_LIMITS]:
        k_l, c_l = sc[S_LIMIT_K], sc[S_LIMIT_D] / sc[S_DT]
        k_lc = k_l + c_l
        for j in range(m.lim_on.shape[0]):
            if m.lim_on[j] and _limit_depth(m, j, q, qref, k_l, c_l) != 0:
                H[j, j] += k_lc
    if fl[F_DAMPING]:
        _chart_damping_hessian(m.lin_v, m.quat_q, m.quat_v, q, qref, fo.chart[0], H)
    if fl[F_ARMATURE]:
        _chart_damping_hessian(m.lin_v, m.quat_q, m.quat_v, q, qpred, fo.chart[1], H)


# --- gradient by the wrench pass (kinematics/chain_rule.py) --------------------------------------------------
@_jit
def wrench_gradient(m, R, t, w, v, G, f, wr, g):
    """g += ∂E/∂δ of the link pose gradients G, f: world wrenches summed up the tree, projected on the axes."""
    L = m.mass.shape[0]
    for i in range(L):
        # X = R Gᵀ: τ = (X12 − X21, X20 − X02, X01 − X10)
        x12 = R[i, 1, 0] * G[i, 2, 0] + R[i, 1, 1] * G[i, 2, 1] + R[i, 1, 2] * G[i, 2, 2]
        x21 = R[i, 2, 0] * G[i, 1, 0] + R[i, 2, 1] * G[i, 1, 1] + R[i, 2, 2] * G[i, 1, 2]
        x20 = R[i, 2, 0] * G[i, 0, 0] + R[i, 2, 1] * G[i, 0, 1] + R[i, 2, 2] * G[i, 0, 2]
        x02 = R[i, 0, 0] * G[i, 2, 0] + R[i, 0, 1] * G[i, 2, 1] + R[i, 0, 2] * G[i, 2, 2]
        x01 = R[i, 0, 0] * G[i, 1, 0] + R[i, 0, 1] * G[i, 1, 1] + R[i, 0, 2] * G[i, 1, 2]
        x10 = R[i, 1, 0] * G[i, 0, 0] + R[i, 1, 1] * G[i, 0, 1] + R[i, 1, 2] * G[i, 0, 2]
        wr[i, 0] = (x12 - x21) + (t[i, 1] * f[i, 2] - t[i, 2] * f[i, 1])
        wr[i, 1] = (x20 - x02) + (t[i, 2] * f[i, 0] - t[i, 0] * f[i, 2])
        wr[i, 2] = (x01 - x10) + (t[i, 0] * f[i, 1] - t[i, 1] * f[i, 0])
        wr[i, 3], wr[i, 4], wr[i, 5] = f[i, 0], f[i, 1], f[i, 2]
    for n in range(L - 1, -1, -1):  # children before parents
        i = m.order[n]
        p = m.parent[i]
        if p >= 0:
            for a in range(6):
                wr[p, a] += wr[i, a]
    for j in range(m.dof_link.shape[0]):
        l = m.dof_link[j]
        g[j] += (w[j, 0] * wr[l, 0] + w[j, 1] * wr[l, 1] + w[j, 2] * wr[l, 2]
                 + v[j, 0] * wr[l, 3] + v[j, 1] * wr[l, 4] + v[j, 2] * wr[l, 5])


# --- Hessian (integrators/pbad.py step_hessian, kinematics/chain_rule.py generalized_hessian) ----------------
@_jit
def _world_moments(mi, c, S, R, t, i, cw, Sw, Rc, RS):
    """World first moment cw (3,) = R c_i + m_i t and second moment Sw (3, 3) = R S_i Rᵀ + t (Rc)ᵀ + Rc tᵀ + m_i t tᵀ
    of link i at pose (R[i], t[i]), from its body-frame moments c (L, 3), S (L, 3, 3); Rc, RS scratch."""
    for a in range(3):
        Rc[a] = R[i, a, 0] * c[i, 0] + R[i, a, 1] * c[i, 1] + R[i, a, 2] * c[i, 2]
        cw[a] = Rc[a] + mi * t[i, a]
        for b in range(3):
            RS[a, b] = R[i, a, 0] * S[i, 0, b] + R[i, a, 1] * S[i, 1, b] + R[i, a, 2] * S[i, 2, b]
    for a in range(3):
        for b in range(3):
            Sw[a, b] = (RS[a, 0] * R[i, b, 0] + RS[a, 1] * R[i, b, 1] + RS[a, 2] * R[i, b, 2]
                        + t[i, a] * Rc[b] + Rc[a] * t[i, b] + mi * t[i, a] * t[i, b])


@_jit
def _spatial_form(mi, cw, Sw, W, K, i, cx):
    """K += ∫ρ (ω×P + v)ᵀ W (ω×P + v) as a 6x6 form from world moments into K[i] (kinematics/spatial.py)."""
    # rotational block Σ_kl S_kl [e_k]×ᵀ W [e_l]× written out with the Levi-Civita symbol
    for a in range(3):
        a1, a2 = (a + 1) % 3, (a + 2) % 3
        for d in range(3):
            d1, d2 = (d + 1) % 3, (d + 2) % 3
            # ε_{b a k}: (b, k) = (a2, a1) sign +1, (a1, a2) sign −1; same for (c, d, l)
            K[i, a, d] += (W[a2, d2] * Sw[a1, d1] - W[a2, d1] * Sw[a1, d2]
                        - W[a1, d2] * Sw[a2, d1] + W[a1, d1] * Sw[a2, d2])
    # [c]× W and −W [c]×, m W
    cx[0, 0] = cx[1, 1] = cx[2, 2] = 0.0
    cx[0, 1], cx[0, 2], cx[1, 2] = -cw[2], cw[1], -cw[0]
    cx[1, 0], cx[2, 0], cx[2, 1] = cw[2], -cw[1], cw[0]
    for a in range(3):
        for b in range(3):
            s = cx[a, 0] * W[0, b] + cx[a, 1] * W[1, b] + cx[a, 2] * W[2, b]
            K[i, a, 3 + b] += s
            K[i, 3 + b, a] += s
            K[i, 3 + a, 3 + b] += mi * W[a, b]


@_jit
def _inertia_form(mi, c, S, R, t, i, al, K):
    """K[i] = al · the world spatial inertia of link i at pose (R[i], t[i]): :func:`_world_moments` then
    :func:`_spatial_form` with W = al·1 (the inertia term without drag; the mass matrix with al = 1), in locals
    and without the products by W's zeros: the same numbers bit for bit, for finite poses. Blocks:
    al·(tr(Sw) 1 − Sw), al·[cw]× and its transpose, al·m 1."""
    rc0 = R[i, 0, 0] * c[i, 0] + R[i, 0, 1] * c[i, 1] + R[i, 0, 2] * c[i, 2]
    rc1 = R[i, 1, 0] * c[i, 0] + R[i, 1, 1] * c[i, 1] + R[i, 1, 2] * c[i, 2]
    rc2 = R[i, 2, 0] * c[i, 0] + R[i, 2, 1] * c[i, 1] + R[i, 2, 2] * c[i, 2]
    rc = (rc0, rc1, rc2)
    for a in range(3):
        ra0, ra1, ra2 = R[i, a, 0], R[i, a, 1], R[i, a, 2]
        rs0 = ra0 * S[i, 0, 0] + ra1 * S[i, 1, 0] + ra2 * S[i, 2, 0]
        rs1 = ra0 * S[i, 0, 1] + ra1 * S[i, 1, 1] + ra2 * S[i, 2, 1]
        rs2 = ra0 * S[i, 0, 2] + ra1 * S[i, 1, 2] + ra2 * S[i, 2, 2]
        for b in range(3):  # −al·Sw[a, b] into K[b, a]; the diagonal's Sw[a, a] kept there for the trace below
            sw = (rs0 * R[i, b, 0] + rs1 * R[i, b, 1] + rs2 * R[i, b, 2]
                  + t[i, a] * rc[b] + rc[a] * t[i, b] + mi * t[i, a] * t[i, b])
            K[i, b, a] = sw if a == b else -(al * sw)
    s0, s1, s2 = K[i, 0, 0], K[i, 1, 1], K[i, 2, 2]
    K[i, 0, 0] = al * s1 + al * s2
    K[i, 1, 1] = al * s2 + al * s0
    K[i, 2, 2] = al * s0 + al * s1
    cw0, cw1, cw2 = rc0 + mi * t[i, 0], rc1 + mi * t[i, 1], rc2 + mi * t[i, 2]
    x01, x02, x12 = al * -cw2, al * cw1, al * -cw0  # al·[cw]×: (0, 1), (0, 2), (1, 2) and minus their mirrors
    x10, x20, x21 = al * cw2, al * -cw1, al * cw0
    K[i, 0, 3], K[i, 0, 4], K[i, 0, 5] = 0.0, x01, x02
    K[i, 1, 3], K[i, 1, 4], K[i, 1, 5] = x10, 0.0, x12
    K[i, 2, 3], K[i, 2, 4], K[i, 2, 5] = x20, x21, 0.0
    for a in range(3):
        for b in range(3):
            K[i, 3 + b, a] = K[i, a, 3 + b]
            K[i, 3 + a, 3 + b] = mi * al if a == b else 0.0


@_jit
def hessian(m, fo, q, qref, qpred, tau, R, t, w, v, G, f, Wd, cP, cact, cnorm, canc, K, Z, F, Xk, H, D, s33, s3,
            s36):
    """Step Hessian H (nv, nv) at q and the diagonal D (nv,) of its Gauss-Newton part (armature included)."""
    sc, fl = fo.scalars, fo.flags
    dt = sc[S_DT]
    L, nv = m.mass.shape[0], m.dof_link.shape[0]
    exact = fl[F_EXACT] != 0
    Wl, Sw, RS = s33[4], s33[5], s33[6]
    cw, Rc = s3[5], s3[6]
    drag = fl[F_DRAG] != 0
    for i in range(L):
        mi = m.mass[i]
        if drag:
            _world_moments(mi, m.c, m.S, R, t, i, cw, Sw, Rc, RS)
            for a in range(6):
                for b in range(6):
                    K[i, a, b] = 0.0
            for a in range(3):
                for b in range(3):
                    Wl[a, b] = Wd[i, a, b] / dt + (1.0 / (dt * dt) if a == b else 0.0)
            _spatial_form(mi, cw, Sw, Wl, K, i, s33[7])
        else:
            _inertia_form(mi, m.c, m.S, R, t, i, 1.0 / (dt * dt), K)
        if exact:
            for a in range(3):
                F[i, a] = f[i, a]
                for b in range(3):
                    Z[i, a, b] = ((R[i, a, 0] * G[i, b, 0] + R[i, a, 1] * G[i, b, 1] + R[i, a, 2] * G[i, b, 2])
                                  + t[i, a] * f[i, b])
    if fl[F_CONTACT]:
        gP, HP, P = s3[3], s33[3], s3[4]
        T, HT = s36[0], s36[1]
        sl, sp, sr_, fr, h = m.sph_link, m.sph_p0, m.sph_r, fl[F_FRICTION], sc[S_HEIGHT]
        for s in range(sl.shape[0]):
            if _sphere_idle(sl, sp, sr_, h, s, R, t, cact):  # zero Hessian block
                continue
            sphere_point_terms(sl, sp, sr_, fr, sc, s, R, t, cP, cact, cnorm, canc, gP, HP, True, P)
            P0, P1, P2 = P[0], P[1], P[2]
            # T = [−[P]×, 1]
            T[0, 0], T[0, 1], T[0, 2] = 0.0, P2, -P1
            T[1, 0], T[1, 1], T[1, 2] = -P2, 0.0, P0
            T[2, 0], T[2, 1], T[2, 2] = P1, -P0, 0.0
            for a in range(3):
                for b in range(3):
                    T[a, 3 + b] = 1.0 if a == b else 0.0
            for a in range(3):
                for b in range(6):
                    HT[a, b] = HP[a, 0] * T[0, b] + HP[a, 1] * T[1, b] + HP[a, 2] * T[2, b]
            l = m.sph_link[s]
            for a in range(6):
                for b in range(6):
                    K[l, a, b] += T[0, a] * HT[0, b] + T[1, a] * HT[1, b] + T[2, a] * HT[2, b]
    # composite (subtree) sums
    for n in range(L - 1, -1, -1):
        i = m.order[n]
        p = m.parent[i]
        if p >= 0:
            for a in range(6):
                for b in range(6):
                    K[p, a, b] += K[i, a, b]
            if exact:
                for a in range(3):
                    F[p, a] += F[i, a]
                    for b in range(3):
                        Z[p, a, b] += Z[i, a, b]
    for k in range(nv):
        l = m.dof_link[k]
        s6 = (w[k, 0], w[k, 1], w[k, 2], v[k, 0], v[k, 1], v[k, 2])
        dk = 0.0
        for a in range(6):
            x = 0.0
            for b in range(6):
                x += K[l, a, b] * s6[b]
            Xk[k, a] = x
            dk += s6[a] * x
        D[k] = dk
        if exact:
            tr = Z[l, 0, 0] + Z[l, 1, 1] + Z[l, 2, 2]
            wk0, wk1, wk2 = w[k, 0], w[k, 1], w[k, 2]
            vk0, vk1, vk2 = v[k, 0], v[k, 1], v[k, 2]
            Xk[k, 0] += ((Z[l, 0, 0] * wk0 + Z[l, 0, 1] * wk1 + Z[l, 0, 2] * wk2) - tr * wk0
                         + (vk1 * F[l, 2] - vk2 * F[l, 1]))
            Xk[k, 1] += ((Z[l, 1, 0] * wk0 + Z[l, 1, 1] * wk1 + Z[l, 1, 2] * wk2) - tr * wk1
                         + (vk2 * F[l, 0] - vk0 * F[l, 2]))
            Xk[k, 2] += ((Z[l, 2, 0] * wk0 + Z[l, 2, 1] * wk1 + Z[l, 2, 2] * wk2) - tr * wk2
                         + (vk0 * F[l, 1] - vk1 * F[l, 0]))
    for j in range(nv):
        for k in range(nv):
            H[j, k] = 0.0
    hw = m.hess_weight
    for j in range(nv):
        for k in range(nv):
            c = hw[j, k]
            if c != 0.0:
                p = c * (w[j, 0] * Xk[k, 0] + w[j, 1] * Xk[k, 1] + w[j, 2] * Xk[k, 2]
                         + v[j, 0] * Xk[k, 3] + v[j, 1] * Xk[k, 4] + v[j, 2] * Xk[k, 5])
                H[j, k] += p
                H[k, j] += p
    joint_hessian(m, fo, q, qref, qpred, tau, H)
    if fl[F_ARMATURE]:
        for k in range(nv):
            D[k] += fo.chart[2, k]


# --- damped solve ---------------------------------------------------------------------------------------------
@_jit
def solve_damped(H, D, mu, g, A, dx, piv):
    """dx = −(H + μ·diag(D))⁻¹ g by Cholesky, or LU with partial pivoting when the matrix is not positive
    definite; returns False when it is singular."""
    n = g.shape[0]
    for i in range(n):
        for j in range(n):
            A[i, j] = H[i, j]
        A[i, i] += mu * D[i]
    spd = True
    for j in range(n):  # Cholesky, lower triangle in place
        s = A[j, j]
        for k in range(j):
            s -= A[j, k] * A[j, k]
        if not s > 0.0:
            spd = False
            break
        s = math.sqrt(s)
        A[j, j] = s
        # column j below the diagonal, and the forward solve's dx[j] (L dx = −g, the row an augmented column −g
        # would add to L), two at a time: two independent chains of additions, each in its own order, where one
        # after the other each waited on its own
        i = j + 1
        while i + 1 < n:
            x0, x1 = A[i, j], A[i + 1, j]
            for k in range(j):
                ajk = A[j, k]
                x0 -= A[i, k] * ajk
                x1 -= A[i + 1, k] * ajk
            A[i, j], A[i + 1, j] = x0 / s, x1 / s
            i += 2
        y = -g[j]
        if i < n:
            x = A[i, j]
            for k in range(j):
                ajk = A[j, k]
                x -= A[i, k] * ajk
                y -= ajk * dx[k]
            A[i, j] = x / s
        else:
            for k in range(j):
                y -= A[j, k] * dx[k]
        dx[j] = y / s
    if spd:
        for i in range(n - 1, -1, -1):
            x = dx[i]
            for k in range(i + 1, n):
                x -= A[k, i] * dx[k]
            dx[i] = x / A[i, i]
        return True
    for i in range(n):
        for j in range(n):
            A[i, j] = H[i, j]
        A[i, i] += mu * D[i]
        dx[i] = -g[i]
        piv[i] = i
    for j in range(n):
        p = j
        big = abs(A[j, j])
        for i in range(j + 1, n):
            if abs(A[i, j]) > big:
                big, p = abs(A[i, j]), i
        if big == 0.0:
            return False
        if p != j:
            for k in range(n):
                A[j, k], A[p, k] = A[p, k], A[j, k]
            dx[j], dx[p] = dx[p], dx[j]
        for i in range(j + 1, n):
            r = A[i, j] / A[j, j]
            if r != 0.0:
                for k in range(j, n):
                    A[i, k] -= r * A[j, k]
                dx[i] -= r * dx[j]
    for i in range(n - 1, -1, -1):
        x = dx[i]
        for k in range(i + 1, n):
            x -= A[i, k] * dx[k]
        dx[i] = x / A[i, i]
    return True



# --- what the environment reads of the new state (integrators/state.py advance, envs/divergence.py) ------------
@_jit
def mass_matrix(m, R, t, w, v, K, Xk, M):
    """Joint-space mass matrix M (nv, nv) at poses (R, t) with motion axes (w, v), as dynamics.crba: the links'
    world spatial inertias (the inertia form of :func:`hessian` with W = 1) summed over subtrees, projected on
    the DOF axes, armature on the diagonal. K (L, 6, 6), Xk (nv, 6) scratch."""
    L, nv = m.mass.shape[0], m.dof_link.shape[0]
    for i in range(L):
        _inertia_form(m.mass[i], m.c, m.S, R, t, i, 1.0, K)
    for n in range(L - 1, -1, -1):
        i = m.order[n]
        p = m.parent[i]
        if p >= 0:
            for a in range(6):
                for b in range(6):
                    K[p, a, b] += K[i, a, b]
    for k in range(nv):
        l = m.dof_link[k]
        s6 = (w[k, 0], w[k, 1], w[k, 2], v[k, 0], v[k, 1], v[k, 2])
        for a in range(6):
            x = 0.0
            for b in range(6):
                x += K[l, a, b] * s6[b]
            Xk[k, a] = x
    for j in range(nv):
        for k in range(nv):
            M[j, k] = 0.0
    hw = m.hess_weight
    for j in range(nv):
        for k in range(nv):
            c = hw[j, k]
            if c != 0.0:
                p = c * (w[j, 0] * Xk[k, 0] + w[j, 1] * Xk[k, 1] + w[j, 2] * Xk[k, 2]
                         + v[j, 0] * Xk[k, 3] + v[j, 1] * Xk[k, 4] + v[j, 2] * Xk[k, 5])
                M[j, k] += p
                M[k, j] += p
    for k in range(nv):
        M[k, k] += m.armature[k]


@_jit
def energy_terms_row(m, fo, act, gear, q, qd, R, t, w, v, K, Xk, M, A, x, e, zero, piv, s33, s3, out):
    """The divergence guard's measure of one state (envs/divergence.py, integrators/state.py energy_terms) into
    out (N_TERMS,): kinetic energy ½q̇ᵀMq̇ [J], the actuation coefficient c = √(Σ_ab gear_a gear_b |M⁻¹|_ab)
    over the DOFs ``act`` (n_act,) with ``gear`` (n_act,) [√J/s], limit energy [J], contact normal energy [J]
    and the centre of mass (3,) [m]. q (nq,), qd (nv,), (R, t, w, v) the kinematics of q. M⁻¹'s entries come
    from one Cholesky factor L of M, (M⁻¹)_ab = (L⁻¹e_a)·(L⁻¹e_b) (the columns of M⁻¹ by LU with pivoting, as
    LAPACK's inverse, if M is not positive definite); M is overwritten."""
    sc, fl = fo.scalars, fo.flags
    nv = m.dof_link.shape[0]
    mass_matrix(m, R, t, w, v, K, Xk, M)
    ke = 0.0
    for j in range(nv):
        mq = 0.0
        for k in range(nv):
            mq += M[j, k] * qd[k]
        ke += qd[j] * mq
    out[T_KINETIC] = 0.5 * ke
    c2 = 0.0
    n_act = act.shape[0]
    if n_act > 0:
        spd = True
        for j in range(nv):  # Cholesky of M, lower triangle in A
            s = M[j, j]
            for k in range(j):
                s -= A[j, k] * A[j, k]
            if not s > 0.0:
                spd = False
                break
            s = math.sqrt(s)
            A[j, j] = s
            for i in range(j + 1, nv):
                y = M[i, j]
                for k in range(j):
                    y -= A[i, k] * A[j, k]
                A[i, j] = y / s
        if spd:
            # M⁻¹ = L⁻ᵀL⁻¹, so (M⁻¹)_ab = X_a·X_b with X_a = L⁻¹ e_act[a], zero above act[a]: one forward solve
            # per actuator from its own row down (M, no longer needed, holds X column by column), no back solve
            for a in range(n_act):
                col = act[a]
                for i in range(col, nv):
                    y = 1.0 if i == col else 0.0
                    for k in range(col, i):
                        y -= A[i, k] * M[k, a]
                    M[i, a] = y / A[i, i]
            for a in range(n_act):
                s = 0.0
                for b in range(n_act):
                    xab = 0.0
                    for i in range(max(act[a], act[b]), nv):
                        xab += M[i, a] * M[i, b]
                    s += gear[b] * abs(xab)
                c2 += gear[a] * s
        else:
            for k in range(nv):
                zero[k] = 0.0
            for a in range(n_act):
                col = act[a]
                for k in range(nv):
                    e[k] = -1.0 if k == col else 0.0
                solve_damped(M, zero, 0.0, e, A, x, piv)
                s = 0.0
                for b in range(n_act):
                    s += gear[b] * abs(x[act[b]])
                c2 += gear[a] * s
    out[T_ACTUATION] = math.sqrt(c2)
    vl = 0.0
    if fl[F_LIMITS]:
        for j in range(m.lim_on.shape[0]):
            if m.lim_on[j]:
                qi = q[m.lim_q[j]]
                over = max(0.0, qi - m.lim_hi[j]) - max(0.0, m.lim_lo[j] - qi)
                vl += over * over
        vl = 0.5 * sc[S_LIMIT_K] * vl
    out[T_LIMITS] = vl
    vc = 0.0
    if fl[F_CONTACT]:
        h, p0 = sc[S_HEIGHT], m.sph_p0
        for s_ in range(m.sph_link.shape[0]):
            l = m.sph_link[s_]
            pz = t[l, 2] + (R[l, 2, 0] * p0[s_, 0] + R[l, 2, 1] * p0[s_, 1] + R[l, 2, 2] * p0[s_, 2])
            d = max(0.0, m.sph_r[s_] - (pz - h))
            vc += d * d
        vc = 0.5 * sc[S_CONTACT_K] * vc
    out[T_CONTACT] = vc
    total = 0.0
    c0 = c1 = c2_ = 0.0
    c = m.c
    for i in range(m.mass.shape[0]):
        mi = m.mass[i]
        total += mi
        c0 += R[i, 0, 0] * c[i, 0] + R[i, 0, 1] * c[i, 1] + R[i, 0, 2] * c[i, 2] + mi * t[i, 0]
        c1 += R[i, 1, 0] * c[i, 0] + R[i, 1, 1] * c[i, 1] + R[i, 1, 2] * c[i, 2] + mi * t[i, 1]
        c2_ += R[i, 2, 0] * c[i, 0] + R[i, 2, 1] * c[i, 1] + R[i, 2, 2] * c[i, 2] + mi * t[i, 2]
    out[T_COM], out[T_COM + 1], out[T_COM + 2] = c0 / total, c1 / total, c2_ / total


@_jit
def contact_update(m, fo, R, t, cP, cact, cnorm, canc, r, nP, nact, nnorm, nanc, force, gP, HP, P):
    """Row r of the contact memory of the new state and of the ground force the step applied (energies/contact.py
    contact_state with ``prev`` = the step's memory (cP, cact, cnorm, canc), and sphere_forces = −∂E/∂P at the
    new poses (R, t) with that memory)."""
    sc = fo.scalars
    k_n, h, eps = sc[S_CONTACT_K], sc[S_HEIGHT], sc[S_SLIP_EPS]
    coulomb = fo.flags[F_FRICTION] == 1
    applied = fo.flags[F_CAP_APPLIED] != 0
    for s in range(m.sph_link.shape[0]):
        sphere_point_terms(m.sph_link, m.sph_p0, m.sph_r, fo.flags[F_FRICTION], sc, s, R, t, cP, cact, cnorm, canc,
                           gP, HP, False, P)
        d = max(0.0, m.sph_r[s] - (P[2] - h))
        on = d > 0
        nact[r, s] = on
        nnorm[r, s] = -gP[2] if applied else k_n * d  # −∂E/∂P_z: the normal force just applied
        for a in range(3):
            force[r, s, a] = -gP[a]
            nP[r, s, a] = P[a]
            nanc[r, s, a] = P[a]
        if coulomb and on and cact[s]:  # a sphere that stayed in contact: its anchor drags to within ε
            x0, x1 = P[0] - canc[s, 0], P[1] - canc[s, 1]
            sn = math.sqrt(x0 * x0 + x1 * x1)
            f = max(0.0, 1.0 - eps / max(sn, 1e-300))
            nanc[r, s, 0] = canc[s, 0] + x0 * f
            nanc[r, s, 1] = canc[s, 1] + x1 * f


@_jit
def _finish_scratch(m, dtype):
    """Scratch of :func:`energy_terms_row` beyond the step's: x, e, zero (nv,), velocity (nv,), terms row."""
    nv = m.dof_link.shape[0]
    return (np.empty(nv, dtype), np.empty(nv, dtype), np.empty(nv, dtype), np.empty(nv, dtype),
            np.empty(N_TERMS, dtype))


# --- one trajectory -------------------------------------------------------------------------------------------
@_jit
def _energy_grad(m, fo, x, qref, qpred, tau, A, bt, Rr, tr, Wd, cP, cact, cnorm, canc, R, t, w, v, Rj, R2, G, f,
                 wr, g, s33, s3):
    forward_kinematics(m, x, R, t, w, v, Rj, R2)
    E = link_terms(m, fo, R, t, A, bt, Rr, tr, Wd, cP, cact, cnorm, canc, G, f, s33, s3)
    for j in range(g.shape[0]):
        g[j] = 0.0
    wrench_gradient(m, R, t, w, v, G, f, wr, g)
    E += joint_terms(m, fo, x, qref, qpred, tau, g)
    return E


@_jit
def _damped_step(H, D, mu, g, A, dx, piv):
    """:func:`solve_damped`, and False unless the step is finite as well."""
    ok = solve_damped(H, D, mu, g, A, dx, piv)
    if ok:
        for j in range(dx.shape[0]):
            if not math.isfinite(dx[j]):
                return False
    return ok


@_jit
def _length2(dx, D):
    """The step's squared D-norm Σ_j D_j dx_j²."""
    out = 0.0
    for j in range(dx.shape[0]):
        out += D[j] * dx[j] * dx[j]
    return out


@_jit
def _measure(g, D):
    out = 0.0
    for j in range(g.shape[0]):
        out = max(out, abs(g[j]) / D[j])
    return out


@_jit
def step_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w,
              out_v, TERMS, out_force, r0, r1):
    """IT.shape[0] steps (substeps under the same torques tau) of trajectories r0 … r1−1, :func:`step_row` each,
    on one scratch set. The state and contact memory rotate through buffers, so nothing is copied between
    substeps: substep s steps from Q[s % 3] (q_prev) and Q[(s+1) % 3] (q) to Q[(s+2) % 3], from contact memory
    slot s % 2 of CP, CACT, CNORM, CANC to slot (s+1) % 2, and writes its iterations, gradient norm, convergence
    and energy terms to IT[s], GN[s], CONV[s] and TERMS[s]; the other finish outputs are the last substep's.

    Each chunk copies the constants and allocates its scratch here (with reference counting, which allocation
    needs), then runs its rows, each through all its substeps, in :func:`_run_rows` (without it). The copies
    were first made to keep threads off each other's reference-count cache lines; with the counting gone they
    still pay: without them Spider-v2 at 256 envs ran 0.93× as fast (paired, BENCHMARKS.md)."""
    m = KernelModel(m.jtype.copy(), m.parent.copy(), m.order.copy(), m.q_start.copy(), m.v_start.copy(),
                    m.dof_link.copy(), m.lim_on.copy(), m.lim_q.copy(), m.quat_q.copy(), m.quat_v.copy(),
                    m.lin_q.copy(), m.lin_v.copy(), m.sph_link.copy(), m.hess_weight.copy(), m.lim_lo.copy(),
                    m.lim_hi.copy(), m.mass.copy(), m.c.copy(), m.S.copy(), m.place_R.copy(), m.place_t.copy(),
                    m.axis1.copy(), m.axis2.copy(), m.armature.copy(), m.sph_p0.copy(), m.sph_r.copy())
    fo = KernelForces(fo.gravity.copy(), fo.drag.copy(), fo.chart.copy(), fo.flags.copy(), fo.scalars.copy())
    sc = alloc_scratch(m.mass.shape[0], m.dof_link.shape[0], Q.shape[2], CP.shape[2], Q.dtype)
    act, gear = act.copy(), gear.copy()
    _run_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w, out_v,
              TERMS, out_force, r0, r1, sc)


@njit(**ROW_LOOP_OPTIONS)
def _run_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w, out_v,
              TERMS, out_force, r0, r1, sc):
    """:func:`step_rows`' loops on its scratch ``sc``, compiled with :data:`ROW_LOOP_OPTIONS` (no reference
    counting: with it, every call of a helper that takes arrays — the KernelModel's 26 among them — paid atomic
    increments and decrements of their counts; BENCHMARKS.md). The arithmetic, and so every number, is the same."""
    n = IT.shape[0]
    for r in range(r0, r1):  # a row's substeps back to back: its poses carry from one to the next
        for s in range(n):
            ci, co = s % 2, (s + 1) % 2
            q_prev, q_cur, q_out = Q[s % 3], Q[(s + 1) % 3], Q[(s + 2) % 3]
            cP, cact, cnorm, canc = CP[ci], CACT[ci], CNORM[ci], CANC[ci]
            nP, nact, nnorm, nanc = CP[co], CACT[co], CNORM[co], CANC[co]
            cu = step_row(m, fo, q_prev, q_cur, tau, cP, cact, cnorm, canc, q_out, IT[s], GN[s], CONV[s], act, gear,
                          want, out_qd, out_R, out_t, out_w, out_v, TERMS[s], nP, nact, nnorm, nanc, out_force, r, sc,
                          s > 0)
            if s + 1 < n:
                carry_poses(sc, cu)


@_jit
def carry_poses(sc, cu):
    """After a substep: the poses of its q_cur and of its result (the LM's evaluation slot ``cu``) become those of
    the next substep's q_prev and q_cur (``known`` of :func:`step_row`: the values forward kinematics would compute
    from those coordinates, bit for bit)."""
    Rp, tp, Rr, tr, Rc, tc = sc.Rp, sc.tp, sc.Rr, sc.tr, sc.Rs[cu], sc.ts[cu]
    for i in range(Rr.shape[0]):
        for a in range(3):
            tp[i, a] = tr[i, a]
            tr[i, a] = tc[i, a]
            for b in range(3):
                Rp[i, a, b] = Rr[i, a, b]
                Rr[i, a, b] = Rc[i, a, b]


@_jit
def step_row(m, fo, q_prev, q_cur, tau, cP, cact, cnorm, canc, out_q, out_it, out_gn, out_conv, act, gear, want,
             out_qd, out_R, out_t, out_w, out_v, out_terms, out_cP, out_cact, out_cnorm, out_canc, out_force, r, sc,
             known):
    """The step of trajectory r, running its own Levenberg-Marquardt to convergence, on the work arrays ``sc``
    (a scratch.StepScratch; no allocation here, so the GPU kernel runs this same code, one thread per row).
    Returns the LM slot of the result (sc.Rs[slot], sc.ts[slot]: its poses). ``known``: sc.Rp, sc.tp and sc.Rr,
    sc.tr already hold the poses of q_prev and q_cur (:func:`carry_poses` after this row's previous substep).

    With ``want`` != 0 the row also leaves what the environment reads of its new state (one call per env step,
    no NumPy after it): velocity q̇ = (q_{k+1} ⊖ q_k)/Δt (out_qd), the kinematics of q_{k+1} (out_R, out_t, out_w,
    out_v: the LM's own evaluation at its accepted point), the divergence guard's energy terms (out_terms, see
    :func:`energy_terms_row`; DOFs ``act`` with ``gear``) and, with contact, the new contact memory (out_cP,
    out_cact, out_cnorm, out_canc) and the ground force the step applied (out_force). With want == 0 these
    outputs are not touched (they may be empty)."""
    qp, qc, ta, cPr, canr, car, cnr = sc.qp, sc.qc, sc.ta, sc.cPr, sc.canr, sc.car, sc.cnr
    Rs, ts, ws, vs, Gs, fs, gs, xs = sc.Rs, sc.ts, sc.ws, sc.vs, sc.Gs, sc.fs, sc.gs, sc.xs
    Rp, tp, Rr, tr, A, bt, Wd = sc.Rp, sc.tp, sc.Rr, sc.tr, sc.A, sc.bt, sc.Wd
    wtmp, vtmp, Rj, R2, wr, K, Z, F, Xk = sc.wtmp, sc.vtmp, sc.Rj, sc.R2, sc.wr, sc.K, sc.Z, sc.F, sc.Xk
    H, Af, D, dx, dv, piv, qpred = sc.H, sc.Af, sc.D, sc.dx, sc.dv, sc.piv, sc.qpred
    s33, s3, s36, xv, ev, zv, qdr, trow = sc.s33, sc.s3, sc.s36, sc.xv, sc.ev, sc.zv, sc.qdr, sc.trow
    n_s = cP.shape[1]
    L, nv, nq = m.mass.shape[0], m.dof_link.shape[0], q_cur.shape[1]
    sc_, fl = fo.scalars, fo.flags
    tol, eps, mu0 = sc_[S_TOL], sc_[S_MACH_EPS], sc_[S_MU0]
    max_iter = fl[F_MAX_ITER]
    dt = sc_[S_DT]
    for k in range(qc.shape[0]):
        qp[k], qc[k] = q_prev[r, k], q_cur[r, k]
    for k in range(ta.shape[0]):
        ta[k] = tau[r, k]
    for k in range(n_s):
        car[k], cnr[k] = cact[r, k], cnorm[r, k]
        for a in range(3):
            cPr[k, a], canr[k, a] = cP[r, k, a], canc[r, k, a]
    # step data (integrators/pbad.py prepare_step)
    if not known:
        forward_kinematics(m, qp, Rp, tp, wtmp, vtmp, Rj, R2)
        forward_kinematics(m, qc, Rr, tr, wtmp, vtmp, Rj, R2)
    for i in range(L):
        for a in range(3):
            bt[i, a] = 2 * tr[i, a] - tp[i, a]
            for b in range(3):
                A[i, a, b] = 2 * Rr[i, a, b] - Rp[i, a, b]
    if fl[F_DRAG]:
        for i in range(L):
            C = fo.drag
            for a in range(3):
                for b in range(3):
                    Wd[i, a, b] = (Rr[i, a, 0] * C[i, 0] * Rr[i, b, 0] + Rr[i, a, 1] * C[i, 1] * Rr[i, b, 1]
                                   + Rr[i, a, 2] * C[i, 2] * Rr[i, b, 2])
    difference(m, qp, qc, dv)
    integrate(m, qc, dv, qpred)
    # Levenberg-Marquardt (optim/lm.py)
    cu = 0
    for k in range(nq):
        xs[0, k] = qpred[k]
    E = _energy_grad(m, fo, xs[0], qc, qpred, ta, A, bt, Rr, tr, Wd, cPr, car, cnr, canr, Rs[0], ts[0],
                     ws[0], vs[0], Rj, R2, Gs[0], fs[0], wr, gs[0], s33, s3)
    hessian(m, fo, xs[0], qc, qpred, ta, Rs[0], ts[0], ws[0], vs[0], Gs[0], fs[0], Wd, cPr, car, cnr, canr,
            K, Z, F, Xk, H, D, s33, s3, s36)
    mu = mu0
    iters = 0
    conv = False
    gnorm = _measure(gs[0], D)
    limit = math.inf
    for p in range(fl[F_CONE_PASSES] + 1):  # Coulomb friction capped by the step's own normal force (pbad.py)
        if p > 0:
            if not cone_refresh(m, sc_, Rs[cu], ts[cu], cPr, car, cnr):
                break
            E = _energy_grad(m, fo, xs[cu], qc, qpred, ta, A, bt, Rr, tr, Wd, cPr, car, cnr, canr, Rs[cu], ts[cu],
                             ws[cu], vs[cu], Rj, R2, Gs[cu], fs[cu], wr, gs[cu], s33, s3)
            hessian(m, fo, xs[cu], qc, qpred, ta, Rs[cu], ts[cu], ws[cu], vs[cu], Gs[cu], fs[cu], Wd, cPr, car, cnr,
                    canr, K, Z, F, Xk, H, D, s33, s3, s36)
            mu, limit, gnorm = mu0, math.inf, _measure(gs[cu], D)
        for _ in range(max_iter):
            if gnorm < tol:
                conv = True
                break
            g = gs[cu]
            ok = _damped_step(H, D, mu, g, Af, dx, piv)
            length2 = _length2(dx, D)
            while ok and length2 > limit and math.isfinite(length2) and mu < _MU_MAX:  # after a rejection (lm.py)
                mu = min(mu * _MU_GROW, _MU_MAX)
                ok = _damped_step(H, D, mu, g, Af, dx, piv)
                length2 = _length2(dx, D)
            gdx = 0.0
            for j in range(nv):
                gdx += g[j] * dx[j]
            pred = 0.5 * (mu * length2 - gdx)  # −(g·δ + ½ δᵀHδ) with Hδ = −g − μDδ (optim/lm.py _trial_step)
            if not ok:
                for j in range(nv):
                    dx[j] = 0.0
            nx = 1 - cu
            integrate(m, xs[cu], dx, xs[nx])
            E_try = _energy_grad(m, fo, xs[nx], qc, qpred, ta, A, bt, Rr, tr, Wd, cPr, car, cnr, canr, Rs[nx],
                                 ts[nx], ws[nx], vs[nx], Rj, R2, Gs[nx], fs[nx], wr, gs[nx], s33, s3)
            band = _EPS_BAND * eps * max(abs(E), abs(E_try))
            accept = ok and ((E_try < E) or ((E_try <= E + band) and (pred <= band)))
            iters += 1
            if accept:
                mu = mu / _MU_SHRINK
            else:
                mu = min(max(mu * _MU_GROW, _MU_AFTER_REJECT), _MU_MAX)
            limit = math.inf if accept or not ok else _STEP_SHRINK * _STEP_SHRINK * length2
            if accept:  # (a rejected trial's gradient is never measured: it is dropped)
                gn_try = _measure(gs[nx], D)
                if gn_try >= tol:
                    hessian(m, fo, xs[nx], qc, qpred, ta, Rs[nx], ts[nx], ws[nx], vs[nx], Gs[nx], fs[nx], Wd, cPr,
                            car, cnr, canr, K, Z, F, Xk, H, D, s33, s3, s36)
                    gn_try = _measure(gs[nx], D)
                cu, E, gnorm = nx, E_try, gn_try
    conv = gnorm < tol
    for k in range(nq):
        out_q[r, k] = xs[cu, k]
    out_it[r], out_gn[r], out_conv[r] = iters, gnorm, conv
    if want != 0:
        difference(m, qc, xs[cu], dv)
        for k in range(nv):
            qdr[k] = dv[k] / dt
            out_qd[r, k] = qdr[k]
        Rc_, tc_, wc_, vc_ = Rs[cu], ts[cu], ws[cu], vs[cu]
        for i in range(L):
            for a in range(3):
                out_t[r, i, a] = tc_[i, a]
                for b in range(3):
                    out_R[r, i, a, b] = Rc_[i, a, b]
        for k in range(nv):
            for a in range(3):
                out_w[r, k, a] = wc_[k, a]
                out_v[r, k, a] = vc_[k, a]
        energy_terms_row(m, fo, act, gear, xs[cu], qdr, Rc_, tc_, wc_, vc_, K, Xk, H, Af, xv, ev, zv, piv, s33,
                         s3, trow)
        for k in range(N_TERMS):
            out_terms[r, k] = trow[k]
        if fl[F_CONTACT]:
            contact_update(m, fo, Rc_, tc_, cPr, car, cnr, canr, r, out_cP, out_cact, out_cnorm, out_canc,
                           out_force, s3[3], s33[3], s3[4])
    return cu


@njit(cache=True, parallel=True, nogil=True)
def step_batch(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
               sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature, sph_p0,
               sph_r, gravity, drag, chart, flags, scalars, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear,
               want, out_qd, out_R, out_t, out_w, out_v, TERMS, out_force, nchunks):
    """IT.shape[0] steps (substeps under the same torques tau) of the batch, split into ``nchunks`` contiguous
    chunks run by the thread pool in one parallel region (:func:`step_rows`: scratch once per chunk; the state in
    Q (3, B, nq), the contact memory in CP, CACT, CNORM, CANC (2, B, …); the finish outputs the last substep's).

    Arguments are the fields of KernelModel and KernelForces, flat: numba types plain arrays in C at dispatch,
    NamedTuples field by field in Python (tens of microseconds per call)."""
    m = KernelModel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                    sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature,
                    sph_p0, sph_r)
    fo = KernelForces(gravity, drag, chart, flags, scalars)
    B = Q.shape[1]
    for k in prange(nchunks):
        step_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w,
                  out_v, TERMS, out_force, k * B // nchunks, (k + 1) * B // nchunks)


@njit(cache=True, nogil=True)
def step_batch_serial(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q,
                      lin_v, sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2,
                      armature, sph_p0, sph_r, gravity, drag, chart, flags, scalars, Q, tau, CP, CACT, CNORM, CANC,
                      IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w, out_v, TERMS, out_force):
    """:func:`step_batch` on the calling thread (small batches: a pool launch costs more than the step)."""
    m = KernelModel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                    sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature,
                    sph_p0, sph_r)
    fo = KernelForces(gravity, drag, chart, flags, scalars)
    step_rows(m, fo, Q, tau, CP, CACT, CNORM, CANC, IT, GN, CONV, act, gear, want, out_qd, out_R, out_t, out_w,
              out_v, TERMS, out_force, 0, Q.shape[1])


@njit(cache=True, nogil=True)
def kinematics_batch(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                     sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature,
                     sph_p0, sph_r, q, R, t, w, v):
    """Forward kinematics of every row of q (B, nq) into R (B, L, 3, 3), t (B, L, 3), w, v (B, nv, 3)."""
    m = KernelModel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                    sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature,
                    sph_p0, sph_r)
    L = mass.shape[0]
    Rj, R2 = np.empty((L, 3, 3), q.dtype), np.empty((L, 3, 3), q.dtype)
    for r in range(q.shape[0]):
        forward_kinematics(m, q[r], R[r], t[r], w[r], v[r], Rj, R2)


@njit(cache=True, nogil=True)
def finish_batch(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                 sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature, sph_p0,
                 sph_r, gravity, drag, chart, flags, scalars, act, gear, q_prev, q, out_qd, out_R, out_t, out_w,
                 out_v, out_terms):
    """What :func:`step_rows` leaves with ``want`` for a state that did not come out of a step (a reset, a
    restore): velocity (q ⊖ q_prev)/Δt (B, nv), kinematics of q and the energy terms (B, N_TERMS) — the same
    compiled code, so a row's values do not depend on which of the two computed them."""
    m = KernelModel(jtype, parent, order, q_start, v_start, dof_link, lim_on, lim_q, quat_q, quat_v, lin_q, lin_v,
                    sph_link, hess_weight, lim_lo, lim_hi, mass, c, S, place_R, place_t, axis1, axis2, armature,
                    sph_p0, sph_r)
    fo = KernelForces(gravity, drag, chart, flags, scalars)
    dtype = q.dtype
    L, nv = mass.shape[0], dof_link.shape[0]
    Rj, R2 = np.empty((L, 3, 3), dtype), np.empty((L, 3, 3), dtype)
    K, Xk = np.empty((L, 6, 6), dtype), np.empty((nv, 6), dtype)
    M, A = np.empty((nv, nv), dtype), np.empty((nv, nv), dtype)
    dv, piv = np.empty(nv, dtype), np.empty(nv, np.int64)
    s33, s3 = np.empty((8, 3, 3), dtype), np.empty((8, 3), dtype)
    xv, ev, zv, qdr, trow = _finish_scratch(m, dtype)
    _finish_rows(m, fo, act, gear, q_prev, q, out_qd, out_R, out_t, out_w, out_v, out_terms, Rj, R2, K, Xk, M, A, dv,
                 piv, s33, s3, xv, ev, zv, qdr, trow)


@njit(**ROW_LOOP_OPTIONS)
def _finish_rows(m, fo, act, gear, q_prev, q, out_qd, out_R, out_t, out_w, out_v, out_terms, Rj, R2, K, Xk, M, A, dv,
                 piv, s33, s3, xv, ev, zv, qdr, trow):
    """:func:`finish_batch`'s row loop on its scratch (:data:`ROW_LOOP_OPTIONS`, see :func:`_run_rows`)."""
    nv = m.dof_link.shape[0]
    dt = fo.scalars[S_DT]
    for r in range(q.shape[0]):
        difference(m, q_prev[r], q[r], dv)
        for k in range(nv):
            qdr[k] = dv[k] / dt
            out_qd[r, k] = qdr[k]
        forward_kinematics(m, q[r], out_R[r], out_t[r], out_w[r], out_v[r], Rj, R2)
        energy_terms_row(m, fo, act, gear, q[r], qdr, out_R[r], out_t[r], out_w[r], out_v[r], K, Xk, M, A, xv, ev,
                         zv, piv, s33, s3, trow)
        for k in range(N_TERMS):
            out_terms[r, k] = trow[k]
