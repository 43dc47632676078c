"""Small batched vector algebra and rotations (hand-written: np.cross / einsum are slow on tiny trailing axes).

All functions work on the last axes and take the array module from their inputs.
"""
from __future__ import annotations

import numpy as np

from ..arrays import xp_of

_P1, _P2 = np.array([1, 2, 0]), np.array([2, 0, 1])


def cross(a, b):
    """Cross product over the last axis (…, 3) (cyclic-permutation form: fewest array calls)."""
    xp = xp_of(a, b)
    p1, p2 = (_P1, _P2) if xp is np else (xp.asarray(_P1), xp.asarray(_P2))
    a, b = xp.asarray(a), xp.asarray(b)
    return a.take(p1, -1) * b.take(p2, -1) - a.take(p2, -1) * b.take(p1, -1)  # methods skip numpy's wrappers


def skew(w):
    """[w]× (…, 3, 3) from w (…, 3)."""
    xp = xp_of(w)
    out = xp.zeros(w.shape + (3,), dtype=w.dtype)
    out[..., 0, 1], out[..., 0, 2], out[..., 1, 2] = -w[..., 2], w[..., 1], -w[..., 0]
    out[..., 1, 0], out[..., 2, 0], out[..., 2, 1] = w[..., 2], -w[..., 1], w[..., 0]
    return out


def rowsum(x, axis=-1):
    """x summed over ``axis`` (an int or a tuple of trailing axes) with bits that depend on each row's values
    only. NumPy sums a contiguous axis pairwise (8 partial sums from 8 terms on) but a strided one term by term,
    and which one it gets depends on the memory layout (a fancy index along axis 1 gives a column-major copy) and
    on the batch size (a batch of 1 makes any layout contiguous): a C-contiguous copy fixes the order."""
    return xp_of(x).ascontiguousarray(x).sum(axis)


def matvec(m, v):
    """m @ v over the last axes: (…, n, n) x (…, n) -> (…, n), one BLAS product per matrix whatever the batch
    size, so each row's bits depend on its own m and v only (column sums above a total size, as before, gave a
    row other bits in a larger batch)."""
    return (m @ v[..., None])[..., 0]


def axis_angle(axis, angle):
    """Rotation matrices exp(angle [axis]×): axis (…, 3) unit, angle (…,) -> (…, 3, 3) (Rodrigues)."""
    xp = xp_of(axis, angle)
    c, s = xp.cos(angle)[..., None, None], xp.sin(angle)[..., None, None]
    outer = axis[..., :, None] * axis[..., None, :]
    eye = xp.eye(3, dtype=angle.dtype)
    return c * eye + s * skew(axis) + (1 - c) * outer


def quat_to_rot(q):
    """Rotation matrices from quaternions (w, x, y, z) (…, 4) -> (…, 3, 3); q need not be normalised."""
    xp = xp_of(q)
    q = q / xp.sqrt(xp.sum(q * q, axis=-1, keepdims=True))
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return xp.stack([
        xp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        xp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        xp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


def quat_mul(a, b):
    """Hamilton product a ⊗ b of (…, 4) quaternions (w, x, y, z)."""
    xp = xp_of(a, b)
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    return xp.concatenate([aw * bw - xp.sum(av * bv, -1, keepdims=True), aw * bv + bw * av + cross(av, bv)], -1)


def quat_conj(q):
    """Conjugate (inverse for unit quaternions)."""
    xp = xp_of(q)
    return xp.concatenate([q[..., :1], -q[..., 1:]], -1)


def quat_exp(phi):
    """Unit quaternion of the rotation vector phi (…, 3) [rad]."""
    xp = xp_of(phi)
    th = xp.sqrt(xp.sum(phi * phi, -1, keepdims=True))
    small = th < 1e-8
    half = 0.5 * th
    # sin(θ/2)/θ with its series near 0
    k = xp.where(small, 0.5 - th * th / 48.0, xp.sin(half) / xp.where(small, 1.0, th))
    return xp.concatenate([xp.cos(half), k * phi], -1)


def quat_log(q):
    """Rotation vector (…, 3) of a unit quaternion (…, 4), on the shortest arc (angle in [0, π])."""
    xp = xp_of(q)
    q = xp.where(q[..., :1] < 0, -q, q)
    vn = xp.sqrt(xp.sum(q[..., 1:] ** 2, -1, keepdims=True))
    ang = 2.0 * xp.arctan2(vn, q[..., :1])
    small = vn < 1e-8
    k = xp.where(small, 2.0 / xp.maximum(q[..., :1], 1e-300), ang / xp.where(small, 1.0, vn))
    return k * q[..., 1:]
