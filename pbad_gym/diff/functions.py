"""torch.autograd.Functions over the engine: one PBAD step, the state velocity, the centre of mass and the ground
forces.

Forward runs on the Simulator's backend (numba kernel or NumPy), float64; the step's backward on the same backend
(the kernel's compiled adjoint, :mod:`pbad_gym.kernels.numba.vjp`, or :mod:`pbad_gym.integrators.adjoint`), the rest
of the backward in NumPy (:mod:`pbad_gym.integrators.contact_adjoint`,
:func:`pbad_gym.kinematics.difference_vjp`, :func:`pbad_gym.dynamics.centre_of_mass_vjp`). Cotangents cross the
torch boundary on configuration coordinates (quaternion components included) and are turned into tangent ones
(:func:`pbad_gym.kinematics.tangent_cotangent`) inside.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..arrays import tree_map
from ..dynamics import centre_of_mass as _com, centre_of_mass_vjp
from ..energies.contact import ContactMemory, contact_state, sphere_forces
from ..integrators.adjoint import step_vjp
from ..integrators.contact_adjoint import memory_of, memory_vjp, points_to_tangent, sphere_force_vjp
from ..integrators.pbad import prepare_step, solve_remembering
from ..kinematics import coordinate_cotangent, difference, difference_vjp, forward_kinematics, tangent_cotangent

NONCONVERGED = ("raise", "mask")


def torch_module():
    """torch, or an ImportError naming the extra."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("pbad_gym.diff needs torch: pip install 'pbad_gym[rl]'") from err
    return torch


@dataclasses.dataclass
class StepSpec:
    """What a differentiable step needs of its Simulator, and what it carries between steps: the contact memory
    of the next q_k (NumPy), the Newton memory (integrators/newton.py: how the solver starts, not what it
    solves, so the gradients do not depend on it) and the count of rows whose gradient was masked."""

    body: object
    forces: object
    dt: float
    options: object
    nonconverged: str = "raise"
    info: dict = dataclasses.field(default_factory=lambda: {"masked": 0})
    memory: object = None
    kernel: bool = False  # forward and the step's backward on the numba kernel (the Simulator's backend)
    failed: object = None  # (B,) bool: rows whose step failed (unconverged or non-finite) since the caller reset it
    newton: object = None

    @classmethod
    def of(cls, sim, nonconverged="raise", info=None):
        if nonconverged not in NONCONVERGED:
            raise ValueError(f"nonconverged must be one of {NONCONVERGED}, got {nonconverged!r}")
        info = {} if info is None else info
        info.setdefault("masked", 0)
        return cls(sim.body, sim.forces, sim.dt, sim.options, nonconverged, info,
                   kernel=getattr(sim, "backend", "numpy") == "numba")


def forward_step(spec, qp, qc, ta, memory):
    """One step from (q_{k−1}, q_k) (B, nq) under τ (B, nv) with the contact memory of q_k: (q_{k+1}, converged
    (B,), measure (B,), StepData or None (kernel steps rebuild it in backward), the next contact memory)."""
    body, params = spec.body, spec.forces.contact
    if spec.kernel:
        from ..kernels.numba.step import kernel_step

        o = spec.options
        r = kernel_step(body, qp, qc, ta, spec.dt, spec.forces, max_iter=o.max_iter, tol=o.tol, hessian=o.hessian,
                        contact=memory, finish=params is not None, newton=spec.newton,
                        newton_memory=o.newton_memory)
        spec.newton = r.newton
        # r.contact: the fields (P, active, normal, anchor) of a ContactMemory (its step-only shift None)
        nxt = None if params is None else tree_map(np.array, ContactMemory(*r.contact))
        return r.q, np.asarray(r.converged), np.asarray(r.grad_norm), None, nxt
    data = prepare_step(body, qp, qc, ta, spec.dt, spec.forces, contact=memory)
    qn, res, data, spec.newton = solve_remembering(body, data, spec.options, qp, spec.newton)
    nxt = None if params is None else contact_state(body, forward_kinematics(body, qn), params, spec.dt,
                                                    prev=data.contact)
    return qn, np.asarray(res.converged), np.asarray(res.grad_norm), data, nxt


def step_cotangents(spec, data, inputs, qn, grad_q, grad_anchor, fresh):
    """A step's backward: the cotangent grad_q (B, nq) on its solution's coordinates and grad_anchor (B, S, 3) on
    its new contact memory's anchors (None: zero) pulled back to the inputs (q_prev, q_cur, tau, contact memory):
    StepCotangents with q_prev, q_cur on coordinates (B, nq), tau (B, nv), anchor (B, S, 3) (heights 0) or None.
    ``fresh``: the memory's anchors were the centres of q_cur (their cotangent goes to q_cur too). By the kernel in
    one compiled call when the forward ran on it (``data`` None), else by the NumPy adjoint on the forward's
    StepData."""
    qp, qc, ta, memory = inputs
    body, params = spec.body, spec.forces.contact
    if data is None:
        from ..kernels.numba.vjp import step_backward_numba

        return step_backward_numba(body, spec.forces, spec.dt, qp, qc, ta, qn, grad_q, grad_anchor, memory, fresh)
    gbar = tangent_cotangent(body, qn, grad_q)
    a_mem = 0.0
    if grad_anchor is not None:  # (memory_vjp reads the anchors and the active set of q_k)
        g_mem, a_mem = memory_vjp(body, params, spec.dt, forward_kinematics(body, qn), memory, grad_anchor)
        gbar = gbar + g_mem
    ct = step_vjp(body, data, qp, qn, gbar)[0]
    g_cur, g_anchor = ct.q_cur, None if ct.anchor is None else ct.anchor + a_mem
    if g_anchor is not None:
        g_anchor[..., 2] = 0.0  # the anchors' height is never read
        if fresh:
            g_cur = g_cur + points_to_tangent(body, data.kin_ref, g_anchor)
    return ct._replace(q_prev=coordinate_cotangent(body, qp, ct.q_prev), q_cur=coordinate_cotangent(body, qc, g_cur),
                       anchor=g_anchor)


def host(x):
    """A tensor as a float64 NumPy array (detached, on the host)."""
    return x.detach().cpu().numpy().astype(np.float64)


def _like(x):
    return dict(dtype=x.dtype, device=x.device)


def _finite(g):
    """g (B, n) with the rows that hold a non-finite value zeroed: a failed row passes no gradient on (and no NaN
    into the rows it never touched)."""
    bad = ~np.isfinite(g).all(1)
    if bad.any():
        g = g.copy()
        g[bad] = 0.0
    return g


@functools.lru_cache(maxsize=None)
def functions():
    """The autograd Functions (built on first use, so that importing pbad_gym needs no torch)."""
    torch = torch_module()

    class Step(torch.autograd.Function):
        """(q_{k−1}, q_k, anchors or None, τ) -> (q_{k+1}, next anchors or None) of one order-2 step."""

        @staticmethod
        def forward(ctx, q_prev, q, anchor, tau, spec, t):
            qp, qc, ta = host(q_prev), host(q), host(tau)
            body, params = spec.body, spec.forces.contact
            memory = None
            if params is not None:  # None anchors: a fresh memory, every anchor at its sphere's centre
                memory = contact_state(body, forward_kinematics(body, qc), params, spec.dt) if anchor is None \
                    else spec.memory._replace(anchor=host(anchor))
            qn, converged, measure, data, nxt = forward_step(spec, qp, qc, ta, memory)
            bad = ~converged | ~np.isfinite(qn).all(1)
            spec.failed = bad if spec.failed is None else spec.failed | bad
            if bad.any() and spec.nonconverged == "raise":
                rows = np.nonzero(bad)[0].tolist()
                raise RuntimeError(f"step {t}: the solver did not converge on rows {rows} (gradient norm "
                                   f"{measure[bad].max():.3g}); pass nonconverged='mask' to cut their gradient "
                                   "instead, or shorten dt / raise max_iter")
            anchor_next = None
            if params is not None:
                spec.memory = nxt
                anchor_next = torch.as_tensor(nxt.anchor, **_like(tau))
            ctx.step = (spec, data, (qp, qc, ta, memory), qn, bad, anchor is None)
            return torch.as_tensor(qn, **_like(tau)), anchor_next

        @staticmethod
        def backward(ctx, grad, grad_anchor):
            spec, data, inputs, qn, bad, fresh = ctx.step
            ga = None if grad_anchor is None or spec.forces.contact is None else host(grad_anchor)
            g_prev, g_cur, g_tau, g_anchor = step_cotangents(spec, data, inputs, qn, host(grad), ga, fresh)
            singular = ~bad & ~np.isfinite(g_tau).all(1)  # the kernel's adjoint leaves NaN where A is singular
            if singular.any():
                if spec.nonconverged == "raise":
                    raise RuntimeError(f"the step's adjoint system is singular on rows {np.nonzero(singular)[0]}; "
                                       "pass nonconverged='mask' to cut their gradient instead")
                bad = bad | singular
            if bad.any():
                spec.info["masked"] += int(bad.sum())
                for a in (g_prev, g_cur, g_tau) + (() if g_anchor is None else (g_anchor,)):
                    a[bad] = 0.0
            like = _like(grad)
            return (torch.as_tensor(g_prev, **like), torch.as_tensor(g_cur, **like),
                    None if fresh or g_anchor is None else torch.as_tensor(g_anchor, **like),
                    torch.as_tensor(g_tau, **like), None, None)

    class Velocity(torch.autograd.Function):
        """(q_{k−1}, q_k) -> (q_k ⊖ q_{k−1})/Δt (B, nv): order 2's velocity."""

        @staticmethod
        def forward(ctx, q_prev, q, body, dt):
            qp, qc = host(q_prev), host(q)
            ctx.args = (body, dt, qp, qc)
            return torch.as_tensor(difference(body, qp, qc) / dt, **_like(q))

        @staticmethod
        def backward(ctx, grad):
            body, dt, qp, qc = ctx.args
            g0, g1 = (_finite(g) for g in difference_vjp(body, qp, qc, host(grad) / dt))
            like = _like(grad)
            return (torch.as_tensor(coordinate_cotangent(body, qp, g0), **like),
                    torch.as_tensor(coordinate_cotangent(body, qc, g1), **like), None, None)

    class CentreOfMass(torch.autograd.Function):
        """q -> centre of mass (B, 3) [m]."""

        @staticmethod
        def forward(ctx, q, body):
            qc = host(q)
            kin = forward_kinematics(body, qc)
            ctx.args = (body, qc, kin)
            return torch.as_tensor(_com(body, kin=kin), **_like(q))

        @staticmethod
        def backward(ctx, grad):
            body, qc, kin = ctx.args
            g = _finite(centre_of_mass_vjp(body, kin, host(grad)))
            return torch.as_tensor(coordinate_cotangent(body, qc, g), **_like(grad)), None

    class ContactForces(torch.autograd.Function):
        """(q_{k+1}, q_k, q_k's anchors or None) -> the ground force on each sphere (B, S, 3) [N] the step applied
        (None anchors: a fresh memory, as after a reset: the spring force, no friction)."""

        @staticmethod
        def forward(ctx, q_next, q, anchor, spec):
            body, params = spec.body, spec.forces.contact
            qn, qc = host(q_next), host(q)
            kn, kc = forward_kinematics(body, qn), forward_kinematics(body, qc)
            memory = memory_of(body, params, spec.dt, kc, None if anchor is None else host(anchor), kn)
            ctx.args = (spec, qn, qc, kn, kc, memory, anchor is None)
            return torch.as_tensor(sphere_forces(body, kn, params, memory, spec.dt), **_like(q_next))

        @staticmethod
        def backward(ctx, grad):
            spec, qn, qc, kn, kc, memory, fresh = ctx.args
            body = spec.body
            g_next, g_Pk, g_anchor = sphere_force_vjp(body, spec.forces.contact, spec.dt, kn, memory, host(grad))
            g_anchor[..., 2] = 0.0  # the anchors' height is never read
            g_cur = points_to_tangent(body, kc, g_Pk + (g_anchor if fresh else 0.0))
            like = _like(grad)
            return (torch.as_tensor(coordinate_cotangent(body, qn, _finite(g_next)), **like),
                    torch.as_tensor(coordinate_cotangent(body, qc, _finite(g_cur)), **like),
                    None if fresh else torch.as_tensor(g_anchor, **like), None)

    return dataclasses.make_dataclass("Functions", ["step", "velocity", "centre_of_mass", "contact_forces"])(
        Step.apply, Velocity.apply, CentreOfMass.apply, ContactForces.apply)
