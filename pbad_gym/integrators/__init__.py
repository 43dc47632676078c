"""Time integrators behind one step contract, ``step(model, state, tau, options) -> (State, StepInfo)``:
PBAD order 2, PBAD with BDF2 inertia, position-based collocation (order 3, 4), PBAD with impulse contact, and the
explicit baselines."""
from . import bdf2, collocation, impulse, pbad
from .explicit import EXPLICIT, euler, explicit_step, rk4, semi_implicit_euler
from .impulse import CONTACT_MODELS, ImpulseContact, ImpulseState, impulse_step, make_impulse_contact
from .options import COLLOCATION_ORDERS, HESSIANS, OPTIMIZERS, LCPOptions, SolverOptions
from .pbad import StepData, pbad_step, prepare_step, step_energy
from .state import State, StepInfo, StepModel

PBAD_INTEGRATORS = ("pbad", "bdf2")  # those that minimise PBAD's step energy
INTEGRATORS = PBAD_INTEGRATORS + tuple(EXPLICIT)

__all__ = [
    "EXPLICIT", "INTEGRATORS", "PBAD_INTEGRATORS", "HESSIANS", "OPTIMIZERS", "COLLOCATION_ORDERS", "CONTACT_MODELS",
    "StepData",
    "euler", "rk4", "semi_implicit_euler", "explicit_step", "pbad_step", "prepare_step", "step_energy",
    "impulse_step", "ImpulseContact", "ImpulseState", "make_impulse_contact", "SolverOptions", "LCPOptions",
    "State", "StepInfo", "StepModel", "pbad", "bdf2", "collocation", "impulse",
]
