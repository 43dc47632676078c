"""Standalone batched boxed-LCP library (docs/physics.md §5): PGS, PSOR, AMGS, block PGS; dense or matrix-free.

    w = Aλ + b,  lo ≤ λ ≤ hi,  w ⟂ λ,   batch axis first, NumPy or CuPy arrays.

Depends only on numpy/scipy and :mod:`pbad_gym.arrays`.
"""
from .blocks import build_blocks, solve_block
from .friction import Friction, effective_bounds
from .orders import NAMED as ORDERS
from .problems import (ContactProblem, random_contact_problem, random_spd_problem, sliding_capsule,
                       stack_problems, three_sphere_body)
from .residual import natural_map, natural_residual, reduce_residual
from .solver import METHODS, LCPResult, solve

__all__ = [
    "solve", "LCPResult", "METHODS", "ORDERS", "Friction", "effective_bounds", "natural_map", "natural_residual",
    "reduce_residual", "build_blocks", "solve_block", "ContactProblem", "sliding_capsule", "three_sphere_body",
    "random_contact_problem", "random_spd_problem", "stack_problems",
]
