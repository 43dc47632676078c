"""The joint-space terms of the step energy: actuation, limits, damping and armature, with their Hessians
(energies/actuation.py, energies/joints.py)."""
from __future__ import annotations

from .algebra import quat_mul
from .jit import inlined, inlined_by_llvm, jitable


@jitable
def _chart_column(x, rw, rx, ry, rz):
    """Column x of J = w_r 1 + [vec r]× (rows (rw, −rz, ry), (rz, rw, −rx), (−ry, rx, rw)), chosen by branches
    (no runtime index into a tuple, which the GPU target would spill to local memory)."""
    if x == 0:
        return rw, rz, -ry
    if x == 1:
        return -rz, rw, rx
    return ry, -rx, rw


@jitable
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


@jitable
def chart_quadratic(lin_q, lin_v, quat_q, quat_v, q, qref, b, g):
    """½ Σ b_j d_j² with d = q ⊖ q_ref in the actuation chart (energies/joints.py chart_quadratic; b: a row of
    StepConstants.chart, damping b/Δt or armature a/Δt², or the spring stiffness): value; adds the gradient to g.
    Takes the coordinate maps, not the BodyArrays (see :func:`_drag_link`)."""
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


@jitable
def chart_quadratic_hessian(lin_v, quat_q, quat_v, q, qref, b, H):
    """Adds the Hessian of :func:`chart_quadratic` to H."""
    for i in range(lin_v.shape[0]):
        j = lin_v[i]
        H[j, j] += b[j]
    for i in range(quat_q.shape[0]):
        a, v0 = quat_q[i], quat_v[i]
        rw, rx, ry, rz = quat_mul(qref[a], -qref[a + 1], -qref[a + 2], -qref[a + 3], q[a], q[a + 1], q[a + 2],
                                  q[a + 3])
        b0, b1, b2 = b[v0], b[v0 + 1], b[v0 + 2]
        _chart_quat_hessian(H, v0, b0, b1, b2, rw, rx, ry, rz, b0 * (2.0 * rx), b1 * (2.0 * ry), b2 * (2.0 * rz))


@inlined_by_llvm
def _limit_depth(m, fo, j, q, qref, qpred, k_l, c_l):
    """How far DOF j's coordinate is past its range (signed, 0 inside), with limit damping c_l > 0 the clamped
    Kelvin-Voigt depth past its shift s0 = p_k·c/(kΔt + c) of q_k's depth p_k; with trapezoidal springs
    (fo.limit_trap) past the shifts of energies/penalty.py, q_{k−1} = 2q_k − qpred on this linear coordinate."""
    a = m.lim_q[j]
    qi, lo, hi = q[a], m.lim_lo[j], m.lim_hi[j]
    if fo.limit_trap != 0:
        qk = qref[a]
        qb = 2 * qk - qpred[a]
        kt = 0.25 * k_l + c_l
        uk, lk = max(0.0, qk - hi), max(0.0, lo - qk)
        ub, lb = max(0.0, qb - hi), max(0.0, lo - qb)
        su = (c_l * uk - k_l * (0.5 * uk + 0.25 * ub)) / kt
        sl = (c_l * lk - k_l * (0.5 * lk + 0.25 * lb)) / kt
        return max(0.0, qi - hi - su) - max(0.0, lo - qi - sl)
    over = max(0.0, qi - hi) - max(0.0, lo - qi)
    if c_l > 0:
        qk = qref[a]
        p_k = max(0.0, qk - hi) + max(0.0, lo - qk)
        shift = p_k * c_l / (k_l + c_l) if p_k > 0 else 0.0  # the same 0 without a division
        over = max(0.0, over - shift) - max(0.0, -over - shift)
    return over


@inlined
def joint_terms(m, fo, q, qref, qpred, tau, g):
    """Value of the joint terms (actuation, limits, damping, armature, springs); adds their gradient to g."""
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
    if fo.has_limits:
        k_l, c_l = fo.limit_k, fo.limit_d / fo.dt
        k_lc = (0.25 * k_l if fo.limit_trap != 0 else k_l) + c_l
        vl = 0.0
        for j in range(m.lim_on.shape[0]):
            if m.lim_on[j]:
                over = _limit_depth(m, fo, j, q, qref, qpred, k_l, c_l)
                vl += over * over
                g[j] += k_lc * over
        val += 0.5 * k_lc * vl
    if fo.has_damping:
        val += chart_quadratic(m.lin_q, m.lin_v, m.quat_q, m.quat_v, q, qref, fo.chart[0], g)
    if fo.has_armature:
        val += chart_quadratic(m.lin_q, m.lin_v, m.quat_q, m.quat_v, q, qpred, fo.chart[1], g)
    if fo.has_spring:
        val += chart_quadratic(m.lin_q, m.lin_v, m.quat_q, m.quat_v, q, fo.spring_rest, fo.spring, g)
    return val


@inlined
def joint_hessian(m, fo, q, qref, qpred, tau, H):
    """Adds the Hessian of :func:`joint_terms` to H (each entry's additions in the order joint_terms made them
    when it also built the Hessian)."""
    for i in range(m.quat_q.shape[0]):
        a, v0 = m.quat_q[i], m.quat_v[i]
        rw, rx, ry, rz = quat_mul(qref[a], -qref[a + 1], -qref[a + 2], -qref[a + 3], q[a], q[a + 1], q[a + 2],
                                  q[a + 3])
        dg = 0.5 * (tau[v0] * rx + tau[v0 + 1] * ry + tau[v0 + 2] * rz)
        for k in range(3):
            H[v0 + k, v0 + k] += dg
    if fo.has_limits:
        k_l, c_l = fo.limit_k, fo.limit_d / fo.dt
        k_lc = (0.25 * k_l if fo.limit_trap != 0 else k_l) + c_l
        for j in range(m.lim_on.shape[0]):
            if m.lim_on[j] and _limit_depth(m, fo, j, q, qref, qpred, k_l, c_l) != 0:
                H[j, j] += k_lc
    if fo.has_damping:
        chart_quadratic_hessian(m.lin_v, m.quat_q, m.quat_v, q, qref, fo.chart[0], H)
    if fo.has_armature:
        chart_quadratic_hessian(m.lin_v, m.quat_q, m.quat_v, q, qpred, fo.chart[1], H)
    if fo.has_spring:
        chart_quadratic_hessian(m.lin_v, m.quat_q, m.quat_v, q, fo.spring_rest, fo.spring, H)

