"""Batched Levenberg-Marquardt on a manifold (docs/physics.md §2).

Trajectories iterate in lock-step, and each trajectory's numbers are the ones it would get alone. Two ways to
leave converged trajectories behind:

- compacted (the default on NumPy): converged ones drop out of the working set, so the arithmetic shrinks with
  them; gathering the rows that go on needs their indices on the host (``nonzero``) several times an iteration;
- masked (the default on device arrays): every iteration runs on the whole batch and ``where`` freezes converged
  rows, so nothing has a data-dependent shape and the one host synchronisation per iteration is the "has every
  trajectory converged?" test (plus one per round of μ growth after a rejection, see STEP_SHRINK, each in place
  of an iteration) — on a GPU a few redundant rows cost less than a device-to-host round trip.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arrays import host_bool, host_int, xp_of

_EPS_BAND = 64.0  # round-off band in units of machine epsilon · |E|
# The damping schedule (the compiled kernel imports these: kernels/numba/lm.py).
# μ scales the Gauss-Newton diagonal D. Restarting a rejected step at μ = 0.1 instead of 1e-6 (each decade below
# ~0.01 costs an energy evaluation without changing the step) takes 9-20 % of the Spiders' LM iterations away, but
# on Spider-v1 under random actions it left 1-2 of 16,000 steps stuck at a contact kink (max_iter) where 1e-6 left
# none (BENCHMARKS.md, "The LM damping schedule after a rejection"): kept at 1e-6.
MU_SHRINK = 3.0  # μ ÷ this after an accepted step
MU_GROW = 10.0  # μ × this after a rejected step ...
MU_AFTER_REJECT = 1e-6  # ... and at least this
MU0 = 1e-6  # the damping every solve starts from
MU_MAX = 1e12
# After a rejection, μ grows (× MU_GROW, solves only) until the next trial step is at most this fraction of the
# rejected one's length in the D-norm √(Σ D_j δ_j²), before the energy is evaluated again. A rejection at small μ
# otherwise costs an energy evaluation per decade of μ that barely changes the step (from 1e-6, where μ·D is
# negligible beside H, up to where it starts to shorten it); skipping them took 10 % of Spider-v2's iterations
# and 22 % of Spider-v1's away (BENCHMARKS.md, "Shorter steps after a rejection").
STEP_SHRINK = 0.5


@dataclass
class LMResult:
    """Solution x (B, n_x) and per-trajectory diagnostics: iterations (B,), grad_norm (B,) (the scaled gradient
    max_j |g_j| / D_j, in units of x), converged (B,), energy (B,), and energy_history (list of (B,) arrays of the
    accepted energy after each iteration, NaN where inactive) when requested; function_evals (B,) the energy/gradient
    evaluations per trajectory where the optimiser reports them (L-BFGS; None for LM); system (LM with
    ``track_system``): the last damped system each trajectory solved, a :class:`SolvedSystem`."""

    x: object
    iterations: object
    grad_norm: object
    converged: object
    energy: object
    energy_history: list | None = None
    function_evals: object = None
    system: object = None


@dataclass
class SolvedSystem:
    """Per trajectory, the last damped system (H + μ·diag(D)) δ = −g an LM run solved: H (B, n, n), D (B, n),
    mu (B,), finite (B,) bool (its step was finite) and solved (B,) bool (False: no solve in this run, the other
    fields meaningless) — what the Newton memory keeps (integrators/newton.py)."""

    H: object
    D: object
    mu: object
    finite: object
    solved: object

    @classmethod
    def empty(cls, B, n, like):
        xp = xp_of(like)
        return cls(xp.zeros((B, n, n), like.dtype), xp.zeros((B, n), like.dtype), xp.zeros(B, like.dtype),
                   xp.zeros(B, dtype=bool), xp.zeros(B, dtype=bool))

    def record(self, rows, H, D, mu, finite):
        self.H[rows], self.D[rows], self.mu[rows], self.finite[rows], self.solved[rows] = H, D, mu, finite, True


def _compacts(xp) -> bool:
    """The default of ``compact``: True for NumPy, False for device array modules (CuPy)."""
    return xp.__name__ == "numpy"


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


def levenberg_marquardt(value_grad, hessian, retract, x0, *, max_iter=50, tol=1e-9, mu0=MU0,
                        record_history=False, sqrt_hessian=False, compact=None, track_system=False):
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
    After a rejection μ grows by solves alone until the next trial is at most STEP_SHRINK of the rejected step
    (D-norm), so that no energy is evaluated at a μ that leaves the rejected step as it was.
    compact: drop converged trajectories from the working set (True) or freeze them by masks (False); None picks
    True on NumPy arrays and False on device arrays (see the module docstring). Both give the same numbers.
    track_system: report each trajectory's last damped system in LMResult.system (compacted runs only).
    """
    xp = xp_of(x0)
    if not (_compacts(xp) if compact is None else compact):
        if track_system:
            raise ValueError("track_system needs the compacted LM (compact=True)")
        return _lm_masked(value_grad, hessian, retract, x0, max_iter, tol, mu0, record_history, sqrt_hessian)
    B = x0.shape[0]
    x, E, g, H, D, mu, iters, conv, gnorm, limit = _start(value_grad, hessian, x0, mu0)
    history = [] if record_history else None
    system = SolvedSystem.empty(B, g.shape[-1], g) if track_system else None
    eps = xp.finfo(x.dtype).eps
    for _ in range(max_iter):
        conv = conv | (gnorm < tol)
        idx = xp.nonzero(~conv)[0]
        if idx.size == 0:
            break
        # all active (the common case): slices give views instead of fancy-index copies
        sel, ix = (None, slice(None)) if idx.size == B else (idx, idx)
        gi, Hi, Di, Ei = g[ix], H[ix], D[ix], E[ix]
        dx, pred, ok, mu_i, length2 = _trial_step(Hi, Di, mu[ix], gi, sqrt_hessian, limit[ix])
        if system is not None:
            system.record(ix, Hi, Di, mu_i, ok)
        x_try = retract(x[ix], sel, dx)
        E_try, g_try, ctx_try = value_grad(x_try, sel)
        accept = ok & _acceptable(Ei, E_try, pred, eps)
        iters[ix] += 1
        mu[ix] = _next_damping(mu_i, accept)
        limit[ix] = _next_limit(length2, accept, ok)
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
    return LMResult(x, iters, gnorm, conv, E, history, system=system)


def _start(value_grad, hessian, x0, mu0):
    """LM's state at x0 (B, n_x): x (a copy), E, g, H, D, μ = mu0, iteration counts 0, converged False, and the
    convergence measure."""
    xp = xp_of(x0)
    B = x0.shape[0]
    x = x0.copy()
    E, g, ctx = value_grad(x, None)
    H, D = hessian(ctx)
    mu = xp.full(B, mu0, dtype=x.dtype)
    limit = xp.full(B, xp.inf, dtype=x.dtype)
    return x, E, g, H, D, mu, xp.zeros(B, dtype=xp.int64), xp.zeros(B, dtype=bool), _measure(g, D, ctx), limit


def _trial_step(H, D, mu, g, sqrt_hessian, limit, masked=False, shorten=True):
    """The damped step δ (B', n) (zero where the solve failed), its predicted decrease (B',), whether it is
    finite (B',), the damping μ (B',) it was solved with and its squared D-norm Σ_j D_j δ_j² (B',). Where that
    norm exceeds ``limit`` (B',) (after a rejection: :func:`_next_limit`), μ grows (× MU_GROW, at most MU_MAX)
    and the step is solved again until it does not. ``masked``: grow by ``where`` over the whole batch, one host
    decision per round, and only when ``shorten`` (the caller knows whether any row was just rejected)."""
    xp = xp_of(g)
    dx = _solve_damped(H, D, mu, g, sqrt_hessian)
    length2 = xp.sum(D * dx * dx, -1)
    if masked:
        while shorten:  # every row solved again, the rows that are within their limits kept as they were
            over = (length2 > limit) & xp.isfinite(length2) & (mu < MU_MAX)
            if not host_bool(xp.any(over), "lm: a rejected step to shorten"):
                break
            mu = xp.where(over, xp.minimum(mu * MU_GROW, MU_MAX), mu)
            dx = xp.where(over[:, None], _solve_damped(H, D, mu, g, sqrt_hessian), dx)
            length2 = xp.sum(D * dx * dx, -1)
    else:
        mu = mu.copy()
        while True:
            rows = xp.nonzero((length2 > limit) & xp.isfinite(length2) & (mu < MU_MAX))[0]
            if rows.size == 0:
                break
            mu[rows] = xp.minimum(mu[rows] * MU_GROW, MU_MAX)
            dx[rows] = _solve_damped(H[rows], D[rows], mu[rows], g[rows], sqrt_hessian)
            length2[rows] = xp.sum(D[rows] * dx[rows] * dx[rows], -1)
    # the model's decrease −(g·δ + ½ δᵀHδ), with Hδ = −g − μDδ from the system δ solves (also FᵀF for the
    # square-root form): ½(μ‖δ‖²_D − g·δ), a sum of two non-negative terms where the direct form cancels
    pred = 0.5 * (mu * length2 - xp.sum(g * dx, -1))
    ok = xp.all(xp.isfinite(dx), -1)
    return xp.where(ok[:, None], dx, 0.0), pred, ok, mu, length2


def _next_limit(length2, accept, ok):
    """The squared D-norm (B',) the next trial step may have: unlimited after an accepted or a failed (non-finite)
    trial, STEP_SHRINK² × the rejected step's after a rejection."""
    xp = xp_of(length2)
    return xp.where(accept | ~ok, xp.inf, (STEP_SHRINK * STEP_SHRINK) * length2)


def _acceptable(E, E_try, pred, eps):
    """The accept test (B',) bool: a decrease, or a rise within round-off when the model predicts no more."""
    xp = xp_of(E)
    band = _EPS_BAND * eps * xp.maximum(xp.abs(E), xp.abs(E_try))
    return (E_try < E) | ((E_try <= E + band) & (pred <= band))


def _next_damping(mu, accept):
    """μ after an accepted (÷ MU_SHRINK) or rejected (× MU_GROW, at least MU_AFTER_REJECT, at most MU_MAX) step.
    μ = 0 is allowed (pure Newton while steps are accepted); a rejection restarts damping at MU_AFTER_REJECT."""
    xp = xp_of(mu)
    return xp.where(accept, mu / MU_SHRINK, xp.minimum(xp.maximum(mu * MU_GROW, MU_AFTER_REJECT), MU_MAX))


def _lm_masked(value_grad, hessian, retract, x0, max_iter, tol, mu0, record_history, sqrt_hessian):
    """:func:`levenberg_marquardt` with converged trajectories frozen by masks instead of dropped: the same
    numbers per trajectory (the energy, gradient and Hessian of one row do not depend on the others), one host
    decision per iteration."""
    xp = xp_of(x0)
    x, E, g, H, D, mu, iters, conv, gnorm, limit = _start(value_grad, hessian, x0, mu0)
    history = [] if record_history else None
    eps = xp.finfo(x.dtype).eps
    for _ in range(max_iter):
        conv = conv | (gnorm < tol)
        active = ~conv
        limit = xp.where(active, limit, xp.inf)
        # one host decision: whether any row goes on (bit 0) and whether one of them was just rejected (bit 1)
        code = host_int(xp.any(active) + 2 * xp.any(xp.isfinite(limit)), "lm: any trajectory not converged")
        if not code & 1:
            break
        dx, pred, ok, mu_t, length2 = _trial_step(H, D, mu, g, sqrt_hessian, limit, masked=True,
                                                  shorten=bool(code & 2))
        x_try = retract(x, None, dx)
        E_try, g_try, ctx_try = value_grad(x_try, None)
        accept = active & ok & _acceptable(E, E_try, pred, eps)
        iters = iters + active
        mu = xp.where(active, _next_damping(mu_t, accept), mu)
        limit = xp.where(active, _next_limit(length2, accept, ok), limit)
        gn_try = _measure(g_try, D, ctx_try)
        need = accept & (gn_try >= tol)
        H_new, D_new = hessian(ctx_try)
        m = getattr(ctx_try, "measure", None)
        gn_new = m if m is not None else xp.max(xp.abs(g_try) / D_new, axis=-1)
        gn_try = xp.where(need, gn_new, gn_try)
        H = xp.where(need.reshape((-1,) + (1,) * (H.ndim - 1)), H_new, H)
        D = xp.where(need[:, None], D_new, D)
        x = xp.where(accept[:, None], x_try, x)
        E, g, gnorm = xp.where(accept, E_try, E), xp.where(accept[:, None], g_try, g), xp.where(accept, gn_try, gnorm)
        if record_history:
            history.append(xp.where(accept, E, xp.nan))
    conv = conv | (gnorm < tol)
    return LMResult(x, iters, gnorm, conv, E, history)
