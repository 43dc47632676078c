"""PBAD order-2 step (docs/physics.md §2): q_{k+1} = argmin E(q) with

    E(q) = 1/(2Δt²) ∫ρ ‖P(q) − 2P(q_k) + P(q_{k−1})‖² + U(q) − τᵀ(q ⊖ q_k) + drag, contact, limits, damping,
           armature

solved by batched Levenberg-Marquardt from the warm start q_k ⊕ (q_k ⊖ q_{k−1}).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from ..arrays import tree_map, to_numpy, xp_of
from ..energies import (ForceModel, LinkTerms, actuation_terms, armature_terms, applied_normal, cone_mismatch,
                        contact_state, contact_terms, damping_terms, drag_terms, drag_weights, gravity_terms,
                        inertia_targets, inertia_terms, join_pushed, limit_terms, normal_shift, sphere_centres,
                        spring_terms)
from ..kinematics import (difference, forward_kinematics, generalized_gradient, generalized_hessian, integrate,
                          pose_gradient_wrench, weighted_spatial_form, world_moments)
from ..optim import LMResult
from ..optim import lm as _lm
from ..optim.lm import SolvedSystem, _acceptable
from .newton import (CHORD_GATE, CHORD_RATE, CHORD_STEPS, NewtonMemory, cholesky_rows, chord_solve, predictor_trust,
                     warm_start)
from .options import SolverOptions
from .solve import minimize
from .state import StepInfo, advance, contract_step, order2_state_velocity, with_kinematics


_BATCHED = ("A", "b", "q_ref", "tau", "W", "q_pred")


class StepData(NamedTuple):
    """Constants of one step for a batch: inertia targets (A, b), q_k (B, nq), τ (B, nv), kinematics of q_k,
    drag weights W (B, L, 3, 3) or None, lagged contact state (dict of (B, S, …) arrays) or None, Δt [s] and
    the ForceModel; q_pred = q_k ⊕ (q_k ⊖ q_{k−1}) (B, nq), the constant-velocity prediction (the warm start and
    the armature term's target)."""

    A: object
    b: object
    q_ref: object
    tau: object
    kin_ref: object
    W: object
    contact: object
    dt: float
    forces: object
    q_pred: object = None

    def take(self, idx):
        """The data of trajectories ``idx`` (None: all)."""
        if idx is None:
            return self
        sub = {k: (None if getattr(self, k) is None else getattr(self, k)[idx]) for k in _BATCHED}
        kin = type(self.kin_ref)(*(a[idx] for a in self.kin_ref))
        contact = tree_map(lambda v: v[idx], self.contact)
        return self._replace(kin_ref=kin, contact=contact, **sub)


def prepare_step(body, q_prev, q_cur, tau, dt, forces, kin_prev=None, kin_cur=None, contact=None):
    """StepData for the step from (q_{k−1}, q_k) under generalised force tau (B, nv) and ``forces``
    (a ForceModel, or a gravity vector). Kinematics of either configuration may be passed in when already known;
    ``contact`` is the lagged contact state of q_k (computed here when the force model has contact and none is
    given)."""
    xp = xp_of(q_cur)
    forces = as_force_model(forces)
    kin_prev = forward_kinematics(body, q_prev) if kin_prev is None else kin_prev
    kin_cur = forward_kinematics(body, q_cur) if kin_cur is None else kin_cur
    A, b = inertia_targets(kin_cur, kin_prev)
    W = None if forces.drag is None else drag_weights(kin_cur, xp.asarray(forces.drag, dtype=q_cur.dtype))
    if forces.contact is not None and contact is None:
        contact = contact_state(body, kin_cur, forces.contact, dt)
    if forces.contact is not None:  # the trapezoidal normal spring reads q_{k−1}'s depths (energies/penalty.py)
        shift = normal_shift(body, contact.P, sphere_centres(body, kin_prev), forces.contact, dt)
        contact = contact if shift is None else contact._replace(shift=shift)
    q_pred = integrate(body, q_cur, difference(body, q_prev, q_cur))
    return StepData(A, b, q_cur, tau, kin_cur, W, contact, float(dt), forces, q_pred)


def as_force_model(forces):
    """A ForceModel as is; a gravity vector (3,) as gravity and actuation only."""
    if isinstance(forces, ForceModel):
        return forces
    return ForceModel(gravity=np.asarray(to_numpy(forces), dtype=float).reshape(3))


class StepContext(NamedTuple):
    """What the Hessian of the step energy needs from the gradient pass at the same configurations."""

    kin: object
    links: object
    joints: object
    X: object
    dt: float
    hessian: str
    W: object  # drag weights (B, L, 3, 3) or None

    def take(self, rows):
        """The context of trajectories ``rows`` (every batched field cut; constants kept)."""
        cut = lambda v: v if v is None or getattr(v, "ndim", 0) == 0 or v.shape[0] == 1 else v[rows]  # noqa: E731
        return self._replace(kin=type(self.kin)(*(cut(a) for a in self.kin)),
                             links=type(self.links)(*(cut(a) for a in self.links)),
                             joints=type(self.joints)(*(cut(a) for a in self.joints)), X=cut(self.X), W=cut(self.W))


def step_terms(body, q, data, derivatives=True):
    """All terms of the step energy at q: (LinkTerms, JointTerms); the inertia term's Gauss-Newton form is left
    to :func:`step_hessian`."""
    f = data.forces
    kin = forward_kinematics(body, q)
    links = inertia_terms(body, kin, (data.A, data.b), data.dt, derivatives, gauss_newton=False)
    if f.has_gravity:
        links = links + gravity_terms(body, kin, xp_of(q).asarray(f.gravity, dtype=q.dtype), derivatives)
    if f.drag is not None:
        # its Gauss-Newton form is folded into the inertia one in step_hessian (both are mass-moment forms)
        links = links + drag_terms(body, kin, data.kin_ref, data.W, data.dt, derivatives, gauss_newton=False)
    if f.contact is not None:
        links = links + contact_terms(body, kin, f.contact, data.contact, data.dt, derivatives)
    joints = actuation_terms(body, q, data.q_ref, data.tau, derivatives)
    if f.limit_stiffness > 0:
        joints = joints + limit_terms(body, q, f.limit_stiffness, derivatives, data.q_ref, f.limit_damping, data.dt,
                                      data.q_pred, f.limit_springs)
    if f.has_damping:
        joints = joints + damping_terms(body, q, data.q_ref, f.damping, data.dt, derivatives)
    if body.has_armature:
        armature = body.arrays(xp_of(q), q.dtype).armature
        joints = joints + armature_terms(body, q, data.q_pred, armature, data.dt, derivatives)
    if f.has_spring:
        joints = joints + spring_terms(body, q, f.spring_rest, f.spring, derivatives)
    return kin, links, joints


def step_energy_grad(body, q, data, hessian="exact"):
    """Step energy E (B,) and gradient g (B, nv) at q (B, nq), plus the context for :func:`step_hessian`."""
    kin, links, joints = step_terms(body, q, data)
    wrench, X = pose_gradient_wrench(kin, links.G, links.f)
    g = generalized_gradient(body, kin, wrench) + joints.grad
    return links.value + joints.value, g, StepContext(kin, links, joints, X, data.dt, hessian, data.W)


def step_hessian(body, ctx):
    """Hessian (B, nv, nv) ("exact" or "gauss_newton": the terms' Gauss-Newton forms — M/Δt² for inertia — plus
    joint-space Hessians, the armature's share of M/Δt² among them) and the diagonal of its Gauss-Newton part
    D (B, nv), armature included (D scales the convergence measure to a step in units of q)."""
    mom, dt = world_moments(body, ctx.kin), ctx.dt
    if ctx.W is None:
        K = mom.scaled(1.0 / (dt * dt))
    else:  # the forms are linear in the weight: inertia (1/Δt²) and drag (W/Δt) in one pass
        xp = xp_of(ctx.W)
        W = ctx.W / dt + xp.eye(3, dtype=ctx.W.dtype) / (dt * dt)
        K = weighted_spatial_form(xp.broadcast_to(mom.m, ctx.kin.t.shape[:2]), mom.c, mom.S, W)
    K = LinkTerms(None, K=K) + LinkTerms(None, K=ctx.links.K)
    exact = ctx.hessian == "exact"
    H, D = generalized_hessian(body, ctx.kin, K=K.K, G=ctx.links.G if exact else None, f=ctx.links.f, X=ctx.X,
                               gn_diagonal=True)
    if body.has_armature:
        D = D + body.arrays(xp_of(D), D.dtype).armature / (dt * dt)
    return H + ctx.joints.hess, D


def step_energy(body, q, data, derivatives=False, hessian="exact"):
    """The order-2 step energy at q (B, nq) for ``data``: E (B,), or with ``derivatives``
    (E, g (B, nv), H (B, nv, nv), D (B, nv)) (see :func:`step_hessian`)."""
    if not derivatives:
        _, links, joints = step_terms(body, q, data, derivatives=False)
        return links.value + joints.value
    E, g, ctx = step_energy_grad(body, q, data, hessian)
    H, D = step_hessian(body, ctx)
    return E, g, H, D


def pbad_step(body, q_prev, q_cur, tau, dt, forces, *, optimizer="lm", max_iter=None, tol=None,
              hessian="exact", record_history=False, kin_prev=None, kin_cur=None, contact=None):
    """One order-2 PBAD step for a batch: returns (q_next (B, nq), LMResult diagnostics).

    forces: a ForceModel, or a gravity vector (3,) for gravity and actuation only. optimizer: "lm", "lbfgs"
    (initial inverse Hessian: the Gauss-Newton diagonal at the warm start, O(n) per iteration, as the paper) or
    "lbfgs_hessian" (initial inverse Hessian: the inverse step Hessian at the warm start, O(n²)); all stop on
    the same measure. max_iter / tol: None takes :class:`SolverOptions`' defaults for the optimiser and dtype.
    kin_prev / kin_cur: kinematics of q_prev / q_cur when the caller already has them; contact: lagged contact
    memory of q_cur. Coulomb friction capped by the applied normal force re-solves as :func:`solve_step_in_cone`
    (except with ``record_history``, which records the first solve alone).
    """
    options = SolverOptions.create(q_cur.dtype, optimizer=optimizer, max_iter=max_iter, tol=tol, hessian=hessian)
    data = prepare_step(body, q_prev, q_cur, tau, dt, forces, kin_prev, kin_cur, contact)
    if record_history:
        return solve_step(body, data, options, record_history)
    q_next, res, _ = solve_step_in_cone(body, data, options)
    return q_next, res


def _merge_system(system, sub, rows, B):
    """The full-batch SolvedSystem ``system`` (None: none yet) with the solves of ``sub`` (of rows ``rows``)."""
    if sub is None:
        return system
    if system is None:
        system = SolvedSystem.empty(B, sub.D.shape[-1], sub.D)
    s = rows[sub.solved]
    system.record(s, sub.H[sub.solved], sub.D[sub.solved], sub.mu[sub.solved], sub.finite[sub.solved])
    return system


def next_memory(body, q_prev, newton, system, trust):
    """The NewtonMemory a step leaves (integrators/newton.py): q_back = its q_{k−1} ``q_prev`` (B, nq), and per
    row the Cholesky factor of the last damped system it solved (``system``, a SolvedSystem; None: no solve) where
    that solve was finite and the system positive definite, else invalid; rows that solved nothing keep the
    memory ``newton`` had (None: invalid); ``trust`` (B,) bool: newton.predictor_trust of the step. q_back2 is
    the memory's q_back (q_prev where there was none, not valid)."""
    xp = xp_of(q_prev)
    B = q_prev.shape[0]
    if system is None:
        system = SolvedSystem.empty(B, body.nv, q_prev)
    eye = xp.eye(system.H.shape[-1], dtype=system.H.dtype)
    L, spd = cholesky_rows(system.H + (system.mu[:, None] * system.D)[..., None] * eye)
    valid = system.finite & spd
    if newton is not None:
        keep = ~system.solved
        L = xp.where(keep[:, None, None], newton.factor, L)
        D = xp.where(keep[:, None], newton.D, system.D)
        mu = xp.where(keep, newton.mu, system.mu)
        valid = xp.where(keep, newton.valid, valid)
        back2, history2 = newton.q_back, newton.history
    else:
        D, mu = system.D, system.mu
        valid = valid & system.solved
        back2, history2 = q_prev, xp.zeros(B, dtype=bool)
    return NewtonMemory(q_prev, xp.ones(B, dtype=bool), L, D, mu, valid, trust, back2, history2)


def solve_step(body, data, options, record_history=False, x0=None, max_iter=None, track_system=False):
    """Minimise the order-2 step energy of ``data`` (StepData) from ``x0`` (B, nq) (None: its warm start q_pred):
    (q_next, LMResult). max_iter: None takes ``options``'; track_system: LM reports its last damped systems."""
    def initial_inverse(ctx, matrix):
        H, D = step_hessian(body, ctx._replace(hessian="gauss_newton"))  # SPD
        return D, (xp_of(H).linalg.inv(H) if matrix else None)

    extra = {"track_system": True} if track_system else {}  # (an LM option: L-BFGS takes none)
    res = minimize(lambda x, idx: step_energy_grad(body, x, data.take(idx), options.hessian),
                   lambda x, idx, dx: integrate(body, x, dx), data.q_pred if x0 is None else x0, options,
                   hessian=lambda ctx: step_hessian(body, ctx), initial_inverse=initial_inverse,
                   record_history=record_history, max_iter=max_iter, **extra)
    return res.x, res


def solve_with_memory(body, data, options, x0, newton):
    """:func:`solve_step` from ``x0`` (B, nq) with a Newton memory (integrators/newton.py; its ``valid`` rows
    take chord steps first, as kernels/numba/lm.py step_row): (q_next, LMResult with ``system``)."""
    xp = xp_of(x0)
    B, tol, eps = x0.shape[0], options.tol, xp.finfo(x0.dtype).eps
    x = x0.copy()
    its = xp.zeros(B, dtype=xp.int64)
    gnorm, energy = xp.full(B, xp.inf, dtype=x.dtype), xp.zeros(B, dtype=x.dtype)
    done = xp.zeros(B, dtype=bool)
    C = xp.nonzero(newton.valid)[0]
    if C.size:
        E, g, _ = step_energy_grad(body, x[C], data.take(C), options.hessian)
        gnorm[C], energy[C] = xp.max(xp.abs(g) / newton.D[C], axis=-1), E
        done[C[gnorm[C] < tol]] = True
        keep = gnorm[C] <= CHORD_GATE * tol  # (beyond the gate: LM with a fresh Hessian; within the tolerance too)
        T, g = C[keep], g[keep]
        while T.size and its[T[0]] < min(CHORD_STEPS, options.max_iter):  # (the rows here share their count)
            DT = newton.D[T]
            dx = chord_solve(newton.factor[T], g)
            ok = xp.all(xp.isfinite(dx), -1)
            length2 = xp.sum(DT * dx * dx, -1)
            pred = 0.5 * (newton.mu[T] * length2 - xp.sum(g * dx, -1))
            x_try = integrate(body, x[T], xp.where(ok[:, None], dx, 0.0))
            E_try, g_try, _ = step_energy_grad(body, x_try, data.take(T), options.hessian)
            g_new = xp.max(xp.abs(g_try) / DT, axis=-1)
            # (a start within the tolerance is kept where round-off lifts the chord point's measure above it)
            accept = ok & _acceptable(energy[T], E_try, pred, eps) & ~((gnorm[T] < tol) & (g_new >= tol))
            its[T] += 1
            A, last = T[accept], gnorm[T[accept]]
            x[A], energy[A] = x_try[accept], E_try[accept]
            gnorm[A] = g_new[accept]
            done[A] = gnorm[A] < tol
            more = (gnorm[A] >= tol) & (gnorm[A] <= CHORD_RATE * last)
            T, g = A[more], g_try[accept][more]
    system = None
    for n in range(int(its.max()) + 1 if B else 0):  # the rest by LM from where they stand (chord steps count)
        rows = xp.nonzero(~done & (its == n))[0]
        if rows.size == 0:
            continue
        x_r, res_r = solve_step(body, data.take(rows), options, x0=x[rows], max_iter=options.max_iter - n,
                                track_system=True)
        x[rows] = x_r
        its[rows] += res_r.iterations
        gnorm[rows], energy[rows] = res_r.grad_norm, res_r.energy
        system = _merge_system(system, res_r.system, rows, B)
    return x, LMResult(x, its, gnorm, gnorm < tol, energy, system=system)


def solve_step_in_cone(body, data, options, x0=None, newton=None, track_system=False):
    """:func:`solve_step` from ``x0`` (None: q_pred) — with a Newton memory ``newton``, :func:`solve_with_memory`
    — then while some row's Coulomb friction was capped by a normal force that differs from the one the step
    applied (energies.cone_mismatch), those rows re-solve from their solution with the applied normal force as
    the cap, at most ``cone_passes`` times (a lagged fixed point; docs/physics.md §2.3). Returns (q_next,
    LMResult with iterations summed over the passes and, with ``track_system``, ``system``: each row's last damped
    system over the passes, data with each row's final cap)."""
    if newton is not None:
        q, res = solve_with_memory(body, data, options, data.q_pred if x0 is None else x0, newton)
    else:
        q, res = solve_step(body, data, options, x0=x0, track_system=track_system)
    params = data.forces.contact
    if params is None or not params.resolves_cone:
        return q, res, data
    xp = xp_of(q)
    for _ in range(params.cone_passes):
        P = sphere_centres(body, forward_kinematics(body, q))
        normal = applied_normal(body, P, params, data.contact.P, data.dt, data.contact.shift)
        memory, joined = join_pushed(body, data.contact, P, normal, params, data.dt)
        # (a row where a sphere joined always re-solves, so the rows that stop keep the memory they were solved with)
        rows = xp.nonzero(cone_mismatch(data.contact, normal, params.cone_tol) | xp.any(joined, axis=-1))[0]
        if len(rows) == 0:
            break
        capped = data.contact.normal.copy()
        capped[rows] = normal[rows]
        data = data._replace(contact=memory._replace(normal=capped))
        q_r, res_r = solve_step(body, data.take(rows), options, x0=q[rows], track_system=track_system)
        q = q.copy()
        q[rows] = q_r
        res = _merge_rows(res, rows, res_r)
    return q, res, data


def _merge_rows(res, rows, sub):
    """LMResult ``res`` with rows ``rows`` taken from a re-solve ``sub``: its grad_norm and converged, iterations
    added."""
    its, gn, conv, e = res.iterations.copy(), res.grad_norm.copy(), res.converged.copy(), res.energy.copy()
    its[rows] = its[rows] + sub.iterations
    gn[rows], conv[rows], e[rows] = sub.grad_norm, sub.converged, sub.energy
    system = _merge_system(res.system, sub.system, rows, its.shape[0])
    return dataclasses.replace(res, x=None, iterations=its, grad_norm=gn, converged=conv, energy=e, system=system)


def memory_enabled(xp, options):
    """Whether the step keeps and uses a Newton memory (integrators/newton.py): where ``options.newton_memory``
    asks for it, with LM compacted (NumPy). The masked LM of device arrays runs without (its chord stage would
    need host decisions)."""
    return options.newton_memory and options.optimizer == "lm" and _lm._compacts(xp)


@contract_step(order2_state_velocity)
def step(model, state, tau, options):
    """The order-2 PBAD step of the step contract: (State, StepInfo) after one step under tau (B, nv)."""
    state = with_kinematics(model, state)
    body = model.body
    kin_prev = forward_kinematics(body, state.q_prev) if state.kin_prev is None else state.kin_prev
    data = prepare_step(body, state.q_prev, state.q, tau, model.dt, model.forces, kin_prev, state.kin, state.contact)
    q_next, res, data, memory = solve_remembering(body, data, options, state.q_prev, state.newton)
    # the force the step applied is that of its final cap: the memory it was solved with goes to advance
    stepped = state._replace(contact=data.contact)
    return (advance(model, stepped, state.q, q_next, newton=memory),
            StepInfo(res.iterations, res.grad_norm, res.converged))


def solve_remembering(body, data, options, q_prev, newton):
    """:func:`solve_step_in_cone` of ``data`` (the step from q_prev (B, nq) to data.q_ref) with the Newton memory
    ``newton`` (None: none yet) where :func:`memory_enabled`: (q_next, LMResult, data, the NewtonMemory the step
    leaves, None where the memory is not enabled)."""
    if not memory_enabled(xp_of(q_prev), options):
        return (*solve_step_in_cone(body, data, options), None)
    x0 = None
    if newton is not None:
        x0, smooth = warm_start(body, newton.q_back, q_prev, data.q_ref, data.q_pred, newton.history & newton.trust,
                                newton.q_back2, newton.history2)
        newton = newton._replace(valid=newton.valid & smooth)
    q_next, res, data = solve_step_in_cone(body, data, options, x0, newton, track_system=True)
    if newton is None:
        trust = xp_of(q_prev).ones(q_prev.shape[0], dtype=bool)
    else:
        trust = predictor_trust(body, newton.q_back, q_prev, data.q_ref, q_next, newton.history)
    return q_next, res, data, next_memory(body, q_prev, newton, res.system, trust)
