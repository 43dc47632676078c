"""The inertia and gravity link terms of the step energy (energies/inertia.py, energies/gravity.py)."""
from __future__ import annotations

from .jit import jitable


@jitable
def _inertia_gravity(mass, c, S, R, t, A, b, scale, grav, g, G, f):
    """The inertia term of every link (:func:`_drag_link`'s locals path, W = 1) and, with ``grav``, gravity's:
    returns (Σ_i inertia value, Σ_i (R c + m t)·g) and WRITES their pose gradients into G, f (the first terms of
    :func:`link_terms`: no zeroing pass, no second pass over G; the same sums in the same order as inertia then
    gravity each added to zeros)."""
    val_in = 0.0
    vg = 0.0
    two = 2.0 * scale
    for i in range(mass.shape[0]):
        mi = mass[i]
        sr = 0.0
        st = 0.0
        sg = 0.0
        for a in range(3):
            e = t[i, a] - b[i, a]
            d0, d1, d2 = R[i, a, 0] - A[i, a, 0], R[i, a, 1] - A[i, a, 1], R[i, a, 2] - A[i, a, 2]
            h0 = d0 * S[i, 0, 0] + d1 * S[i, 1, 0] + d2 * S[i, 2, 0] + e * c[i, 0]
            h1 = d0 * S[i, 0, 1] + d1 * S[i, 1, 1] + d2 * S[i, 2, 1] + e * c[i, 1]
            h2 = d0 * S[i, 0, 2] + d1 * S[i, 1, 2] + d2 * S[i, 2, 2] + e * c[i, 2]
            u = d0 * c[i, 0] + d1 * c[i, 1] + d2 * c[i, 2] + mi * e
            sr += h0 * d0
            sr += h1 * d1
            sr += h2 * d2
            st += e * u
            if grav:
                ga = g[a]
                cw = R[i, a, 0] * c[i, 0] + R[i, a, 1] * c[i, 1] + R[i, a, 2] * c[i, 2] + mi * t[i, a]
                sg += cw * ga
                f[i, a] = two * u + -mi * ga
                G[i, a, 0] = two * h0 + -ga * c[i, 0]
                G[i, a, 1] = two * h1 + -ga * c[i, 1]
                G[i, a, 2] = two * h2 + -ga * c[i, 2]
            else:
                f[i, a] = two * u
                G[i, a, 0] = two * h0
                G[i, a, 1] = two * h1
                G[i, a, 2] = two * h2
        val_in += scale * (sr + st)
        vg += sg
    return val_in, vg

