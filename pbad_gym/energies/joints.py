"""Joint-space terms: one-sided quadratic limits, joint damping and armature.

- limits: k/2·(max(0, q − hi)² + max(0, lo − q)²) on the DOFs whose joint has a ``range`` [rad or m];
- limit damping (off by default): the limit torque k·p + c·ṗ of a Kelvin-Voigt bound, clamped at 0 so that a
  limit never holds a joint back as it leaves, with p = max(0, q − hi) + max(0, lo − q) the depth past the bound
  and ṗ = (p − p_k)/Δt. Its energy is (k + c/Δt)/2·max(0, p − s0)² with s0 = p_k·c/(kΔt + c) (convex, C¹); it
  dissipates the energy of a joint hitting its limit, which the undamped penalty hands back;
- damping: b/(2Δt)·‖q ⊖ q_k‖² per DOF with the joint's ``damping`` b [N m s/rad] — a dissipative term whose
  force is −b·q̇ with q̇ = (q ⊖ q_k)/Δt. Quaternion joints use the actuation chart d = 2·vec(q_k⁻¹ q);
- spring (off by default): k/2·‖q ⊖ q_rest‖² per DOF with stiffness k [N m/rad or N/m] about a rest configuration
  q_rest (MJCF's joint ``stiffness`` and ``springref``), in the same chart — a potential;
- armature: a/(2Δt²)·‖q ⊖ (q_k ⊕ (q_k ⊖ q_{k−1}))‖² per DOF with the joint's rotor inertia a — the joint-space
  counterpart of the inertia term (q − 2q_k + q_{k−1} on linear coordinates), whose Hessian a/Δt² is the
  armature's share of M/Δt². It is the damping form measured from the constant-velocity prediction with b = a/Δt.
"""
from __future__ import annotations

import numpy as np

from ..arrays import xp_of
from ..kinematics import quat_conj, quat_mul, skew
from ..kinematics.algebra import rowsum
from .base import JointTerms
from .penalty import DEFAULT_SPRINGS, step_stiffness, trapezoidal_shift


def limit_arrays(body):
    """(dof index (n,), lo (n,), hi (n,)) of the limited DOFs (linear coordinates only)."""
    idx, lo, hi = [], [], []
    for i, lk in enumerate(body.links):
        if lk.joint.range is not None:
            idx += list(range(body.v_start[i], body.v_start[i] + lk.joint.nv))
            lo += list(lk.joint.range[0])
            hi += list(lk.joint.range[1])
    return np.array(idx, int), np.array(lo, float), np.array(hi, float)


def limit_terms(body, q, stiffness, derivatives=True, q_ref=None, damping=0.0, dt=None, q_pred=None,
                springs=DEFAULT_SPRINGS):
    """Joint-limit penalty [J] with ``stiffness`` [N m/rad] at q (B, nq) -> JointTerms; with q_k = ``q_ref``
    (B, nq), ``damping`` c > 0 [N m s/rad] and the step ``dt`` [s] its clamped Kelvin-Voigt form (module
    docstring). springs "trapezoidal" (energies/penalty.py; with q_ref, dt and the step's prediction q_pred =
    q_k ⊕ (q_k ⊖ q_{k−1}) (B, nq), from which q_{k−1} = 2q_k − q_pred on the limited, linear coordinates): the
    spring part averaged over the step as Newmark's average acceleration."""
    xp = xp_of(q)
    idx, lo, hi = limit_arrays(body)
    lo, hi = xp.asarray(lo, dtype=q.dtype), xp.asarray(hi, dtype=q.dtype)
    cols = _q_of_v(body, idx)
    qi = q[:, cols]
    if springs == "trapezoidal":
        qk = q_ref[:, cols]
        qb = 2 * qk - q_pred[:, cols]
        side = lambda x: (xp.maximum(0.0, x - hi), xp.maximum(0.0, lo - x))  # noqa: E731  (upper, lower depths)
        (uk, lk), (ub, lb) = side(qk), side(qb)
        su = trapezoidal_shift(uk, ub, stiffness, damping, dt)
        sl = trapezoidal_shift(lk, lb, stiffness, damping, dt)
        over = xp.maximum(0.0, qi - hi - su) - xp.maximum(0.0, lo - qi - sl)
        stiffness = step_stiffness(stiffness, damping, dt, springs)
    else:
        over = xp.maximum(0.0, qi - hi) - xp.maximum(0.0, lo - qi)
        if q_ref is not None and damping > 0:
            qk = q_ref[:, cols]
            c = damping / dt
            shift = (xp.maximum(0.0, qk - hi) + xp.maximum(0.0, lo - qk)) * (c / (stiffness + c))
            over = xp.maximum(0.0, over - shift) - xp.maximum(0.0, -over - shift)
            stiffness = stiffness + c
    val = 0.5 * stiffness * rowsum(over * over)  # column-major (fancy index)
    if not derivatives:
        return JointTerms(val)
    B = q.shape[0]
    grad = xp.zeros((B, body.nv), dtype=q.dtype)
    hess = xp.zeros((B, body.nv, body.nv), dtype=q.dtype)
    grad[:, idx] = stiffness * over
    hess[:, idx, idx] = stiffness * (over != 0)
    return JointTerms(val, grad, hess)


def _q_of_v(body, v_idx):
    """q index of linear-coordinate DOFs."""
    pos = {int(v): int(qq) for v, qq in zip(body.lin_v, body.lin_q)}
    return np.array([pos[int(v)] for v in v_idx], int)


def damping_coefficients(body):
    """Per-DOF damping b (nv,) from the joints."""
    return np.concatenate([np.full(lk.joint.nv, lk.joint.damping) for lk in body.links])


def joint_chart(body, q_ref, q):
    """Chart coordinates of q around q_k = q_ref: d (B, nv) with q − q_k on linear coordinates and 2·vec(q_k⁻¹ q)
    on quaternion joints, and the quaternion joints' relative rotations r = q_k⁻¹ q (B, n_quat, 4) (None without
    quaternion joints). On a quaternion joint d(q ⊕ δ) ≈ d + (w_r 1 + [vec r]×) δ − |δ|²/4·vec r."""
    xp = xp_of(q)
    d = xp.zeros((q.shape[0], body.nv), dtype=q.dtype)
    d[:, body.lin_v] = q[:, body.lin_q] - q_ref[:, body.lin_q]
    r = None
    if len(body.quat_q):
        r = quat_mul(quat_conj(q_ref[:, body.quat_q]), q[:, body.quat_q])
        d[:, body.quat_v] = 2 * r[..., 1:]
    return d, r


def chart_jacobian(body, r, B, dtype, xp):
    """∂d/∂δ (B, nv, nv): identity on linear coordinates, w_r 1 + [vec r]× on quaternion joints."""
    J = xp.broadcast_to(xp.eye(body.nv, dtype=dtype), (B, body.nv, body.nv)).copy()
    if r is not None:
        qv = body.quat_v
        J[:, qv[:, :, None], qv[:, None, :]] = r[..., :1, None] * xp.eye(3, dtype=dtype) + skew(r[..., 1:])
    return J


def chart_quadratic(body, q, q_ref, b, derivatives=True):
    """½ Σ_j b_j d_j² with d = q ⊖ q_ref (:func:`joint_chart`) for q, q_ref (B, nq) and b (nv,) -> JointTerms: the
    form of joint damping, armature and springs."""
    xp = xp_of(q)
    d, r = joint_chart(body, q_ref, q)
    val = 0.5 * rowsum(b * d * d)
    if not derivatives:
        return JointTerms(val)
    J = chart_jacobian(body, r, q.shape[0], q.dtype, xp)
    grad = (xp.swapaxes(J, -1, -2) @ (b * d)[..., None])[..., 0]
    hess = xp.swapaxes(J, -1, -2) @ (b[:, None] * J)
    if r is not None:  # second-order term of the chart: −½ (Σ b d·vec r) on each quaternion joint's diagonal
        qv = body.quat_v
        hess[:, qv, qv] -= 0.5 * xp.sum((b * d)[:, qv] * r[..., 1:], -1)[..., None]
    return JointTerms(val, grad, hess)


def damping_terms(body, q, q_ref, b, dt, derivatives=True):
    """Joint damping b/(2Δt)‖q ⊖ q_k‖² for b (nv,) [N m s/rad], step ``dt`` [s] -> JointTerms (chart d of
    :func:`joint_chart` on quaternion joints)."""
    return chart_quadratic(body, q, q_ref, xp_of(q).asarray(b, dtype=q.dtype) / dt, derivatives)


def spring_terms(body, q, rest, stiffness, derivatives=True):
    """Joint springs k/2·‖q ⊖ q_rest‖² at q (B, nq) for a rest configuration ``rest`` (nq,) and ``stiffness`` k
    (nv,) [N m/rad or N/m] -> JointTerms [J]."""
    xp = xp_of(q)
    rest = xp.broadcast_to(xp.asarray(rest, dtype=q.dtype), q.shape)
    return chart_quadratic(body, q, rest, xp.asarray(stiffness, dtype=q.dtype), derivatives)


def joint_potential(body, forces, q):
    """The energy [J] (B,) stored in the joints at q (B, nq): the limit penalty (without its damping) and the
    springs of the ForceModel ``forces``; zeros when it has neither."""
    xp = xp_of(q)
    out = xp.zeros(q.shape[0], dtype=q.dtype)
    if forces.limit_stiffness > 0:
        out = out + limit_terms(body, q, forces.limit_stiffness, derivatives=False).value
    if forces.has_spring:
        out = out + spring_terms(body, q, forces.spring_rest, forces.spring, derivatives=False).value
    return out


def armature_terms(body, q, q_pred, armature, dt, derivatives=True):
    """Armature inertia a/(2Δt²)·‖q ⊖ q_pred‖² for a (nv,) [kg m² or kg] around the constant-velocity prediction
    q_pred = q_k ⊕ (q_k ⊖ q_{k−1}) (B, nq), step ``dt`` [s] -> JointTerms."""
    xp = xp_of(q)
    return damping_terms(body, q, q_pred, xp.asarray(armature, dtype=q.dtype) / dt, dt, derivatives)
