"""The generalised gradient of link terms by the wrench pass (kinematics/chain_rule.py)."""
from __future__ import annotations

from .jit import inlined_by_llvm


@inlined_by_llvm
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

