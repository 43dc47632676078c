"""Batched optimisers with per-trajectory convergence masks."""
from .lbfgs import lbfgs
from .lm import LMResult, levenberg_marquardt

__all__ = ["levenberg_marquardt", "lbfgs", "LMResult"]
