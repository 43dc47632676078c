"""Configuration space: q ⊕ dq, q1 ⊖ q0, q̇ of a velocity, quaternion normalisation (batch axis first)."""
from __future__ import annotations

from ..arrays import xp_of
from .algebra import matvec, quat_conj, quat_exp, quat_log, quat_mul, skew

def integrate(body, q, dq):
    """q ⊕ dq: q (B, nq), dq (B, nv) -> (B, nq). Linear coordinates add; quaternions compose on the right
    (q ⊗ exp(dq)), i.e. rotation increments are in the joint's child (body) frame."""
    xp = xp_of(q, dq)
    out = q.copy()
    out[:, body.lin_q] = q[:, body.lin_q] + dq[:, body.lin_v]
    if len(body.quat_q):
        qq = quat_mul(q[:, body.quat_q], quat_exp(dq[:, body.quat_v]))
        out[:, body.quat_q] = qq / xp.sqrt(xp.sum(qq * qq, -1, keepdims=True))
    return out


def difference(body, q0, q1):
    """q1 ⊖ q0 (B, nv): the increment dq with q0 ⊕ dq = q1 (exact quaternion log)."""
    xp = xp_of(q0, q1)
    out = xp.zeros(q0.shape[:-1] + (body.nv,), dtype=q0.dtype)
    out[:, body.lin_v] = q1[:, body.lin_q] - q0[:, body.lin_q]
    if len(body.quat_q):
        out[:, body.quat_v] = quat_log(quat_mul(quat_conj(q0[:, body.quat_q]), q1[:, body.quat_q]))
    return out


def qdot(body, q, v):
    """Time derivative of q (B, nq) for velocity v (B, nv) (quaternions: ½ q ⊗ (0, ω_body))."""
    xp = xp_of(q, v)
    out = xp.zeros_like(q)
    out[:, body.lin_q] = v[:, body.lin_v]
    if len(body.quat_q):
        w = v[:, body.quat_v]
        pure = xp.concatenate([xp.zeros_like(w[..., :1]), w], -1)
        out[:, body.quat_q] = 0.5 * quat_mul(q[:, body.quat_q], pure)
    return out


def normalize(body, q):
    """Copy of q with every quaternion normalised."""
    xp = xp_of(q)
    out = q.copy()
    if len(body.quat_q):
        qq = q[:, body.quat_q]
        out[:, body.quat_q] = qq / xp.sqrt(xp.sum(qq * qq, -1, keepdims=True))
    return out


def tangent_cotangent(body, q, c):
    """A cotangent c (B, nq) on configuration coordinates as one on the tangent space at q (B, nv): g with
    g·δ = c·(q ⊕ δ − q) to first order (quaternions: ½ vec(q* ⊗ c), the part of c along q dropping out)."""
    xp = xp_of(q, c)
    g = xp.zeros(q.shape[:-1] + (body.nv,), dtype=q.dtype)
    g[:, body.lin_v] = c[:, body.lin_q]
    if len(body.quat_q):
        g[:, body.quat_v] = 0.5 * quat_mul(quat_conj(q[:, body.quat_q]), c[:, body.quat_q])[..., 1:]
    return g


def coordinate_cotangent(body, q, g):
    """The inverse of :func:`tangent_cotangent` on the tangent plane: c (B, nq) from g (B, nv) at q (B, nq)
    (quaternions: 2 q ⊗ (0, g), orthogonal to q)."""
    xp = xp_of(q, g)
    c = xp.zeros_like(q)
    c[:, body.lin_q] = g[:, body.lin_v]
    if len(body.quat_q):
        w = g[:, body.quat_v]
        pure = xp.concatenate([xp.zeros_like(w[..., :1]), w], -1)
        c[:, body.quat_q] = 2.0 * quat_mul(q[:, body.quat_q], pure)
    return c


def difference_vjp(body, q0, q1, gbar):
    """Pull a cotangent gbar (B, nv) on q1 ⊖ q0 back to the tangent spaces of q0 and q1: (g0, g1) (B, nv) each.
    Linear coordinates: (−gbar, gbar). Quaternions, φ = log(q0* ⊗ q1): perturbing q1 ⊕ δ moves φ by Jr⁻¹(φ)δ and
    q0 ⊕ δ by −Jr⁻¹(φ)ᵀδ, with Jr⁻¹(φ) = 1 + ½[φ]× + (1/θ² − (1 + cos θ)/(2θ sin θ))[φ]×², θ = |φ|."""
    xp = xp_of(q0, q1, gbar)
    g0, g1 = xp.zeros_like(gbar), xp.zeros_like(gbar)
    g0[:, body.lin_v], g1[:, body.lin_v] = -gbar[:, body.lin_v], gbar[:, body.lin_v]
    if len(body.quat_q):
        phi = quat_log(quat_mul(quat_conj(q0[:, body.quat_q]), q1[:, body.quat_q]))
        th = xp.sqrt(xp.sum(phi * phi, -1))[..., None, None]
        small = th < 1e-4
        ths = xp.where(small, 1.0, th)
        k = xp.where(small, 1.0 / 12.0 + th * th / 720.0,
                     1.0 / (ths * ths) - (1.0 + xp.cos(ths)) / (2.0 * ths * xp.sin(ths)))
        S = skew(phi)
        Jinv = xp.eye(3, dtype=phi.dtype) + 0.5 * S + k * (S @ S)
        gb = gbar[:, body.quat_v]
        g1[:, body.quat_v] = matvec(xp.swapaxes(Jinv, -1, -2), gb)
        g0[:, body.quat_v] = -matvec(Jinv, gb)
    return g0, g1
