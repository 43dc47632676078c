"""Batched optimisers with per-trajectory convergence masks."""
from .lm import LMResult, levenberg_marquardt

__all__ = ["levenberg_marquardt", "LMResult"]
