"""Actuation −τᵀ(q ⊖ q_k): the work of a generalised force held over the step.

Linear coordinates use q − q_k exactly. Quaternion joints use the chart d = 2·vec(q_k⁻¹ q), which equals the
rotation vector to second order and has closed-form derivatives; τ on those DOFs is a torque in the joint's child
frame, as the baseline integrators read it. The chart is smooth along the iterates (no hemisphere flip: iterates
start next to q_k and move continuously), so LM sees a smooth energy.
"""
from __future__ import annotations

from ..arrays import xp_of
from ..kinematics import cross, quat_conj, quat_mul, skew
from ..kinematics.algebra import rowsum
from .base import JointTerms


def actuation_terms(body, q, q_ref, tau, derivatives=True):
    """Actuation energy for q (B, nq), reference q_ref (B, nq), tau (B, nv) -> JointTerms."""
    xp = xp_of(q, tau)
    lin_q, lin_v = body.lin_q, body.lin_v
    val = -rowsum(tau[:, lin_v] * (q[:, lin_q] - q_ref[:, lin_q]))  # fancy-indexed: column-major
    if len(body.quat_q):
        r = quat_mul(quat_conj(q_ref[:, body.quat_q]), q[:, body.quat_q])
        tq = tau[:, body.quat_v]
        val = val - 2 * rowsum(tq * r[..., 1:], (-1, -2))
    if not derivatives:
        return JointTerms(val)
    grad = -tau.copy()
    hess = xp.zeros(q.shape[:1] + (body.nv, body.nv), dtype=q.dtype)
    if len(body.quat_q):
        wr, vr = r[..., :1], r[..., 1:]
        grad[:, body.quat_v] = -(wr * tq - cross(vr, tq))
        diag = 0.5 * xp.sum(tq * vr, -1)  # ½ τ·vec(r) on each of the joint's 3 diagonal entries
        qv = body.quat_v
        hess[:, qv, qv] = diag[..., None]
    return JointTerms(val, grad, hess)


def actuation_trivialized_correction(body, q, q_ref, tau):
    """Antisymmetric part (B, nv, nv) that turns the actuation Hessian into the Jacobian of its trivialised
    gradient δ ↦ g(q ⊕ δ) on quaternion joints: ½[vec(r) × τ]× − ½ w_r [τ]×, r = q_k⁻¹ q (zero elsewhere)."""
    xp = xp_of(q, tau)
    out = xp.zeros(q.shape[:1] + (body.nv, body.nv), dtype=q.dtype)
    if len(body.quat_q):
        r = quat_mul(quat_conj(q_ref[:, body.quat_q]), q[:, body.quat_q])
        tq = tau[:, body.quat_v]
        blk = 0.5 * skew(cross(r[..., 1:], tq)) - 0.5 * r[..., :1, None] * skew(tq)
        qv = body.quat_v
        out[:, qv[:, :, None], qv[:, None, :]] = blk
    return out
