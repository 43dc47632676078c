"""One optimiser front end for every implicit step: LM or L-BFGS chosen by SolverOptions."""
from __future__ import annotations

from ..optim import lbfgs, levenberg_marquardt


def minimize(value_grad, retract, x0, options, *, hessian, initial_inverse, record_history=False, max_iter=None,
             **lm_kwargs):
    """Minimise a batched energy with the optimiser of ``options`` (a SolverOptions).

    value_grad(x, idx) -> (E (B',), g (B', n), ctx); retract(x, idx, dx) -> x ⊕ dx; x0 (B, n_x).
    hessian(ctx) -> (H (B', n, n) or its square-root factor with ``sqrt_hessian=True``, D (B', n)): LM's model.
    initial_inverse(ctx, matrix) -> (D (B, n), H0 (B, n, n) or None): L-BFGS's scale (the Gauss-Newton diagonal,
    which also makes its stopping test LM's) and, when ``matrix`` ("lbfgs_hessian"), its initial inverse Hessian.
    max_iter: the iteration budget when not ``options``' (LM only; 0 evaluates the start and stops).
    lm_kwargs: further options of :func:`pbad_gym.optim.levenberg_marquardt`. Returns an LMResult.
    """
    if options.optimizer == "lm":
        return levenberg_marquardt(value_grad, hessian, retract, x0,
                                   max_iter=options.max_iter if max_iter is None else max_iter, tol=options.tol,
                                   record_history=record_history, **lm_kwargs)
    first = value_grad(x0, None)
    D, h0 = initial_inverse(first[2], options.optimizer == "lbfgs_hessian")
    return lbfgs(value_grad, retract, x0, max_iter=options.max_iter, tol=options.tol, scale=D,
                 record_history=record_history, h0_matrix=h0, first=first)
