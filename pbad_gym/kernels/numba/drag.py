"""The fluid drag link term of the step energy (energies/drag.py)."""
from __future__ import annotations

from .jit import jitable


@jitable
def _drag_link(mass, c, S, i, R, t, A, b, W, scale, G, f, s33):
    """The drag term scale · ∫ρ‖R p0 + t − (A p0 + b)‖²_W of link i (every array indexed by link; mass, c, S:
    the links' mass moments; W (L, 3, 3) the drag weights): adds ∂/∂R, ∂/∂t to G[i], f[i] and returns the
    value (s33 (≥3, 3, 3) scratch: D, ½∂/∂R, u | ½∂/∂t). The inertia term (W = 1) is :func:`_inertia_gravity`.

    Helpers called per link or per sphere take the arrays they read, not the BodyArrays: a call that LLVM does
    not inline passes every field of a NamedTuple argument (26 arrays), which cost more than the arithmetic."""
    mi = mass[i]
    for a in range(3):
        s33[2, 0, a] = t[i, a] - b[i, a]
        for k in range(3):
            s33[0, a, k] = R[i, a, k] - A[i, a, k]
    for a in range(3):
        for k in range(3):
            s33[1, a, k] = (s33[0, a, 0] * S[i, 0, k] + s33[0, a, 1] * S[i, 1, k] + s33[0, a, 2] * S[i, 2, k]
                            + s33[2, 0, a] * c[i, k])
        s33[2, 1, a] = s33[0, a, 0] * c[i, 0] + s33[0, a, 1] * c[i, 1] + s33[0, a, 2] * c[i, 2] + mi * s33[2, 0, a]
    # W·(½∂/∂R), W·(½∂/∂t): columns transformed in place through locals
    for k in range(3):
        g0, g1, g2 = s33[1, 0, k], s33[1, 1, k], s33[1, 2, k]
        for a in range(3):
            s33[1, a, k] = W[i, a, 0] * g0 + W[i, a, 1] * g1 + W[i, a, 2] * g2
    g0, g1, g2 = s33[2, 1, 0], s33[2, 1, 1], s33[2, 1, 2]
    for a in range(3):
        s33[2, 1, a] = W[i, a, 0] * g0 + W[i, a, 1] * g1 + W[i, a, 2] * g2
    sr = 0.0
    for a in range(3):
        for k in range(3):
            sr += s33[1, a, k] * s33[0, a, k]
    st = 0.0
    for a in range(3):
        st += s33[2, 0, a] * s33[2, 1, a]
    val = scale * (sr + st)
    for a in range(3):
        f[i, a] += 2.0 * scale * s33[2, 1, a]
        for k in range(3):
            G[i, a, k] += 2.0 * scale * s33[1, a, k]
    return val


