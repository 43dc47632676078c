"""A step's options in the form the compiled kernels read: one NamedTuple of named scalars and three small arrays.

The kernels cannot read the engine's option dataclasses (:class:`~pbad_gym.integrators.options.SolverOptions`, the
:class:`~pbad_gym.energies.ForceModel` and its :class:`~pbad_gym.energies.GroundContact`), so
:func:`step_constants` converts them once per simulation; every value comes from them (no defaults here), and one
compiled kernel serves every option set because the switches are numbers, not types. The model itself is the
engine's :class:`~pbad_gym.model.body_arrays.BodyArrays`, read field by field.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...integrators.bdf2 import STEP_SCALE
from ...optim.lm import MU0

FRICTION_CODES = {"viscous": 0, "coulomb": 1, "none": 2}
# columns of the divergence guard's energy terms (…, N_TERMS) (step.energy_terms_numba; envs.divergence.EnergyTerms):
# kinetic energy [J], actuation coefficient [√J/s], limit energy [J], contact normal energy [J], centre of mass [m]
T_KINETIC, T_ACTUATION, T_LIMITS, T_CONTACT, T_COM = 0, 1, 2, 3, 4
N_TERMS = 7


class StepConstants(NamedTuple):
    """One step's options for a body with L links and nv DOFs. Arrays (engine dtype): gravity (3,) [m/s²], drag
    (L, 3) [1/s] (zeros when off), chart (3, nv): the per-DOF coefficients of the joint damping b/Δt and of the
    armature a/Δt/Δt, and the armature's part of the Gauss-Newton diagonal a/(Δt·Δt) (rounded as the NumPy
    reference rounds each), spring (nv,) [N m/rad or N/m] and spring_rest (nq,) (zeros when off). Switches (int):
    has_gravity, has_drag, has_contact, friction (FRICTION_CODES), has_limits, has_damping, has_armature,
    has_spring, exact (the exact Hessian, else Gauss-Newton), max_iter, cone_passes,
    cap_applied (Coulomb friction capped by the applied normal force), onset_step (friction_onset "step": the
    spheres the step pushes join the active set in the cap's fixed point), newton_memory (the LM's Newton memory:
    integrators/newton.py), limit_trap and contact_trap (the limits' / the ground's penalty springs "trapezoidal":
    energies/penalty.py), bdf2 (integrators/bdf2.py: the step's energy with BDF2 differences; its dt is then
    Δt' = 2Δt/3). Scalars (float64): dt [s] (the step energy's), tol (units of
    q), limit_k, limit_d, contact_k, contact_d, contact_dn, mu, slip_eps (slip velocity × Δt [m]), height [m],
    cone_tol, mach_eps (the engine dtype's epsilon), mu0 (the LM's initial damping)."""

    gravity: np.ndarray
    drag: np.ndarray
    chart: np.ndarray
    spring: np.ndarray
    spring_rest: np.ndarray
    has_gravity: int
    has_drag: int
    has_contact: int
    friction: int
    has_limits: int
    has_damping: int
    has_armature: int
    has_spring: int
    exact: int
    max_iter: int
    cone_passes: int
    cap_applied: int
    onset_step: int
    newton_memory: int
    limit_trap: int
    contact_trap: int
    bdf2: int
    dt: float
    tol: float
    limit_k: float
    limit_d: float
    contact_k: float
    contact_d: float
    contact_dn: float
    mu: float
    slip_eps: float
    height: float
    cone_tol: float
    mach_eps: float
    mu0: float


# StepConstants' array fields (the others are numbers), from its annotations: a new field is one line above
ARRAY_FIELDS = tuple(k for k, t in StepConstants.__annotations__.items()
                     if getattr(t, "__forward_arg__", t) in ("np.ndarray", np.ndarray))


def step_constants(body, forces, dt, options, dtype=np.float64, integrator="pbad") -> StepConstants:
    """The :class:`StepConstants` of a ForceModel ``forces``, step size ``dt`` [s] and SolverOptions ``options``
    (its max_iter, tol, hessian and newton_memory) for ``body`` in the engine ``dtype``; ``integrator`` "pbad"
    or "bdf2" (whose energy terms take Δt' = STEP_SCALE·Δt)."""
    dtype = np.dtype(dtype)
    bdf2 = integrator == "bdf2"
    if bdf2:
        dt = STEP_SCALE * float(dt)
    f = lambda a: np.ascontiguousarray(np.asarray(a, dtype=dtype))  # noqa: E731
    c = forces.contact
    coulomb_applied = c is not None and c.friction == "coulomb" and c.friction_cap == "applied"
    drag = np.zeros((body.L, 3)) if forces.drag is None else forces.drag
    damping = f(np.zeros(body.nv) if forces.damping is None else forces.damping)
    armature = f(body.armature)
    chart = f(np.stack([damping / dt, armature / dt / dt, armature / (dt * dt)]))
    spring = f(np.zeros(body.nv) if forces.spring is None else forces.spring)
    spring_rest = f(np.zeros(body.nq) if forces.spring_rest is None else forces.spring_rest)
    dt = float(dt)
    return StepConstants(
        gravity=f(np.asarray(forces.gravity).reshape(3)), drag=f(drag), chart=chart, spring=spring,
        spring_rest=spring_rest, has_spring=int(forces.has_spring),
        has_gravity=int(forces.has_gravity), has_drag=int(forces.drag is not None), has_contact=int(c is not None),
        friction=FRICTION_CODES[c.friction] if c is not None else FRICTION_CODES["none"],
        has_limits=int(forces.limit_stiffness > 0),  # limit damping needs a stiffness (make_force_model)
        has_damping=int(forces.has_damping), has_armature=int(body.has_armature),
        exact=int(options.hessian == "exact"), max_iter=int(options.max_iter),
        cone_passes=int(c.cone_passes) if coulomb_applied else 0, cap_applied=int(coulomb_applied),
        onset_step=int(c is not None and c.friction_onset == "step"),
        newton_memory=int(options.newton_memory and not bdf2),  # (BDF2 starts from q̂, as bdf2.py)
        limit_trap=int(forces.limit_springs == "trapezoidal"),
        contact_trap=int(c is not None and c.springs == "trapezoidal"), bdf2=int(bdf2),
        dt=dt, tol=float(options.tol), limit_k=float(forces.limit_stiffness), limit_d=float(forces.limit_damping),
        mach_eps=float(np.finfo(dtype).eps), mu0=MU0, **_contact(c, dt))


def _contact(c, dt):
    """The contact scalars of :class:`StepConstants` for GroundContact ``c`` (zeros without contact)."""
    if c is None:
        return dict(contact_k=0.0, contact_d=0.0, contact_dn=0.0, mu=0.0, slip_eps=0.0, height=0.0, cone_tol=0.0)
    return dict(contact_k=float(c.stiffness), contact_d=float(c.damping), contact_dn=float(c.normal_damping),
                mu=float(c.mu), slip_eps=float(c.slip_velocity * dt), height=float(c.height),
                cone_tol=float(c.cone_tol))
