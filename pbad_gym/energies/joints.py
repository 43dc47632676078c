"""Joint-space terms: one-sided quadratic limits and joint damping.

- limits: k/2·(max(0, q − hi)² + max(0, lo − q)²) on the DOFs whose joint has a ``range`` [rad or m];
- damping: b/(2Δt)·‖q ⊖ q_k‖² per DOF with the joint's ``damping`` b [N m s/rad] — a dissipative term whose
  force is −b·q̇ with q̇ = (q ⊖ q_k)/Δt. Quaternion joints use the actuation chart d = 2·vec(q_k⁻¹ q).
"""
from __future__ import annotations

import numpy as np

from ..backend import xp_of
from ..kinematics import quat_conj, quat_mul, skew
from .base import JointTerms


def limit_arrays(body):
    """(dof index (n,), lo (n,), hi (n,)) of the limited DOFs (linear coordinates only)."""
    idx, lo, hi = [], [], []
    for i, lk in enumerate(body.links):
        if lk.joint.range is not None:
            idx += list(range(body.v_start[i], body.v_start[i] + lk.joint.nv))
            lo += list(lk.joint.range[0])
            hi += list(lk.joint.range[1])
    return np.array(idx, int), np.array(lo, float), np.array(hi, float)


def limit_terms(body, q, stiffness, derivatives=True):
    """Joint-limit penalty [J] with ``stiffness`` [N m/rad] at q (B, nq) -> JointTerms."""
    xp = xp_of(q)
    idx, lo, hi = limit_arrays(body)
    qi = q[:, _q_of_v(body, idx)]
    over = xp.maximum(0.0, qi - xp.asarray(hi, dtype=q.dtype)) - xp.maximum(0.0, xp.asarray(lo, dtype=q.dtype) - qi)
    val = 0.5 * stiffness * xp.sum(over * over, -1)
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


def damping_terms(body, q, q_ref, b, dt, derivatives=True):
    """Joint damping b/(2Δt)‖q ⊖ q_k‖² for b (nv,) [N m s/rad], step ``dt`` [s] -> JointTerms."""
    xp = xp_of(q)
    b = xp.asarray(b, dtype=q.dtype) / dt
    d = xp.zeros((q.shape[0], body.nv), dtype=q.dtype)
    d[:, body.lin_v] = q[:, body.lin_q] - q_ref[:, body.lin_q]
    if len(body.quat_q):
        r = quat_mul(quat_conj(q_ref[:, body.quat_q]), q[:, body.quat_q])
        d[:, body.quat_v] = 2 * r[..., 1:]
    val = 0.5 * xp.sum(b * d * d, -1)
    if not derivatives:
        return JointTerms(val)
    grad = b * d
    hess = xp.zeros((q.shape[0], body.nv, body.nv), dtype=q.dtype)
    lin = body.lin_v
    hess[:, lin, lin] = b[lin]
    if len(body.quat_q):
        wr, vr = r[..., :1], r[..., 1:]
        qv = body.quat_v
        bq = b[qv]  # (n, 3)
        # chart Jacobian J = w 1 + [v]× (so d(δ) ≈ d + Jδ); its second-order term is −|δ|²/4·v
        J = wr[..., None] * xp.eye(3, dtype=q.dtype) + skew(vr)
        dq = d[:, qv]
        grad[:, qv] = (xp.swapaxes(J, -1, -2) @ (bq * dq)[..., None])[..., 0]
        blk = xp.swapaxes(J, -1, -2) @ (bq[..., :, None] * J)
        blk = blk - 0.5 * xp.sum(bq * dq * vr, -1)[..., None, None] * xp.eye(3, dtype=q.dtype)
        hess[:, qv[:, :, None], qv[:, None, :]] = blk
    return JointTerms(val, grad, hess)
