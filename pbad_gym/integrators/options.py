"""Solver options of a step, typed and validated once (docs/architecture.md, "The step seam").

Each default lives here and only here: environments and the Simulator take flat keyword arguments and pack them
into these dataclasses with :meth:`SolverOptions.create` / :meth:`LCPOptions.create`.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..arrays import real_number
from ..lcp import METHODS, ORDERS

HESSIANS = ("exact", "gauss_newton")
OPTIMIZERS = ("lm", "lbfgs", "lbfgs_hessian")
COLLOCATION_ORDERS = (3, 4)
LCP_ORDERS = ORDERS + ("block",)

# iteration caps: L-BFGS takes many cheap iterations where LM takes few costly ones; on collocation's weighted
# squared residual (condition ~1e12) L-BFGS needs several times more than on the order-2 energy
_MAX_ITER = {"lm": (50, 50), "lbfgs": (500, 2000), "lbfgs_hessian": (500, 2000)}  # (order 2, collocation)
# scaled-gradient tolerance in units of q (rad, m): a few hundred ulps of a unit-scale coordinate in each dtype
_TOL = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-5}


def _positive_int(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _choice(value, name, choices):
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


@dataclass(frozen=True)
class SolverOptions:
    """How a PBAD step is solved.

    order: 2 (the PBAD energy step) or 3 / 4 (position-based collocation). optimizer: "lm", "lbfgs" (initial
    inverse Hessian: the Gauss-Newton diagonal) or "lbfgs_hessian" (the inverse Gauss-Newton Hessian at the warm
    start). max_iter: iteration cap per step. tol: scaled-gradient tolerance in units of q (rad, m).
    hessian: "exact" or "gauss_newton" (LM's model of the order-2 energy). newton_memory: order 2 with LM keeps a Newton
    memory between steps — a third-order warm start, where the extrapolation predicted the last step well, and a chord
    first iteration with the last step's factor (docs/physics.md §2.5); on by default: chains of 10 / 40 / 80 links at
    0.001 s run 1.5-3.4x as fast with it (BENCHMARKS.md, "The Newton memory"); False gives the memoryless solve (the
    same trajectories to the solver tolerance).
    """

    order: int = 2
    optimizer: str = "lm"
    max_iter: int = _MAX_ITER["lm"][0]
    tol: float = _TOL[np.dtype(np.float64)]
    hessian: str = "exact"
    newton_memory: bool = True

    def __post_init__(self):
        if isinstance(self.order, bool) or self.order not in (2,) + COLLOCATION_ORDERS:
            raise ValueError(f"order must be 2 (PBAD) or one of {COLLOCATION_ORDERS} (collocation), got "
                             f"{self.order!r}")
        _choice(self.optimizer, "optimizer", OPTIMIZERS)
        _choice(self.hessian, "hessian", HESSIANS)
        if not isinstance(self.newton_memory, (bool, np.bool_)):
            raise ValueError(f"newton_memory must be True or False, got {self.newton_memory!r}")
        object.__setattr__(self, "newton_memory", bool(self.newton_memory))
        object.__setattr__(self, "order", int(self.order))
        object.__setattr__(self, "max_iter", _positive_int(self.max_iter, "max_iter"))
        object.__setattr__(self, "tol", real_number(self.tol, "tol (solver tolerance in rad or m)", positive=True))

    @classmethod
    def create(cls, dtype=np.float64, *, order=2, optimizer="lm", max_iter=None, tol=None, hessian="exact",
               newton_memory=newton_memory):
        """Options with the defaults for ``dtype`` and ``optimizer`` filled in where max_iter / tol are None."""
        _choice(optimizer, "optimizer", OPTIMIZERS)
        if max_iter is None:
            max_iter = _MAX_ITER[optimizer][order != 2]
        if tol is None:
            tol = _TOL[np.dtype(dtype)]
        return cls(order=order, optimizer=optimizer, max_iter=max_iter, tol=tol, hessian=hessian,
                   newton_memory=newton_memory)


@dataclass(frozen=True)
class LCPOptions:
    """The impulse contact model's boxed-LCP solve (:func:`pbad_gym.lcp.solve`): method ("pgs", "psor", "amgs",
    "block_pgs"), sweep order, relaxation omega ∈ (0, 2) ("pgs", "psor", "amgs"; block PGS solves each contact
    exactly and takes 1), iterations (sweep cap) and tol (natural-map residual, mixed units of N s and m/s)."""

    method: str = "pgs"
    order: str = "default"
    omega: float = 1.0
    iterations: int = 50
    tol: float = 1e-9

    def __post_init__(self):
        _choice(self.method, "lcp_method", METHODS)
        _choice(self.order, "lcp_order", LCP_ORDERS)
        if self.method == "block_pgs" and self.order not in ("default", "random"):
            raise ValueError(f"lcp_method='block_pgs' takes lcp_order 'default' or 'random', got {self.order!r}")
        object.__setattr__(self, "iterations", _positive_int(self.iterations, "lcp_iterations"))
        object.__setattr__(self, "tol", real_number(self.tol, "lcp_tol", nonnegative=True))
        omega = real_number(self.omega, "lcp_omega (the relaxation factor ω)")
        if not 0 < omega < 2:
            raise ValueError(f"lcp_omega (the relaxation factor ω) must lie in (0, 2), got {self.omega!r}")
        if self.method == "block_pgs" and omega != 1:
            raise ValueError("lcp_omega applies to lcp_method 'pgs', 'psor' and 'amgs'; block_pgs solves each "
                             f"contact exactly and takes lcp_omega=1, got {self.omega!r}")
        object.__setattr__(self, "omega", omega)

    @classmethod
    def create(cls, *, lcp_method=method, lcp_order=order, lcp_omega=omega, lcp_iterations=iterations, lcp_tol=tol):
        """From the flat keyword names the Simulator and the envs use (defaults: the fields')."""
        return cls(method=lcp_method, order=lcp_order, omega=lcp_omega, iterations=lcp_iterations, tol=lcp_tol)

    def solve_kwargs(self):
        """Keyword arguments of :func:`pbad_gym.lcp.solve`."""
        return dict(method=self.method, order=self.order, max_iter=self.iterations, tol=self.tol, omega=self.omega)
