"""A body's and a force model's constants in the flat form the compiled kernel reads.

Structural integers (joint types, parents, a parents-first link order, q/v starts, limit and quaternion index
maps) are derived from a :class:`pbad_gym.model.Body` once and cached per (body, dtype); the force model's
switches and scalars become two small arrays, so one compiled kernel serves every option set.
"""
from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np

JOINT_CODES = {"hinge": 0, "slide": 1, "universal": 2, "ball": 3, "free": 4}
FRICTION_CODES = {"viscous": 0, "coulomb": 1, "none": 2}

# indices into KernelForces.flags / KernelForces.scalars
(F_GRAVITY, F_DRAG, F_CONTACT, F_FRICTION, F_LIMITS, F_DAMPING, F_ARMATURE, F_EXACT, F_MAX_ITER, F_CONE_PASSES,
 F_CAP_APPLIED) = range(11)
(S_DT, S_TOL, S_LIMIT_K, S_CONTACT_K, S_CONTACT_D, S_MU, S_SLIP_EPS, S_HEIGHT, S_MACH_EPS, S_MU0, S_CONTACT_DN,
 S_LIMIT_D, S_CONE_TOL) = range(13)
# columns of the energy-terms output (B, N_TERMS) of the kernel's finish (integrators.state.EnergyTerms' fields):
# kinetic energy [J], actuation coefficient [√J/s], limit energy [J], contact normal energy [J], centre of mass [m]
T_KINETIC, T_ACTUATION, T_LIMITS, T_CONTACT, T_COM = 0, 1, 2, 3, 4
N_TERMS = 7


class KernelModel(NamedTuple):
    """Constants of a body with L links, nv DOFs and S contact spheres. Integers: jtype (L,) (JOINT_CODES),
    parent (L,) (-1: world), order (L,) (parents before children), q_start, v_start (L,), dof_link (nv,),
    lim_on (nv,) (1 on DOFs with a range), lim_q (nv,) (their q index), quat_q, quat_v (n_quat,) (first q / v
    index of each quaternion joint's rotation), lin_q, lin_v (linear coordinates), sph_link (S,). Floats (engine
    dtype): hess_weight (nv, nv), lim_lo, lim_hi (nv,), mass (L,), c (L, 3), S (L, 3, 3), place_R (L, 3, 3),
    place_t (L, 3), axis1, axis2 (L, 3), armature (nv,), sph_p0 (S, 3), sph_r (S,)."""

    jtype: np.ndarray
    parent: np.ndarray
    order: np.ndarray
    q_start: np.ndarray
    v_start: np.ndarray
    dof_link: np.ndarray
    lim_on: np.ndarray
    lim_q: np.ndarray
    quat_q: np.ndarray
    quat_v: np.ndarray
    lin_q: np.ndarray
    lin_v: np.ndarray
    sph_link: np.ndarray
    hess_weight: np.ndarray
    lim_lo: np.ndarray
    lim_hi: np.ndarray
    mass: np.ndarray
    c: np.ndarray
    S: np.ndarray
    place_R: np.ndarray
    place_t: np.ndarray
    axis1: np.ndarray
    axis2: np.ndarray
    armature: np.ndarray
    sph_p0: np.ndarray
    sph_r: np.ndarray


class KernelForces(NamedTuple):
    """A step's options as arrays: gravity (3,), drag (L, 3) [1/s] (zeros when off), chart (3, nv): the
    per-DOF coefficients of the joint damping b/Δt and of the armature a/Δt/Δt, and the armature's part of the
    Gauss-Newton diagonal a/(Δt·Δt) (rounded as the NumPy reference rounds each; the kernel divides by nothing
    per evaluation), flags (9,) int64 and scalars (12,) (indices F_* and S_* of
    this module)."""

    gravity: np.ndarray
    drag: np.ndarray
    chart: np.ndarray
    flags: np.ndarray
    scalars: np.ndarray


_MODELS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _i64(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.int64))


def kernel_model(body, dtype=np.float64) -> KernelModel:
    """The :class:`KernelModel` of ``body`` in ``dtype`` (built once per body and dtype)."""
    dtype = np.dtype(dtype)
    per_body = _MODELS.setdefault(body, {})
    if dtype.str not in per_body:
        per_body[dtype.str] = _build(body, dtype)
    return per_body[dtype.str]


def _build(body, dtype):
    L, nv = body.L, body.nv
    jtype = [JOINT_CODES[lk.joint.type] for lk in body.links]
    order = np.argsort(body.depth, kind="stable")  # parents sit one level above their children
    lim_on, lim_q = np.zeros(nv, np.int64), np.zeros(nv, np.int64)
    lim_lo, lim_hi = np.zeros(nv), np.zeros(nv)
    q_of_v = {int(v): int(q) for v, q in zip(body.lin_v, body.lin_q)}
    for i, lk in enumerate(body.links):
        if lk.joint.range is not None:
            for k in range(lk.joint.nv):
                j = body.v_start[i] + k
                lim_on[j], lim_q[j] = 1, q_of_v[j]
                lim_lo[j], lim_hi[j] = lk.joint.range[0][k], lk.joint.range[1][k]
    link, p0, rad = body.contact_points()
    f = lambda a: np.ascontiguousarray(np.asarray(a, dtype=dtype))  # noqa: E731
    return KernelModel(
        jtype=_i64(jtype), parent=_i64(body.parent), order=_i64(order), q_start=_i64(body.q_start),
        v_start=_i64(body.v_start), dof_link=_i64(body.dof_link), lim_on=lim_on, lim_q=lim_q,
        quat_q=_i64(body.quat_q[:, 0] if len(body.quat_q) else np.zeros(0)),
        quat_v=_i64(body.quat_v[:, 0] if len(body.quat_v) else np.zeros(0)),
        lin_q=_i64(body.lin_q), lin_v=_i64(body.lin_v), sph_link=_i64(link),
        hess_weight=f(body.hess_weight), lim_lo=f(lim_lo), lim_hi=f(lim_hi), mass=f(body.mass),
        c=f(body.first_moment.reshape(L, 3)), S=f(body.second_moment.reshape(L, 3, 3)),
        place_R=f(body.place_R), place_t=f(body.place_t), axis1=f(body.axis1), axis2=f(body.axis2),
        armature=f(body.armature), sph_p0=f(p0.reshape(-1, 3)), sph_r=f(rad.reshape(-1)))


def kernel_forces(body, forces, dt, *, max_iter, tol, hessian, dtype=np.float64) -> KernelForces:
    """The :class:`KernelForces` of a ForceModel for one step size, solver limits and Hessian choice."""
    dtype = np.dtype(dtype)
    f = lambda a: np.ascontiguousarray(np.asarray(a, dtype=dtype))  # noqa: E731
    c = forces.contact
    flags = np.zeros(11, np.int64)
    flags[F_GRAVITY] = forces.has_gravity
    flags[F_DRAG] = forces.drag is not None
    flags[F_CONTACT] = c is not None
    flags[F_FRICTION] = FRICTION_CODES[c.friction] if c is not None else FRICTION_CODES["none"]
    flags[F_LIMITS] = forces.limit_stiffness > 0  # limit damping needs a stiffness (make_force_model)
    flags[F_DAMPING] = forces.has_damping
    flags[F_ARMATURE] = body.has_armature
    flags[F_EXACT] = hessian == "exact"
    flags[F_MAX_ITER] = int(max_iter)
    if c is not None and c.friction == "coulomb" and c.friction_cap == "applied":
        flags[F_CAP_APPLIED], flags[F_CONE_PASSES] = 1, c.cone_passes
    s = np.zeros(13)
    s[S_DT], s[S_TOL], s[S_LIMIT_K], s[S_LIMIT_D] = dt, tol, forces.limit_stiffness, forces.limit_damping
    if c is not None:
        s[S_CONTACT_K], s[S_CONTACT_D], s[S_MU] = c.stiffness, c.damping, c.mu
        s[S_CONTACT_DN] = c.normal_damping
        s[S_SLIP_EPS], s[S_HEIGHT] = c.slip_velocity * dt, c.height
        s[S_CONE_TOL] = c.cone_tol
    s[S_MACH_EPS], s[S_MU0] = np.finfo(dtype).eps, 1e-6
    drag = np.zeros((body.L, 3)) if forces.drag is None else forces.drag
    damping = f(np.zeros(body.nv) if forces.damping is None else forces.damping)
    armature = f(body.armature)
    chart = f(np.stack([damping / dt, armature / dt / dt, armature / (dt * dt)]))
    return KernelForces(f(np.asarray(forces.gravity).reshape(3)), f(drag), chart, flags, s)
