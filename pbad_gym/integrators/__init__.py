"""Time integrators: PBAD (position-based, order 2) and the explicit baselines."""
from .explicit import EXPLICIT, euler, rk4, semi_implicit_euler
from .pbad import HESSIANS, OPTIMIZERS, StepData, pbad_step, prepare_step, step_energy

INTEGRATORS = ("pbad",) + tuple(EXPLICIT)

__all__ = [
    "EXPLICIT", "INTEGRATORS", "HESSIANS", "OPTIMIZERS", "StepData", "euler", "rk4", "semi_implicit_euler",
    "pbad_step", "prepare_step", "step_energy",
]
