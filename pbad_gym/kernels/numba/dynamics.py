"""Mass matrix and the divergence guard's energy terms of one row (dynamics.py crba;
envs/divergence.py energy_terms_reference)."""
from __future__ import annotations

import math

import numpy as np

from .constants import T_ACTUATION, T_COM, T_CONTACT, T_KINETIC, T_LIMITS
from .jit import jitable
from .joints import chart_quadratic
from .linalg import solve_damped
from .spatial import _inertia_form, twist_products


@jitable
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
    twist_products(m.hess_weight, w, v, Xk, M)
    for k in range(nv):
        M[k, k] += m.armature[k]


@jitable
def energy_terms_row(m, fo, act, gear, q, qd, R, t, w, v, K, Xk, M, A, x, e, zero, piv, s33, s3, out):
    """The divergence guard's measure of one state (envs/divergence.py; its reference energy_terms_reference) into
    out (N_TERMS,): kinetic energy ½q̇ᵀMq̇ [J], the actuation coefficient c = √(Σ_ab gear_a gear_b |M⁻¹|_ab)
    over the DOFs ``act`` (n_act,) with ``gear`` (n_act,) [√J/s], joint energy (limits, springs) [J], contact
    normal energy [J]
    and the centre of mass (3,) [m]. q (nq,), qd (nv,), (R, t, w, v) the kinematics of q. M⁻¹'s entries come
    from one Cholesky factor L of M, (M⁻¹)_ab = (L⁻¹e_a)·(L⁻¹e_b) (the columns of M⁻¹ by LU with pivoting, as
    LAPACK's inverse, if M is not positive definite); M is overwritten."""
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
    if fo.has_limits:
        for j in range(m.lim_on.shape[0]):
            if m.lim_on[j]:
                qi = q[m.lim_q[j]]
                over = max(0.0, qi - m.lim_hi[j]) - max(0.0, m.lim_lo[j] - qi)
                vl += over * over
        vl = 0.5 * fo.limit_k * vl
    if fo.has_spring:  # e is free scratch here: the spring's gradient goes there and is dropped
        vl += chart_quadratic(m.lin_q, m.lin_v, m.quat_q, m.quat_v, q, fo.spring_rest, fo.spring, e)
    out[T_LIMITS] = vl
    vc = 0.0
    if fo.has_contact:
        h, p0 = fo.height, m.contact_p0
        for s_ in range(m.contact_link.shape[0]):
            l = m.contact_link[s_]
            pz = t[l, 2] + (R[l, 2, 0] * p0[s_, 0] + R[l, 2, 1] * p0[s_, 1] + R[l, 2, 2] * p0[s_, 2])
            d = max(0.0, m.contact_r[s_] - (pz - h))
            vc += d * d
        vc = 0.5 * fo.contact_k * vc
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


@jitable
def terms_scratch(m, dtype):
    """Scratch of :func:`energy_terms_row` beyond the mass matrix's: x, e, zero (nv,)."""
    nv = m.dof_link.shape[0]
    return np.empty(nv, dtype), np.empty(nv, dtype), np.empty(nv, dtype)

