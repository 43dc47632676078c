"""Friction coupling of boxed-LCP rows and the effective bounds it implies.

A friction row's box is not fixed: it follows its contact's normal impulse, ``|λ_t| ≤ μ λ_n``. Each tangent
direction gets its own box (a friction pyramid), which keeps every row a scalar box and so lets Gauss-Seidel
style solvers project one row at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import xp_of


@dataclass(frozen=True)
class Friction:
    """Per-row friction coupling of a batched boxed LCP.

    normal_index : int array (B, m) (or (1, m), broadcast over the batch). For a friction row, the index (in the
        same batch element) of its contact's normal row; -1 for every other row (normal rows, plain boxed rows).
    mu : float array (B, m) (or (1, m)). Friction coefficient of the row; read only where ``normal_index >= 0``.

    Friction row i has bounds ``-mu_i * max(λ_n, 0) <= λ_i <= mu_i * max(λ_n, 0)`` with ``n = normal_index_i``;
    the ``lo``/``hi`` passed for that row are ignored.
    """

    normal_index: Any
    mu: Any

    @classmethod
    def per_contact(cls, n_contacts: int, mu, batch: int = 1, rows_per_contact: int = 3, xp=np) -> "Friction":
        """The default layout: rows (n, t1, t2) per contact, contact c's normal at row ``rows_per_contact*c``.

        ``mu`` is a scalar or an array (B, n_contacts). Returns arrays of shape (batch, rows_per_contact*n_contacts).
        """
        k = rows_per_contact
        m = k * n_contacts
        rows = np.arange(m)
        head = rows - rows % k
        ni = np.where(rows % k == 0, -1, head)
        mu_c = np.broadcast_to(np.asarray(mu, dtype=float), (batch, n_contacts))
        mu_rows = np.repeat(mu_c, k, axis=1)
        ni = np.broadcast_to(ni, (batch, m)).copy()
        return cls(normal_index=xp.asarray(ni), mu=xp.asarray(mu_rows))

    def broadcast(self, batch: int, m: int) -> "Friction":
        """Both arrays broadcast to (batch, m) (read-only views when the batch axis is 1)."""
        xp = xp_of(self.mu, self.normal_index)
        return Friction(normal_index=xp.broadcast_to(xp.asarray(self.normal_index), (batch, m)),
                        mu=xp.broadcast_to(xp.asarray(self.mu), (batch, m)))

    def masked(self, mask) -> "Friction":
        """A copy in which rows outside ``mask`` (B, m) are not friction rows (padding stays inert)."""
        xp = xp_of(self.mu, mask)
        return Friction(normal_index=xp.where(mask, self.normal_index, -1), mu=self.mu)


def effective_bounds(lam, lo, hi, friction: Friction | None):
    """The bounds every row has at ``lam``: lo, hi (B, m) with friction rows replaced by ``∓μ max(λ_n, 0)``.

    lam, lo, hi: (B, m) (lo/hi may broadcast). Returns two (B, m) arrays.
    """
    if friction is None:
        return lo, hi
    xp = xp_of(lam, lo, hi)
    ni = friction.normal_index
    is_f = ni >= 0
    lam_n = xp.take_along_axis(lam, xp.where(is_f, ni, 0), axis=1)
    cap = friction.mu * xp.maximum(lam_n, 0.0)
    return xp.where(is_f, -cap, lo), xp.where(is_f, cap, hi)


def row_bounds(lam, idx, lo, hi, friction: Friction | None):
    """Bounds of row ``idx`` (B,) of each batch element at the current ``lam`` (B, m): two (B,) arrays."""
    xp = xp_of(lam, lo, hi)
    col = idx[:, None]
    lo_i = xp.take_along_axis(lo, col, axis=1)[:, 0]
    hi_i = xp.take_along_axis(hi, col, axis=1)[:, 0]
    if friction is None:
        return lo_i, hi_i
    ni = xp.take_along_axis(friction.normal_index, col, axis=1)[:, 0]
    mu = xp.take_along_axis(friction.mu, col, axis=1)[:, 0]
    is_f = ni >= 0
    lam_n = xp.take_along_axis(lam, xp.where(is_f, ni, 0)[:, None], axis=1)[:, 0]
    cap = mu * xp.maximum(lam_n, 0.0)
    return xp.where(is_f, -cap, lo_i), xp.where(is_f, cap, hi_i)
