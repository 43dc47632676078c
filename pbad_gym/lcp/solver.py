"""Batched projected Gauss-Seidel family for boxed LCPs: PGS, PSOR, AMGS and block PGS.

    w = Aλ + b,  lo ≤ λ ≤ hi,  w ⟂ λ      (natural map: λ = clip(λ - w, lo, hi))

Sweeps run in lock step over the batch with a per-element convergence mask: an element whose residual has
reached ``tol`` is frozen (its λ no longer changes) while the others continue. Rows are visited by a Python
loop (m up to a few hundred) and every row update is vectorised over the batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import xp_of
from .blocks import build_blocks, solve_block
from .friction import Friction, row_bounds
from .operators import DenseOperator, MatrixFreeOperator
from .orders import error_order, fixed_order, random_order
from .residual import natural_map, reduce_residual
from .rules import amgs_row, psor_row

METHODS = ("pgs", "psor", "amgs", "block_pgs")


@dataclass
class LCPResult:
    """Result of :func:`solve` (B = batch, m = rows, K = sweeps run by the slowest element).

    lam (B, m); iterations (B,) sweeps each element ran (0 when the start already met tol); error_history (B, K)
    residual after each sweep (a frozen element repeats its last value); error0 (B,) residual of the start;
    converged (B,) bool; residual_inf / residual_rel2 (B,) final ∞-norm and ‖b‖-relative 2-norm residuals.
    """

    lam: Any
    iterations: Any
    error_history: Any
    error0: Any
    converged: Any
    residual_inf: Any
    residual_rel2: Any
    method: str
    order: Any


def _batch_size(*arrays) -> int:
    sizes = {int(a.shape[0]) for a in arrays if a is not None and getattr(a, "ndim", 0) >= 2}
    sizes.discard(1)
    if len(sizes) > 1:
        raise ValueError(f"inconsistent batch sizes {sorted(sizes)}")
    return sizes.pop() if sizes else 1


def solve(A, b, lo=None, hi=None, *, friction: Friction | None = None, method: str = "pgs",
          order="default", omega: float = 1.0, theta: float | None = None, max_iter: int = 100,
          tol: float = 1e-8, norm: str = "inf", warm_start=None, seed=None, mask=None, J=None, MinvJT=None,
          matrix_free: bool | None = None) -> LCPResult:
    """Solve the batched boxed LCP  w = Aλ + b ⟂ lo ≤ λ ≤ hi.

    A : (B, m, m), or (1, m, m) shared by the batch; may be None in matrix-free mode.
    b : (B, m) or (1, m).   lo, hi : (B, m)/(1, m) or None (defaults 0 and +inf: the plain LCP).
    friction : :class:`Friction` coupling friction rows' boxes to their normal impulse, or None.
    method : "pgs" (ω = omega, so PGS for ω = 1), "psor" (same rule, named for clarity), "amgs" (seed 004,
        Ω = θ·D with θ = 2/omega - 1 unless ``theta`` is given, so the default is θ = 1 and AMGS at omega is
        the counterpart of PSOR at omega) or "block_pgs" (one contact's rows solved exactly at a time).
    order : "default", "random", "error", "mass_asc", "mass_desc", "block" (= method "block_pgs"), or a
        permutation array (m,) / (B, m) (see :mod:`pbad_gym.lcp.orders`). block_pgs takes "default"/"random",
        applied to contacts.
    max_iter, tol, norm : stop an element once its natural-map residual (norm "inf" absolute, or "rel2"
        relative to ‖b‖) is ≤ tol; at most max_iter sweeps.
    warm_start : (B, m) initial λ (default 0).   seed : RNG seed for order="random".
    mask : (B, m) bool, False on padded rows (different contact counts per element): those rows are held at
        λ = 0 and ignored by the residual; their A, b, J entries may hold anything finite.
    J (B|1, m, n), MinvJT (B|1, n, m) : matrix-free operator A = J M⁻¹Jᵀ, used when ``matrix_free`` is True,
        or when it is None and A is None. The solver then keeps u = M⁻¹Jᵀλ current per row update.
    Returns :class:`LCPResult`.
    """
    if isinstance(order, str) and order == "block":
        method, order = "block_pgs", "default"
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if matrix_free is None:
        matrix_free = A is None
    if matrix_free and (J is None or MinvJT is None):
        raise ValueError("matrix-free mode needs J and MinvJT")
    xp = xp_of(*(x for x in (A, b, J, MinvJT) if x is not None))
    b = xp.asarray(b)
    m = b.shape[-1]
    order_arr = None if isinstance(order, str) else xp.asarray(order)
    fr_arrays = (None, None) if friction is None else (xp.asarray(friction.normal_index), xp.asarray(friction.mu))
    B = _batch_size(A if not matrix_free else None, J if matrix_free else None, MinvJT if matrix_free else None,
                    b[None] if b.ndim == 1 else b, lo, hi, mask, warm_start, order_arr, *fr_arrays)
    b = xp.broadcast_to(b.reshape(-1, m), (B, m)).astype(b.dtype if b.dtype.kind == "f" else np.float64)
    dt = b.dtype
    if mask is not None:
        mask = xp.broadcast_to(xp.asarray(mask, dtype=bool), (B, m))
        b = xp.where(mask, b, 0.0)
    lo = xp.broadcast_to(xp.zeros((1, m), dt) if lo is None else xp.asarray(lo, dt).reshape(-1, m), (B, m))
    hi = xp.broadcast_to(xp.full((1, m), xp.inf, dt) if hi is None else xp.asarray(hi, dt).reshape(-1, m), (B, m))
    if mask is not None:
        # padded rows get the box [0, 0]: every rule then returns λ = 0 there
        lo, hi = xp.where(mask, lo, 0.0), xp.where(mask, hi, 0.0)
    if friction is not None:
        friction = Friction(fr_arrays[0].reshape(-1, m), fr_arrays[1].reshape(-1, m).astype(dt)).broadcast(B, m)
        if mask is not None:
            friction = friction.masked(mask)
    if matrix_free:
        op = MatrixFreeOperator(xp.asarray(J, dt), xp.asarray(MinvJT, dt), b, mask)
    else:
        op = DenseOperator(xp.asarray(A, dt), b, mask)

    lam = xp.zeros((B, m), dt) if warm_start is None else \
        xp.array(xp.broadcast_to(xp.asarray(warm_start, dt).reshape(-1, m), (B, m)))
    if mask is not None:
        lam = xp.where(mask, lam, 0.0)
    op.reset(lam)
    w = op.w(lam)
    rows_res = natural_map(lam, w, lo, hi, friction, mask)
    err0 = reduce_residual(rows_res, b, norm)
    active = err0 > tol
    iterations = xp.zeros(B, dtype=np.int64)
    history = []
    rng = np.random.default_rng(seed)

    if method == "block_pgs":
        if not (isinstance(order, str) and order in ("default", "random")):
            raise ValueError("block_pgs takes order 'default' or 'random' (over contacts)")
        blocks = build_blocks(None if friction is None else friction.normal_index, mask, B, m, xp)
        sweep = _BlockSweep(op, blocks, lo, hi, friction, order, rng)
    else:
        if theta is None:
            theta = 2.0 / omega - 1.0
        fixed = fixed_order(order, B, m, op.diag)
        sweep = _RowSweep(op, lo, hi, friction, method, omega, theta, order, fixed, rng, B, m)

    for _ in range(max_iter):
        if not bool(xp.any(active)):
            break
        lam = sweep(lam, active, rows_res)
        iterations = iterations + active
        w = op.w(lam)
        rows_res = natural_map(lam, w, lo, hi, friction, mask)
        err = reduce_residual(rows_res, b, norm)
        history.append(err)
        active = active & (err > tol)

    hist = xp.stack(history, axis=1) if history else xp.zeros((B, 0), dt)
    final_inf = reduce_residual(rows_res, b, "inf")
    final_rel = reduce_residual(rows_res, b, "rel2")
    final = final_inf if norm == "inf" else final_rel
    return LCPResult(lam=lam, iterations=iterations, error_history=hist, error0=err0, converged=final <= tol,
                     residual_inf=final_inf, residual_rel2=final_rel, method=method, order=order)


class _RowSweep:
    """One Gauss-Seidel sweep of scalar row updates (PGS/PSOR/AMGS) in a per-element order."""

    def __init__(self, op, lo, hi, friction, method, omega, theta, order, fixed, rng, B, m):
        self.op, self.lo, self.hi, self.friction = op, lo, hi, friction
        self.method, self.omega, self.theta = method, omega, theta
        self.order, self.fixed, self.rng, self.B, self.m = order, fixed, rng, B, m
        self.xp = xp_of(lo)
        # AMGS memory x₋ (B, m), in each row's shifted coordinates (see rules.amgs_row)
        self.xneg = self.xp.zeros((B, m), lo.dtype) if method == "amgs" else None

    def current_order(self, rows_res):
        if self.fixed is not None:
            return self.fixed
        if self.order == "random":
            return random_order(self.rng, self.B, self.m, self.xp)
        return error_order(rows_res)

    def __call__(self, lam, active, rows_res):
        xp, op = self.xp, self.op
        order = self.current_order(rows_res)
        lam = xp.array(lam)
        for k in range(self.m):
            idx = xp.ascontiguousarray(order[:, k])
            col = idx[:, None]
            lam_i = xp.take_along_axis(lam, col, axis=1)[:, 0]
            a = xp.take_along_axis(op.diag, col, axis=1)[:, 0]
            r = op.row_value(idx, lam) - a * lam_i  # Σ_{j≠i} A_ij λ_j + b_i
            lo_i, hi_i = row_bounds(lam, idx, self.lo, self.hi, self.friction)
            if self.method == "amgs":
                xneg_i = xp.take_along_axis(self.xneg, col, axis=1)[:, 0]
                new, xneg_new = amgs_row(lam_i, xneg_i, r, a, lo_i, hi_i, self.theta)
                xp.put_along_axis(self.xneg, col, xp.where(active, xneg_new, xneg_i)[:, None], axis=1)
            else:
                new = psor_row(lam_i, r, a, lo_i, hi_i, self.omega)
            new = xp.where(active, new, lam_i)
            xp.put_along_axis(lam, col, new[:, None], axis=1)
            op.update(idx, new - lam_i)
        return lam


class _BlockSweep:
    """One block-PGS sweep: each contact's (normal, t1, t2) rows solved exactly with the rest frozen."""

    def __init__(self, op, blocks, lo, hi, friction, order, rng):
        self.op, self.blocks, self.lo, self.hi, self.friction = op, blocks, lo, hi, friction
        self.order, self.rng = order, rng
        self.xp = xp_of(lo)

    def __call__(self, lam, active, rows_res):
        xp, op = self.xp, self.op
        B, c, _ = self.blocks.shape
        if self.order == "random":
            perm = random_order(self.rng, B, c, xp)
            blocks = xp.take_along_axis(self.blocks, perm[:, :, None], axis=1)
        else:
            blocks = self.blocks
        lam = xp.array(lam)
        eye = xp.eye(3, dtype=lam.dtype)
        for j in range(c):
            idx = blocks[:, j, :]
            valid = idx >= 0
            head_ok = valid[:, 0]
            idx0 = xp.where(head_ok, idx[:, 0], 0)
            # empty slots alias the head, so their (identical) writes below are harmless
            idx_s = xp.where(valid, idx, idx0[:, None])
            lam_b = xp.take_along_axis(lam, idx_s, axis=1)
            Abb, wb = op.block(idx_s, lam)
            lam_v = xp.where(valid, lam_b, 0.0)
            r = wb - xp.einsum("bij,bj->bi", Abb, lam_v)  # b + contributions from outside the block
            pair = valid[:, :, None] & valid[:, None, :]
            Abb = xp.where(pair, Abb, eye)
            r = xp.where(valid, r, 0.0)
            lo_h = xp.take_along_axis(self.lo, idx0[:, None], axis=1)[:, 0]
            hi_h = xp.take_along_axis(self.hi, idx0[:, None], axis=1)[:, 0]
            if self.friction is None:
                mu = xp.zeros_like(lam_b)
            else:
                mu = xp.where(valid, xp.take_along_axis(self.friction.mu, idx_s, axis=1), 0.0)
            new = solve_block(Abb, r, lam_v, lo_h, hi_h, mu)
            new = xp.where(valid, new, new[:, :1])
            new = xp.where((active & head_ok)[:, None], new, lam_b)
            for s in range(3):
                col = idx_s[:, s:s + 1]
                old = xp.take_along_axis(lam, col, axis=1)[:, 0]
                xp.put_along_axis(lam, col, new[:, s:s + 1], axis=1)
                op.update(idx_s[:, s], xp.where(valid[:, s], new[:, s] - old, 0.0))
        return lam
