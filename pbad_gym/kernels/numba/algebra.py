"""Unit quaternions, scalar-style (kinematics/algebra.py)."""
from __future__ import annotations

import math

from .jit import jitable


@jitable
def quat_mul(aw, ax, ay, az, bw, bx, by, bz):
    return (aw * bw - (ax * bx + ay * by + az * bz),
            aw * bx + bw * ax + (ay * bz - az * by),
            aw * by + bw * ay + (az * bx - ax * bz),
            aw * bz + bw * az + (ax * by - ay * bx))


@jitable
def quat_exp(px, py, pz):
    th = math.sqrt(px * px + py * py + pz * pz)
    half = 0.5 * th
    if th < 1e-8:
        k = 0.5 - th * th / 48.0
    else:
        k = math.sin(half) / th
    return math.cos(half), k * px, k * py, k * pz


@jitable
def quat_log(w, x, y, z):
    if w < 0:
        w, x, y, z = -w, -x, -y, -z
    vn = math.sqrt(x * x + y * y + z * z)
    if vn < 1e-8:
        k = 2.0 / max(w, 1e-300)
    else:
        k = 2.0 * math.atan2(vn, w) / vn
    return k * x, k * y, k * z


@jitable
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

