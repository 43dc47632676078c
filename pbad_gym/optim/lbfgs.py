"""Batched L-BFGS with a weak-Wolfe line search on a manifold (docs/physics.md §2).

Same protocol and conventions as :mod:`.lm`: trajectories iterate in lock-step, converged ones drop out of the
working set (the arrays are compacted to the active trajectories by index), so each trajectory's numbers are the
ones it would get alone. Within a line search, trajectories that have found their step drop out as well.

Manifolds: x (B, n_x) may have n_x ≥ n; every vector the method handles (g, s, y, directions) lives in the n-dim
tangent coordinates of retract(). After a retraction the stored pairs (s, y) are used as they are, i.e. as vectors in
the same coordinates at the new point (no vector transport). That is the usual practical choice: for Lie-group
coordinates (q ⊗ exp(δ)) the frames change by O(|s|), so the error vanishes as the steps shrink near the minimum,
and the pairs only shape the metric, they never decide acceptance (the line search does, monotonically).
"""
from __future__ import annotations

from .lm import _EPS_BAND, LMResult
from ..arrays import xp_of

_C1 = 1e-4  # Armijo sufficient-decrease constant
_C2 = 0.9  # weak-Wolfe curvature constant (the standard quasi-Newton value: t = 1 is usually accepted)
_MAX_TRIALS = 20  # line-search evaluations per iteration; halving 20 times reaches t ≈ 1e-6
_CURV_EPS = 1e-12  # pairs with sᵀy ≤ _CURV_EPS·|s||y| are skipped (keeps H positive definite)


class _Memory:
    """Ring buffers of the last m pairs per trajectory: S, Y (B, m, n), rho = 1/sᵀy (B, m), count (B,) valid pairs,
    head (B,) the slot the next pair goes to, gamma (B,) = sᵀy/yᵀy of the newest pair (H0 when no scale)."""

    def __init__(self, xp, B, m, n, dtype):
        self.S = xp.zeros((B, m, n), dtype=dtype)
        self.Y = xp.zeros((B, m, n), dtype=dtype)
        self.rho = xp.zeros((B, m), dtype=dtype)
        self.count = xp.zeros(B, dtype=xp.int64)
        self.head = xp.zeros(B, dtype=xp.int64)
        self.gamma = xp.ones(B, dtype=dtype)

    def reset(self, rows):
        """Forget the pairs of trajectories rows (index array): the next direction is −H0 g."""
        self.count[rows] = 0
        self.head[rows] = 0
        self.gamma[rows] = 1.0

    def push(self, rows, s, y):
        """Store (s, y) (R, n) for trajectories rows where sᵀy > _CURV_EPS·|s||y|; the others keep their memory."""
        xp = xp_of(s)
        sy = xp.sum(s * y, -1)
        yy = xp.sum(y * y, -1)
        good = sy > _CURV_EPS * xp.sqrt(xp.sum(s * s, -1) * yy)
        r = rows[good]
        if r.size == 0:
            return
        slot = self.head[r]
        self.S[r, slot], self.Y[r, slot] = s[good], y[good]
        self.rho[r, slot] = 1.0 / sy[good]
        self.gamma[r] = sy[good] / yy[good]
        self.head[r] = (slot + 1) % self.rho.shape[1]
        self.count[r] = xp.minimum(self.count[r] + 1, self.rho.shape[1])


def _two_loop(g, S, Y, rho, count, head, h0):
    """d = −H g by the two-loop recursion, vectorised over the batch.

    g (A, n); S, Y (A, m, n), rho (A, m), count (A,), head (A,) of the active trajectories; h0 the initial inverse
    Hessian: a diagonal (A, n) or (A, 1), or a matrix (A, n, n). Slots beyond a trajectory's count contribute exact
    zeros (q − 0·y == q), so mixed counts in one batch give each trajectory its solo numbers.
    """
    xp = xp_of(g)
    A, m = rho.shape
    rows = xp.arange(A)
    kmax = int(count.max()) if A else 0
    q = g.copy()
    alpha = xp.zeros((A, kmax), dtype=g.dtype)
    slots = [(head - 1 - k) % m for k in range(kmax)]  # k = 0 is the newest pair
    for k in range(kmax):
        sl, valid = slots[k], k < count
        alpha[:, k] = xp.where(valid, rho[rows, sl] * xp.sum(S[rows, sl] * q, -1), 0.0)
        q -= alpha[:, k:k + 1] * Y[rows, sl]
    r = (h0 @ q[..., None])[..., 0] if h0.ndim == 3 else h0 * q
    for k in reversed(range(kmax)):
        sl, valid = slots[k], k < count
        beta = xp.where(valid, rho[rows, sl] * xp.sum(Y[rows, sl] * r, -1), 0.0)
        r += (alpha[:, k] - beta)[:, None] * S[rows, sl]
    return -r


def _direction(mem, idx, g, scale, h0_matrix=None):
    """Search direction d (A, n), its slope gd = gᵀd (A,) and first trial step t0 (A,) for trajectories idx.

    Where the quasi-Newton direction is not a descent direction (or not finite) the memory is reset and d = −H0 g.
    Without memory and without scale, H0 = I and t0 = min(1, 1/|g|) (a first step of at most unit length, as in
    L-BFGS-B); otherwise t0 = 1 (the quasi-Newton step is meant to be taken whole). h0_matrix (B, n, n): a full
    initial inverse Hessian, overriding the diagonal one.
    """
    xp = xp_of(g)
    if h0_matrix is not None:
        fresh_h0 = h0 = h0_matrix[idx]
    else:
        fresh_h0 = xp.ones_like(g) if scale is None else 1.0 / scale[idx]
        h0 = mem.gamma[idx][:, None] * fresh_h0 if scale is None else fresh_h0
    d = _two_loop(g, mem.S[idx], mem.Y[idx], mem.rho[idx], mem.count[idx], mem.head[idx], h0)
    gd = xp.sum(g * d, -1)
    bad = ~(gd < 0) | ~xp.all(xp.isfinite(d), -1)
    if bool(bad.any()):
        mem.reset(idx[bad])
        fb = fresh_h0[bad]
        d[bad] = -((fb @ g[bad][..., None])[..., 0] if fb.ndim == 3 else fb * g[bad])
        gd[bad] = xp.sum(g[bad] * d[bad], -1)
    t0 = xp.ones_like(gd)
    if scale is None:
        fresh = mem.count[idx] == 0
        gn = xp.sqrt(xp.sum(g * g, -1))
        t0 = xp.where(fresh & (gn > 1.0), 1.0 / xp.where(gn > 1.0, gn, 1.0), t0)
    return d, gd, t0


def _line_search(value_grad, retract, x, E, g, d, gd, t0, idx, B):
    """Weak-Wolfe line search (bisection/expansion, Lewis-Overton) in lock-step for the still-searching trajectories.

    x (A, n_x), E (A,), g (A, n), d (A, n), gd (A,) = gᵀd (rows with gd ≥ 0 fail at once), t0 (A,) first trials;
    idx (A,) the trajectories in the batch of B. A trial t is an Armijo point when E(t) ≤ E + c1·t·gd (or, near
    the minimum where E cannot resolve the step, when E(t) ≤ E + round-off and the predicted decrease is itself
    below round-off, as LM).
    Only Armijo points are ever accepted, so the search is monotone. Without one, t is halved (backtracking);
    with one that fails the curvature test gᵀ(t)d ≥ c2·gd, the bracket [lo, hi] moves up (t doubles until
    bracketed). After _MAX_TRIALS the largest Armijo point found is taken.
    Returns t (A,), x_new (A, n_x), E_new (A,), g_new (A, n), ok (A,) (a step was found), nev (A,) evaluations,
    and m_new (A,) the accepted points' ctx.measure (inf when value_grad gives none).
    """
    xp = xp_of(x)
    A = x.shape[0]
    eps = xp.finfo(x.dtype).eps
    t, lo, hi = t0.copy(), xp.zeros_like(t0), xp.full_like(t0, xp.inf)
    x_new, E_new, g_new, t_acc = x.copy(), E.copy(), g.copy(), xp.zeros_like(t0)
    m_new = xp.full_like(t0, xp.inf)  # ctx.measure of the accepted point, when value_grad provides one
    ok, nev = xp.zeros(A, dtype=bool), xp.zeros(A, dtype=xp.int64)
    srch = xp.nonzero(gd < 0)[0]  # no descent (g = 0 exactly, or not finite): no step to search for
    for _ in range(_MAX_TRIALS):
        if srch.size == 0:
            break
        rows = idx[srch]
        sel = None if rows.size == B else rows
        ts, gds, Es = t[srch], gd[srch], E[srch]
        x_try = retract(x[srch], sel, ts[:, None] * d[srch])
        E_try, g_try, ctx = value_grad(x_try, sel)
        m_try = getattr(ctx, "measure", None)
        nev[srch] += 1
        band = _EPS_BAND * eps * xp.maximum(xp.abs(Es), xp.abs(E_try))
        finite = xp.isfinite(E_try) & xp.all(xp.isfinite(g_try), -1)
        armijo = finite & ((E_try <= Es + _C1 * ts * gds) | ((E_try <= Es + band) & (-ts * gds <= band)))
        curv = xp.sum(g_try * d[srch], -1) >= _C2 * gds
        a = srch[armijo]  # every Armijo point supersedes the previous one (its t is larger: lo only grows)
        x_new[a], E_new[a], g_new[a], t_acc[a], ok[a] = x_try[armijo], E_try[armijo], g_try[armijo], ts[armijo], True
        if m_try is not None:
            m_new[a] = m_try[armijo]
        lo[a], hi[srch[~armijo]] = ts[armijo], ts[~armijo]
        t[srch] = xp.where(xp.isinf(hi[srch]), 2.0 * lo[srch], 0.5 * (lo[srch] + hi[srch]))
        srch = srch[~(armijo & curv)]
    return t_acc, x_new, E_new, g_new, ok, nev, m_new


def lbfgs(value_grad, retract, x0, *, max_iter=500, tol=1e-9, history=10, scale=None, record_history=False,
          h0_matrix=None, first=None):
    """Minimise an energy over a batch of B problems in lock-step by L-BFGS with a weak-Wolfe line search.

    value_grad(x, idx) -> (E (B',), g (B', n), ctx): as for levenberg_marquardt; a ctx with a ``measure``
    attribute (B',) overrides the convergence measure, as in LM.
    retract(x, idx, dx) -> x ⊕ dx, x (B', n_x), dx (B', n).
    x0 (B, n_x); history: pairs kept per trajectory (m); scale: optional (B, n) > 0, e.g. LM's D (the diagonal of
    the Gauss-Newton Hessian): the convergence test is then max_j |g_j|/scale_j < tol, identical to LM's, and
    H0 = diag(1/scale). Without it the test is max_j |g_j| < tol and H0 = γ·I, γ = sᵀy/yᵀy of the newest pair.
    h0_matrix: optional (B, n, n) symmetric positive definite initial inverse Hessian (e.g. the inverse of a
    Gauss-Newton Hessian at x0): O(n²) per iteration instead of O(n), far fewer iterations on ill-conditioned
    problems. first: value_grad(x0, None) when the caller has already evaluated it (e.g. to build scale).
    One iteration is one accepted step (line-search trials are counted in function_evals, which includes the
    initial evaluation). A trajectory whose line search fails gets its memory reset and tries −H0 g; if that fails
    too it stops (converged False). Returns LMResult (x (B, n_x), iterations, grad_norm, converged, energy,
    energy_history, function_evals: (B,) each).
    """
    xp = xp_of(x0)
    B = x0.shape[0]
    x = x0.copy()
    E, g, ctx = value_grad(x, None) if first is None else first
    has_measure = getattr(ctx, "measure", None) is not None
    mem = _Memory(xp, B, history, g.shape[-1], g.dtype)
    iters = xp.zeros(B, dtype=xp.int64)
    fevals = xp.ones(B, dtype=xp.int64)
    conv = xp.zeros(B, dtype=bool)
    stalled = xp.zeros(B, dtype=bool)

    def gnorm_of(gi, rows):
        return xp.max(xp.abs(gi) if scale is None else xp.abs(gi) / scale[rows], axis=-1)

    gnorm = ctx.measure.copy() if has_measure else gnorm_of(g, slice(None))
    hist = [] if record_history else None
    for _ in range(max_iter):
        conv = conv | (gnorm < tol)
        idx = xp.nonzero(~conv & ~stalled)[0]
        if idx.size == 0:
            break
        gi = g[idx]
        d, gd, t0 = _direction(mem, idx, gi, scale, h0_matrix)
        had_memory = mem.count[idx] > 0  # after _direction's resets: False means d = −H0 g already
        t, x_new, E_new, g_new, ok, nev, m_new = _line_search(value_grad, retract, x[idx], E[idx], gi, d, gd, t0,
                                                              idx, B)
        fevals[idx] += nev
        acc = idx[ok]
        if acc.size:
            mem.push(acc, t[ok, None] * d[ok], g_new[ok] - gi[ok])
            x[acc], E[acc], g[acc] = x_new[ok], E_new[ok], g_new[ok]
            gnorm[acc] = m_new[ok] if has_measure else gnorm_of(g_new[ok], acc)
            iters[acc] += 1
        mem.reset(idx[~ok & had_memory])  # the curvature model misled the search: start over from −H0 g
        stalled[idx[~ok & ~had_memory]] = True  # not even −H0 g gives an Armijo point: round-off or a kink
        if record_history:
            h = xp.full(B, xp.nan, dtype=x.dtype)
            h[acc] = E[acc]
            hist.append(h)
    conv = conv | (gnorm < tol)
    return LMResult(x, iters, gnorm, conv, E, hist, fevals)
