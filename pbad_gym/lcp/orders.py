"""Row orders for Gauss-Seidel sweeps (seed 002: Andrews, Erleben, Teichmann 2017).

An order is an int array (B, m): row ``order[b, k]`` is visited k-th in batch element b's sweep. Padded rows may
appear anywhere (they are no-ops). Names:
  "default"    0, 1, ..., m-1 (the problem's own row layout, e.g. n, t1, t2 per contact);
  "random"     a fresh uniformly random permutation per sweep and batch element (seeded);
  "error"      recomputed each sweep: largest natural-map residual |λ_i - clip(λ_i - w_i)| first;
  "mass_asc"   by effective mass 1/A_ii, smallest first (fixed for the solve);
  "mass_desc"  by effective mass 1/A_ii, largest first;
or an explicit permutation array (m,) shared by the batch or (B, m) per element (fixed for the solve).
"""
from __future__ import annotations

import numpy as np

from ..arrays import xp_of

NAMED = ("default", "random", "error", "mass_asc", "mass_desc")


def argsort_rows(xp, keys):
    """Stable argsort along axis 1 (stable on NumPy so ties keep the default order; CuPy's sort is stable)."""
    if xp is np:
        return np.argsort(keys, axis=1, kind="stable")
    return xp.argsort(keys, axis=1)


def fixed_order(order, batch: int, m: int, diag):
    """The (B, m) order used for every sweep, or None when the order changes per sweep ("random", "error").

    diag: (B, m) A_ii (padded rows hold 1), used by the mass orders.
    """
    xp = xp_of(diag)
    if isinstance(order, str):
        if order == "default":
            return xp.broadcast_to(xp.arange(m), (batch, m))
        if order == "mass_asc":  # effective mass 1/A_ii ascending = A_ii descending
            return argsort_rows(xp, -diag)
        if order == "mass_desc":
            return argsort_rows(xp, diag)
        if order in ("random", "error"):
            return None
        raise ValueError(f"order must be one of {NAMED}, a permutation array, got {order!r}")
    arr = xp.asarray(order)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.shape[-1] != m or arr.ndim != 2:
        raise ValueError(f"order array must have shape (m,) or (B, m) with m={m}, got {arr.shape}")
    check = xp.sort(arr, axis=1)
    if not bool(xp.all(check == xp.arange(m))):
        raise ValueError("order rows must be permutations of 0..m-1")
    return xp.broadcast_to(arr, (batch, m))


def random_order(rng: np.random.Generator, batch: int, m: int, xp=np):
    """A fresh random permutation per batch element (B, m), from host RNG ``rng`` (reproducible on any device)."""
    return xp.asarray(np.argsort(rng.random((batch, m)), axis=1))


def error_order(row_residual):
    """Rows by decreasing |natural-map residual| (B, m) -> order (B, m); ties keep the default order."""
    xp = xp_of(row_residual)
    return argsort_rows(xp, -xp.abs(row_residual))
