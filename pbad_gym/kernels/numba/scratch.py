"""The work arrays of one trajectory's compiled step, as one typed value shared by both targets.

The CPU kernel (batch.step_rows) allocates one :class:`StepScratch` per chunk of trajectories and reuses it row after
row; the GPU kernel (kernels.cuda) gives each thread a view of preallocated global arrays, one per field, with the
batch axis LAST (thread r's element k of a field lies next to thread r+1's, so a warp's scratch accesses coalesce).
:func:`scratch_shapes` is the one table of their shapes; :func:`alloc_scratch` (compiled into the CPU kernel) must
agree with it (tests/test_cuda_kernel.py checks).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.extending import register_jitable

# element kinds of the fields: the engine's float dtype, int64 (pivots), bool (contact flags)
FLOAT, INT, BOOL = "float", "int64", "bool"


class StepScratch(NamedTuple):
    """One trajectory's work arrays. L links, nv DOFs, nq coordinates, n_s contact spheres. Row copies of the inputs:
    qp, qc (nq,), ta (nv,), cPr (n_s, 4): the centres at q_k and, in column 3, the step's normal shift s0
    (lm.prepare_row), canr (n_s, 3), car (n_s,) bool, cnr (n_s,). Two LM evaluation slots (current and
    trial point): Rs (2, L, 3, 3), ts (2, L, 3), ws, vs (2, nv, 3), Gs (2, L, 3, 3), fs (2, L, 3), gs (2, nv),
    xs (2, nq). Step data: Rp, Rr, A, Wd (L, 3, 3), tp, tr, bt (L, 3), qpred (nq,). Kinematics and Hessian work:
    wtmp, vtmp (nv, 3), Rj, R2, Z (L, 3, 3), F (L, 3), wr (L, 6), K (L, 6, 6), Xk (nv, 6), H, Hd, Af (nv, nv),
    D, dx, dv (nv,), piv (nv,) int64, s33 (8, 3, 3), s3 (8, 3), s36 (2, 3, 6). The Newton memory a row carries
    from one substep to the next (lm.step_row): Af's factor with Dc (nv,), the diagonal D it was solved with, and
    mc (2,) = (1 where the factor is valid else 0, the damping μ it was solved with). The divergence guard's energy
    terms (the GPU's terms kernel, dynamics.energy_terms_row): xv, ev, zv (nv,). BDF2's references
    (lm.prepare_bdf2_row): qe (nq,), Re (L, 3, 3), te (L, 3): q̃ and the link poses' (4x_k − x_{k−1})/3."""

    qp: np.ndarray
    qc: np.ndarray
    ta: np.ndarray
    cPr: np.ndarray
    canr: np.ndarray
    car: np.ndarray
    cnr: np.ndarray
    Rs: np.ndarray
    ts: np.ndarray
    ws: np.ndarray
    vs: np.ndarray
    Gs: np.ndarray
    fs: np.ndarray
    gs: np.ndarray
    xs: np.ndarray
    Rp: np.ndarray
    tp: np.ndarray
    Rr: np.ndarray
    tr: np.ndarray
    A: np.ndarray
    bt: np.ndarray
    Wd: np.ndarray
    wtmp: np.ndarray
    vtmp: np.ndarray
    Rj: np.ndarray
    R2: np.ndarray
    wr: np.ndarray
    K: np.ndarray
    Z: np.ndarray
    F: np.ndarray
    Xk: np.ndarray
    H: np.ndarray
    Hd: np.ndarray
    Af: np.ndarray
    D: np.ndarray
    dx: np.ndarray
    dv: np.ndarray
    piv: np.ndarray
    qpred: np.ndarray
    s33: np.ndarray
    s3: np.ndarray
    s36: np.ndarray
    xv: np.ndarray
    ev: np.ndarray
    zv: np.ndarray
    Dc: np.ndarray
    mc: np.ndarray
    qe: np.ndarray
    Re: np.ndarray
    te: np.ndarray


def scratch_shapes(L, nv, nq, n_s):
    """{field: (shape, kind)} of :class:`StepScratch` in field order (kind: FLOAT, INT or BOOL)."""
    f = lambda *s: (tuple(s), FLOAT)  # noqa: E731
    return {"qp": f(nq), "qc": f(nq), "ta": f(nv), "cPr": f(n_s, 4), "canr": f(n_s, 3), "car": ((n_s,), BOOL),
            "cnr": f(n_s), "Rs": f(2, L, 3, 3), "ts": f(2, L, 3), "ws": f(2, nv, 3), "vs": f(2, nv, 3),
            "Gs": f(2, L, 3, 3), "fs": f(2, L, 3), "gs": f(2, nv), "xs": f(2, nq), "Rp": f(L, 3, 3), "tp": f(L, 3),
            "Rr": f(L, 3, 3), "tr": f(L, 3), "A": f(L, 3, 3), "bt": f(L, 3), "Wd": f(L, 3, 3), "wtmp": f(nv, 3),
            "vtmp": f(nv, 3), "Rj": f(L, 3, 3), "R2": f(L, 3, 3), "wr": f(L, 6), "K": f(L, 6, 6), "Z": f(L, 3, 3),
            "F": f(L, 3), "Xk": f(nv, 6), "H": f(nv, nv), "Hd": f(nv, nv), "Af": f(nv, nv), "D": f(nv),
            "dx": f(nv), "dv": f(nv), "piv": ((nv,), INT), "qpred": f(nq), "s33": f(8, 3, 3), "s3": f(8, 3),
            "s36": f(2, 3, 6), "xv": f(nv), "ev": f(nv), "zv": f(nv), "Dc": f(nv), "mc": f(2),
            "qe": f(nq), "Re": f(L, 3, 3), "te": f(L, 3)}


def scratch_bytes(L, nv, nq, n_s, itemsize):
    """Bytes of one trajectory's :class:`StepScratch` with floats of ``itemsize`` bytes."""
    size = {FLOAT: itemsize, INT: 8, BOOL: 1}
    return sum(int(np.prod(shape)) * size[kind] for shape, kind in scratch_shapes(L, nv, nq, n_s).values())


@register_jitable
def alloc_scratch(L, nv, nq, n_s, dtype):
    """A fresh :class:`StepScratch` (np.empty) for bodies of these sizes in float ``dtype`` (CPU target)."""
    return StepScratch(
        np.empty(nq, dtype), np.empty(nq, dtype), np.empty(nv, dtype), np.empty((n_s, 4), dtype),
        np.empty((n_s, 3), dtype), np.empty(n_s, np.bool_), np.empty(n_s, dtype),
        np.empty((2, L, 3, 3), dtype), np.empty((2, L, 3), dtype), np.empty((2, nv, 3), dtype),
        np.empty((2, nv, 3), dtype), np.empty((2, L, 3, 3), dtype), np.empty((2, L, 3), dtype),
        np.empty((2, nv), dtype), np.empty((2, nq), dtype), np.empty((L, 3, 3), dtype), np.empty((L, 3), dtype),
        np.empty((L, 3, 3), dtype), np.empty((L, 3), dtype), np.empty((L, 3, 3), dtype), np.empty((L, 3), dtype),
        np.empty((L, 3, 3), dtype), np.empty((nv, 3), dtype), np.empty((nv, 3), dtype),
        np.empty((L, 3, 3), dtype), np.empty((L, 3, 3), dtype), np.empty((L, 6), dtype),
        np.empty((L, 6, 6), dtype), np.empty((L, 3, 3), dtype), np.empty((L, 3), dtype), np.empty((nv, 6), dtype),
        np.empty((nv, nv), dtype), np.empty((nv, nv), dtype), np.empty((nv, nv), dtype), np.empty(nv, dtype),
        np.empty(nv, dtype), np.empty(nv, dtype), np.empty(nv, np.int64), np.empty(nq, dtype),
        np.empty((8, 3, 3), dtype), np.empty((8, 3), dtype), np.empty((2, 3, 6), dtype), np.empty(nv, dtype),
        np.empty(nv, dtype), np.empty(nv, dtype), np.empty(nv, dtype), np.zeros(2, dtype), np.empty(nq, dtype),
        np.empty((L, 3, 3), dtype), np.empty((L, 3), dtype))
