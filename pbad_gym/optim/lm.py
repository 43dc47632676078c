"""Batched Levenberg-Marquardt on a manifold (DESIGN.md §4).

Trajectories iterate in lock-step; converged ones drop out of the working set (the arrays are compacted to the
active trajectories), so each trajectory's numbers are the ones it would get alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backend import xp_of

_EPS_BAND = 64.0  # round-off band in units of machine epsilon · |E|


@dataclass
class LMResult:
    """Solution x (B, n_x) and per-trajectory diagnostics: iterations (B,), grad_norm (B,) (the scaled gradient
    max_j |g_j| / D_j, in units of x), converged (B,), energy (B,), and energy_history (list of (B,) arrays of the
    accepted energy after each iteration, NaN where inactive) when requested."""

    x: object
    iterations: object
    grad_norm: object
    converged: object
    energy: object
    energy_history: list | None = None


def _solve_damped(H, D, mu, g):
    """δ = −(H + μ·diag(D))⁻¹ g per trajectory; non-finite where the system is singular."""
    xp = xp_of(H)
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


def levenberg_marquardt(fun, retract, x0, *, max_iter=50, tol=1e-9, mu0=1e-6, record_history=False):
    """Minimise fun over a batch.

    fun(x, idx, derivatives) -> E (B',) or, with derivatives, (E, g (B', n), H (B', n, n), D (B', n)); idx is an index array into
    the batch (None: all), D a positive scaling (diagonal of the Gauss-Newton Hessian) used both for damping
    (H + μ·diag(D)) and for the convergence test max_j |g_j|/D_j < tol (a Newton-step estimate in units of x).
    retract(x, idx, dx) -> x ⊕ dx. Steps are accepted only when the energy decreases, or when it rises by no
    more than round-off while the predicted decrease is itself below round-off.
    """
    xp = xp_of(x0)
    B = x0.shape[0]
    x = x0.copy()
    E, g, H, D = fun(x, None, True)
    mu = xp.full(B, mu0, dtype=x.dtype)
    iters = xp.zeros(B, dtype=xp.int64)
    conv = xp.zeros(B, dtype=bool)
    gnorm = xp.max(xp.abs(g) / D, axis=-1)
    history = [] if record_history else None
    eps = xp.finfo(x.dtype).eps
    for _ in range(max_iter):
        conv = conv | (gnorm < tol)
        idx = xp.nonzero(~conv)[0]
        if idx.size == 0:
            break
        sel = None if idx.size == B else idx
        gi, Hi, Di, Ei = g[idx], H[idx], D[idx], E[idx]
        dx = _solve_damped(Hi, Di, mu[idx], gi)
        pred = -(xp.sum(gi * dx, -1) + 0.5 * xp.sum(dx * (Hi @ dx[..., None])[..., 0], -1))
        ok = xp.all(xp.isfinite(dx), -1)
        dx = xp.where(ok[:, None], dx, 0.0)
        x_try = retract(x[idx], sel, dx)
        # derivatives at every trial: rejections are rare, and this saves a second kinematics pass on acceptance
        E_try, g_try, H_try, D_try = fun(x_try, sel, True)
        band = _EPS_BAND * eps * xp.maximum(xp.abs(Ei), xp.abs(E_try))
        tiny = pred <= band
        accept = ok & ((E_try < Ei) | ((E_try <= Ei + band) & tiny))
        iters[idx] += 1
        mu[idx] = xp.where(accept, xp.maximum(mu[idx] / 3.0, 1e-12), xp.minimum(mu[idx] * 10.0, 1e12))
        acc = idx[accept]
        if acc.size:
            x[acc], E[acc], g[acc], H[acc], D[acc] = (a[accept] for a in (x_try, E_try, g_try, H_try, D_try))
            gnorm[acc] = xp.max(xp.abs(g[acc]) / D[acc], axis=-1)
        if record_history:
            h = xp.full(B, xp.nan, dtype=x.dtype)
            h[acc] = E[acc]
            history.append(h)
    conv = conv | (gnorm < tol)
    return LMResult(x, iters, gnorm, conv, E, history)
