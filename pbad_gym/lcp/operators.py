"""Row access to the LCP matrix A for Gauss-Seidel sweeps: dense A, or matrix-free from (J, M⁻¹Jᵀ).

Both expose the same small interface so one sweep loop serves both:
``diag`` (B, m), ``reset(lam)``, ``row_value(idx, lam)`` = (Aλ + b)_idx, ``update(idx, delta)`` after row idx
changed by delta, ``block(idx)`` for block solvers, ``w(lam)`` = Aλ + b.
A batch axis of 1 on A (or J, M⁻¹Jᵀ) is shared by every batch element: this is how one problem is solved
under many row orders at once without copying it.
"""
from __future__ import annotations

from ..arrays import xp_of


def _gather_rows(X, idx, bsel):
    """Rows ``X[b, idx[b], :]`` (B, k) of X (B|1, m, k); bsel is None when X's batch axis is shared."""
    if bsel is None:
        return X[0][idx]
    return X[bsel, idx]


class DenseOperator:
    """Explicit A (B|1, m, m) and b (B, m). Padded rows/columns (mask False) are zeroed so they cannot leak."""

    def __init__(self, A, b, mask):
        xp = xp_of(A, b)
        self.xp = xp
        B, m = b.shape
        if mask is not None:
            A = xp.where(mask[:, :, None] & mask[:, None, :], A, 0.0)
        self.A = A
        self.b = b
        self.bsel = None if A.shape[0] == 1 else xp.arange(B)
        d = xp.broadcast_to(xp.diagonal(A, axis1=1, axis2=2), (B, m))
        # padded rows have A_ii = 0; 1 keeps the division harmless (their box is [0, 0] anyway)
        self.diag = xp.where(d > 0, d, 1.0) if mask is None else xp.where(mask, d, 1.0)

    def reset(self, lam):
        pass

    def row_value(self, idx, lam):
        rows = _gather_rows(self.A, idx, self.bsel)
        return self.xp.sum(rows * lam, axis=1) + self.xp.take_along_axis(self.b, idx[:, None], axis=1)[:, 0]

    def update(self, idx, delta):
        pass  # stateless: rows are dotted with λ directly

    def block(self, idx, lam):
        """A_bb (B, k, k) and w_b = (Aλ + b)[idx] (B, k) for row blocks idx (B, k) (entries valid indices)."""
        xp = self.xp
        k = idx.shape[1]
        rows = xp.stack([_gather_rows(self.A, idx[:, s], self.bsel) for s in range(k)], axis=1)  # (B, k, m)
        Abb = xp.take_along_axis(rows, xp.broadcast_to(idx[:, None, :], rows.shape[:2] + (k,)), axis=2)
        wb = xp.einsum("bkm,bm->bk", rows, lam) + xp.take_along_axis(self.b, idx, axis=1)
        return Abb, wb

    def w(self, lam):
        if self.bsel is None:
            return lam @ self.A[0].T + self.b
        return self.xp.einsum("bij,bj->bi", self.A, lam) + self.b


class MatrixFreeOperator:
    """A = J M⁻¹Jᵀ never formed: J (B|1, m, n), MinvJT (B|1, n, m). Keeps u = M⁻¹Jᵀλ (B, n) current per row
    update (seed 004's sparsity exploitation): a row costs O(n) instead of O(m)."""

    def __init__(self, J, MinvJT, b, mask):
        xp = xp_of(J, MinvJT, b)
        self.xp = xp
        B, m = b.shape
        if mask is not None:
            J = xp.where(mask[:, :, None], J, 0.0)
            MinvJT = xp.where(mask[:, None, :], MinvJT, 0.0)
        self.J = J
        # row-major copy of M⁻¹Jᵀ's columns: column idx is then a contiguous row gather
        self.JMt = xp.ascontiguousarray(xp.swapaxes(MinvJT, 1, 2))
        self.b = b
        self.bsel = None if J.shape[0] == 1 and self.JMt.shape[0] == 1 else xp.arange(B)
        if self.bsel is not None:
            self.J = xp.broadcast_to(self.J, (B,) + J.shape[1:])
            self.JMt = xp.broadcast_to(self.JMt, (B,) + self.JMt.shape[1:])
        d = xp.broadcast_to(xp.sum(self.J * self.JMt, axis=2), (B, m))
        self.diag = xp.where(d > 0, d, 1.0) if mask is None else xp.where(mask, d, 1.0)
        self.u = None

    def reset(self, lam):
        self.u = self.xp.einsum("bmn,bm->bn", self.JMt, lam) if self.bsel is not None else lam @ self.JMt[0]

    def row_value(self, idx, lam):
        Jrow = _gather_rows(self.J, idx, self.bsel)
        return self.xp.sum(Jrow * self.u, axis=1) + self.xp.take_along_axis(self.b, idx[:, None], axis=1)[:, 0]

    def update(self, idx, delta):
        self.u = self.u + _gather_rows(self.JMt, idx, self.bsel) * delta[:, None]

    def block(self, idx, lam):
        xp = self.xp
        k = idx.shape[1]
        Jr = xp.stack([_gather_rows(self.J, idx[:, s], self.bsel) for s in range(k)], axis=1)  # (B, k, n)
        Mc = xp.stack([_gather_rows(self.JMt, idx[:, s], self.bsel) for s in range(k)], axis=1)  # (B, k, n)
        Abb = xp.einsum("bin,bjn->bij", Jr, Mc)
        wb = xp.einsum("bkn,bn->bk", Jr, self.u) + xp.take_along_axis(self.b, idx, axis=1)
        return Abb, wb

    def w(self, lam):
        if self.bsel is None:
            return self.u @ self.J[0].T + self.b
        return self.xp.einsum("bmn,bn->bm", self.J, self.u) + self.b
