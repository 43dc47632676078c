"""Batched Levenberg-Marquardt on a manifold (docs/physics.md §2).

Trajectories iterate in lock-step; converged ones drop out of the working set (the arrays are compacted to the
active trajectories), so each trajectory's numbers are the ones it would get alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arrays import xp_of

_EPS_BAND = 64.0  # round-off band in units of machine epsilon · |E|


@dataclass
class LMResult:
    """Solution x (B, n_x) and per-trajectory diagnostics: iterations (B,), grad_norm (B,) (the scaled gradient
    max_j |g_j| / D_j, in units of x), converged (B,), energy (B,), and energy_history (list of (B,) arrays of the
    accepted energy after each iteration, NaN where inactive) when requested; function_evals (B,) the energy/gradient
    evaluations per trajectory where the optimiser reports them (L-BFGS; None for LM)."""

    x: object
    iterations: object
    grad_norm: object
    converged: object
    energy: object
    energy_history: list | None = None
    function_evals: object = None


def _solve_damped(H, D, mu, g, sqrt_hessian=False):
    """δ = −(H + μ·diag(D))⁻¹ g per trajectory; non-finite where the system is singular. With ``sqrt_hessian`` H
    is a square-root factor F (Hessian FᵀF) and the system is solved through the QR factorisation of
    [F; √(μD)], whose condition is that of F rather than its square."""
    xp = xp_of(H)
    if sqrt_hessian:
        aug = xp.concatenate([H, xp.sqrt(mu[:, None] * D)[..., None] * xp.eye(H.shape[-1], dtype=H.dtype)], -2)
        R = xp.linalg.qr(aug, mode="r")
        y = xp.linalg.solve(xp.swapaxes(R, -1, -2), g[..., None])
        return -xp.linalg.solve(R, y)[..., 0]
    A = H + (mu[:, None] * D)[..., None] * xp.eye(H.shape[-1], dtype=H.dtype)
    try:
        return -xp.linalg.solve(A, g[..., None])[..., 0]
    except xp.linalg.LinAlgError:  # one singular member fails the whole numpy call: do them one at a time
        out = xp.full_like(g, xp.nan)
        for i in range(A.shape[0]):
            try:
                out[i] = -xp.linalg.solve(A[i], g[i])
            except xp.linalg.LinAlgError:
                pass
        return out


def _measure(g, D, ctx):
    m = getattr(ctx, "measure", None)
    if m is not None:
        return m
    return xp_of(g).max(xp_of(g).abs(g) / D, axis=-1)


def levenberg_marquardt(value_grad, hessian, retract, x0, *, max_iter=50, tol=1e-9, mu0=1e-6,
                        record_history=False, sqrt_hessian=False):
    """Minimise an energy over a batch of B problems in lock-step.

    value_grad(x, idx) -> (E (B',), g (B', n), ctx): energy and gradient at x (B', n_x) for the trajectories
        idx (index array into the batch, None: all); ctx is whatever hessian() needs to finish the job.
    hessian(ctx) -> (H (B', n, n), D (B', n)): the Hessian, and D > 0 the diagonal of its Gauss-Newton part, used
        for damping (H + μ·diag(D)) and for the convergence test max_j |g_j|/D_j < tol (a Newton-step estimate in
        units of x). It is only called where another iteration follows, so the converging evaluation costs a
        gradient only; a ctx with a ``take(rows)`` method is cut to the trajectories that go on first.
    retract(x, idx, dx) -> x ⊕ dx.
    A ctx with a ``measure`` attribute (B',) overrides the convergence measure (e.g. a residual norm when the
    energy is a sum of squared residuals whose zero is the goal).
    sqrt_hessian: hessian() returns a square-root factor F (B', m, n) of the Hessian FᵀF instead (least-squares
    problems: F = W½ J), solved by QR for accuracy on ill-conditioned problems.
    Steps are accepted only when the energy decreases, or when it rises by no more than round-off while the
    predicted decrease is itself below round-off (near the minimum E cannot resolve the step; g still can).
    """
    xp = xp_of(x0)
    B = x0.shape[0]
    x = x0.copy()
    E, g, ctx = value_grad(x, None)
    H, D = hessian(ctx)
    mu = xp.full(B, mu0, dtype=x.dtype)
    iters = xp.zeros(B, dtype=xp.int64)
    conv = xp.zeros(B, dtype=bool)
    gnorm = _measure(g, D, ctx)
    history = [] if record_history else None
    eps = xp.finfo(x.dtype).eps
    for _ in range(max_iter):
        conv = conv | (gnorm < tol)
        idx = xp.nonzero(~conv)[0]
        if idx.size == 0:
            break
        # all active (the common case): slices give views instead of fancy-index copies
        sel, ix = (None, slice(None)) if idx.size == B else (idx, idx)
        gi, Hi, Di, Ei = g[ix], H[ix], D[ix], E[ix]
        dx = _solve_damped(Hi, Di, mu[ix], gi, sqrt_hessian)
        Hdx = (Hi @ dx[..., None])[..., 0]
        curv = xp.sum(Hdx * Hdx, -1) if sqrt_hessian else xp.sum(dx * Hdx, -1)
        pred = -(xp.sum(gi * dx, -1) + 0.5 * curv)
        ok = xp.all(xp.isfinite(dx), -1)
        dx = xp.where(ok[:, None], dx, 0.0)
        x_try = retract(x[ix], sel, dx)
        E_try, g_try, ctx_try = value_grad(x_try, sel)
        band = _EPS_BAND * eps * xp.maximum(xp.abs(Ei), xp.abs(E_try))
        accept = ok & ((E_try < Ei) | ((E_try <= Ei + band) & (pred <= band)))
        iters[ix] += 1
        # μ = 0 is allowed (pure Newton while steps are accepted); a rejection restarts damping at 1e-6 at least
        mu[ix] = xp.where(accept, mu[ix] / 3.0, xp.minimum(xp.maximum(mu[ix] * 10.0, 1e-6), 1e12))
        gn_try = _measure(g_try, Di, ctx_try)  # D from the last Hessian: it barely moves within a step
        need = accept & (gn_try >= tol)
        rows = xp.nonzero(need)[0]
        if rows.size:
            # Hessians only for the trajectories that go on (lock-step batches always have a few stragglers)
            sub = ctx_try if rows.size == need.size or not hasattr(ctx_try, "take") else ctx_try.take(rows)
            H_new, D_new = hessian(sub)
            if sub is ctx_try and rows.size != need.size:
                H_new, D_new = H_new[rows], D_new[rows]
            m = getattr(ctx_try, "measure", None)
            gn_try[rows] = m[rows] if m is not None else xp.max(xp.abs(g_try[rows]) / D_new, axis=-1)
            H[idx[rows]], D[idx[rows]] = H_new, D_new
        acc = idx[accept]
        if acc.size == B:
            x, E, g, gnorm = x_try, E_try, g_try, gn_try
        elif acc.size:
            x[acc], E[acc], g[acc], gnorm[acc] = (a[accept] for a in (x_try, E_try, g_try, gn_try))
        if record_history:
            h = xp.full(B, xp.nan, dtype=x.dtype)
            h[acc] = E[acc]
            history.append(h)
    conv = conv | (gnorm < tol)
    return LMResult(x, iters, gnorm, conv, E, history)
