"""Configuration space: q ⊕ δ and q1 ⊖ q0 of one row (kinematics/configuration.py)."""
from __future__ import annotations

import math

from .algebra import quat_exp, quat_log, quat_mul
from .jit import inlined


@inlined
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


@inlined
def difference(m, q0, q1, out):
    """out = q1 ⊖ q0."""
    for i in range(m.lin_q.shape[0]):
        out[m.lin_v[i]] = q1[m.lin_q[i]] - q0[m.lin_q[i]]
    for i in range(m.quat_q.shape[0]):
        a, b = m.quat_q[i], m.quat_v[i]
        w, x, y, z = quat_mul(q0[a], -q0[a + 1], -q0[a + 2], -q0[a + 3], q1[a], q1[a + 1], q1[a + 2], q1[a + 3])
        out[b], out[b + 1], out[b + 2] = quat_log(w, x, y, z)

