"""Impulse ground contact for PBAD (docs/physics.md §5, ``contact_model="impulse"``).

One step from (q_{k−1}, q_k) under τ:

1. q̃ = PBAD step with every energy except contact (gravity, drag, actuation, limits, damping);
   ṽ = (q̃ ⊖ q_k)/Δt, a tangent vector at q_k (B, nv).
2. Contact candidates: spheres whose gap g = P_z − h − r is below ``margin`` at q_k *or* at q̃ (q̃ catches a
   fast body that would cross the margin band within the step). Each contact gives rows (n, t1, t2) =
   (world z, world x, world y) of the Jacobian J (B, 3c, nv) of the sphere's **lowest point** P − r·n, taken at
   q_k, i.e. in q_k's tangent space, the space ṽ and v live in. The normal row is the same for the centre and
   the lowest point; the tangent rows differ by ω × (−r n), which is what lets a sphere roll instead of skid.
   Per-trajectory contact counts are padded to the batch's largest count with the LCP's ``mask``.
3. M_eff = Δt²·H(q̃): the step Hessian at q̃ (``effective_mass="gauss_newton"``, the default: M(q̃) plus the
   Gauss-Newton curvature of drag, limits and damping — always SPD; "exact": the exact step Hessian; "mass":
   the plain mass matrix M(q̃) from CRBA). Δt²H is the exact linear response of the implicit step to a
   constant force Jᵀλ/Δt held over the step, so damping/drag/limit stiffness are seen by the impulse.
   A = J M_eff⁻¹ Jᵀ, b = J ṽ − target, target on normal rows only:
       gap > 0 (speculative):   target = −gap/Δt       (the contact may close its gap this step, no further)
       gap ≤ 0 (penetrating):   target = β·max(0, −gap − slop)/Δt   (Baumgarte, none inside the slop)
       restitution e > 0:       target = max(target, e·|J_n ṽ|) when the contact closes this step and
                                |J_n ṽ| > bounce_velocity.
4. Boxed LCP in impulses λ [N s]: λ_n ≥ 0, |λ_t| ≤ μλ_n per tangent (friction pyramid, lcp.Friction), solved by
   :func:`pbad_gym.lcp.solve`, warm-started from the previous step's per-sphere impulses (× ``warm_start``).
5. v = ṽ + M_eff⁻¹Jᵀλ; q_{k+1} = q_k ⊕ Δt·v. The Simulator then keeps q_k as q_prev, so its velocity
   (q_{k+1} ⊖ q_k)/Δt is v exactly and the next PBAD step's inertia target carries v. Trajectories with no
   contact return q̃ itself.

Units: q as the joints define (m, rad), v [m/s, rad/s], λ [N s], Δt [s], lengths [m].
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..arrays import to_numpy, xp_of
from ..dynamics import crba
from ..energies import sphere_centres
from ..energies.joints import limit_arrays
from ..kinematics import difference, forward_kinematics, integrate, matvec, point_jacobian, skew
from ..lcp import Friction, solve
from .options import LCPOptions, SolverOptions
from .pbad import as_force_model, prepare_step, solve_step, step_energy, step_energy_grad, step_hessian
from .state import StepInfo, advance, contract_step, order2_state_velocity, with_kinematics

CONTACT_MODELS = ("penalty", "impulse")
EFFECTIVE_MASSES = ("gauss_newton", "exact", "mass")


@dataclass(frozen=True)
class ImpulseContact:
    """Impulse ground contact against the plane z = ``height`` [m].

    mu: Coulomb friction coefficient (pyramid per tangent direction). baumgarte: β in [0, 1], the fraction of the
    penetration beyond ``slop`` [m] removed per step. margin [m]: spheres closer than this (at q_k or q̃) become
    contacts. restitution e in [0, 1] with bounce_velocity [m/s] below which impacts are inelastic.
    warm_start: factor in [0, 1] on last step's impulses as the LCP start (0: cold start). effective_mass: see
    the module docstring ("gauss_newton", "exact", "mass").
    """

    mu: float = 0.5
    baumgarte: float = 0.2
    slop: float = 1e-3
    margin: float = 0.02
    restitution: float = 0.0
    bounce_velocity: float = 0.5
    height: float = 0.0
    warm_start: float = 1.0
    effective_mass: str = "gauss_newton"
    sqp_iterations: int = 10

    def __post_init__(self):
        for name in ("mu", "slop", "margin", "bounce_velocity"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"impulse contact {name} must be a finite non-negative number, got {v!r}")
        for name in ("baumgarte", "restitution", "warm_start"):
            v = getattr(self, name)
            if not (np.isfinite(v) and 0 <= v <= 1):
                raise ValueError(f"impulse contact {name} must lie in [0, 1], got {v!r}")
        if not np.isfinite(self.height):
            raise ValueError(f"impulse contact height must be finite, got {self.height!r}")
        if isinstance(self.sqp_iterations, bool) or int(self.sqp_iterations) != self.sqp_iterations \
                or self.sqp_iterations < 1:
            raise ValueError(f"impulse contact sqp_iterations must be a positive integer, got {self.sqp_iterations!r}")
        if self.effective_mass not in EFFECTIVE_MASSES:
            raise ValueError(f"effective_mass must be one of {EFFECTIVE_MASSES}, got {self.effective_mass!r}")


def make_impulse_contact(spec):
    """ImpulseContact from None/True (defaults), a dict of its fields, or an ImpulseContact."""
    if spec is None or spec is True:
        return ImpulseContact()
    if isinstance(spec, dict):
        return ImpulseContact(**spec)
    if isinstance(spec, ImpulseContact):
        return spec
    raise ValueError(f"impulse contact must be None, True, a dict or an ImpulseContact, got {spec!r}")


class ImpulseState(NamedTuple):
    """What the Simulator keeps between impulse steps: impulse (B, S, 3) [N s] per contact sphere in the
    (n, t1, t2) = (z, x, y) frame of the last step (0 for spheres that were not in contact)."""

    impulse: object


def initial_state(body, batch, xp=np, dtype=np.float64):
    """Zero impulses for ``batch`` trajectories of ``body``."""
    S = len(body.contact_points()[0])
    return ImpulseState(xp.zeros((int(batch), S, 3), dtype=dtype))


# --- contact geometry ------------------------------------------------------------------------------------------
def sphere_gaps(body, kin, height):
    """Centres P (B, S, 3) and signed gaps P_z − h − r (B, S) [m] of the contact spheres at poses ``kin``."""
    P = sphere_centres(body, kin)
    return P, P[..., 2] - height - body.arrays(xp_of(P), P.dtype).contact_r


def contact_jacobian(body, kin, P):
    """Jacobian (B, S, 3, nv) of each sphere's lowest point P − r·ẑ, rows ordered (n, t1, t2) = (z, x, y)."""
    xp = xp_of(kin.R)
    c = body.arrays(xp, kin.R.dtype)
    link = c.contact_link
    low = P.copy()
    low[..., 2] -= c.contact_r
    p0 = matvec(xp.swapaxes(kin.R[:, link], -1, -2), low - kin.t[:, link])  # link-frame offsets (B, S, 3)
    _, JP = point_jacobian(body, kin, link, p0)
    return JP[:, :, [2, 0, 1], :]


def select_contacts(active):
    """Compact the active spheres (B, S) into slots: sphere index (B, c) and slot validity (B, c), c the largest
    per-trajectory count. Active spheres come first, in sphere order; padded slots name inactive spheres."""
    xp = xp_of(active)
    counts = xp.sum(active, axis=1)
    c = int(counts.max()) if active.shape[1] else 0
    order = xp.argsort(~active, axis=1, kind="stable") if xp is np else xp.argsort(~active, axis=1)
    slots = order[:, :c]
    valid = xp.arange(c)[None, :] < counts[:, None]
    return slots, valid, counts


def effective_mass(body, q_tilde, data, params):
    """M_eff (B, nv, nv) at q̃ (see the module docstring)."""
    if params.effective_mass == "mass":
        return crba(body, q_tilde)
    _, _, ctx = step_energy_grad(body, q_tilde, data, params.effective_mass)
    H, _ = step_hessian(body, ctx)
    return (data.dt * data.dt) * H


def _gather(x, slots):
    """x (B, S, …) at slots (B, c) -> (B, c, …)."""
    xp = xp_of(x)
    idx = slots.reshape(slots.shape + (1,) * (x.ndim - 2))
    return xp.take_along_axis(x, xp.broadcast_to(idx, slots.shape + x.shape[2:]), axis=1)


def _normal_targets(g, un, params, dt):
    """Target normal velocities (B, c): close an open gap g > 0 within the step and no further (speculative
    contact); inside the ground, push out the depth beyond the slop at the Baumgarte rate; optional restitution."""
    xp = xp_of(g)
    target = xp.where(g > 0, -g / dt, params.baumgarte * xp.maximum(0.0, -g - params.slop) / dt)
    if params.restitution > 0:
        bounce = (un < -xp.maximum(g, 0.0) / dt) & (-un > params.bounce_velocity)
        target = xp.where(bounce, xp.maximum(target, -params.restitution * un), target)
    return target


def _lcp_system(J, M, v_tilde, g, valid, params, dt):
    """A = J M⁻¹ Jᵀ (B, 3c, 3c), b = J ṽ − targets (B, 3c), the row mask and M⁻¹Jᵀ (B, nv, 3c).

    Rows no DOF can move (A_ii ≈ 0) are dropped; a dropped normal drops its contact's friction rows."""
    xp = xp_of(J)
    B, c = g.shape
    MinvJT = xp.linalg.solve(M, xp.swapaxes(J, -1, -2))
    A = J @ MinvJT
    A = 0.5 * (A + xp.swapaxes(A, -1, -2))
    u = (J @ v_tilde[..., None])[..., 0].reshape(B, c, 3)
    b = u.copy()
    b[..., 0] = u[..., 0] - _normal_targets(g, u[..., 0], params, dt)
    diag = xp.diagonal(A, axis1=1, axis2=2)
    scale = xp.max(diag, axis=1)[:, None, None]
    movable = diag.reshape(B, c, 3) > 1e-12 * xp.maximum(scale, 1e-300)
    mask = (valid[:, :, None] & movable & movable[..., :1]).reshape(B, 3 * c)
    return A, b.reshape(B, 3 * c), mask, MinvJT


# --- the step --------------------------------------------------------------------------------------------------
def impulse_step(body, q_prev, q_cur, tau, dt, forces, params=None, state=None, *, lcp_method=LCPOptions.method,
                 lcp_order=LCPOptions.order, lcp_iterations=LCPOptions.iterations, lcp_tol=LCPOptions.tol,
                 lcp_omega=LCPOptions.omega, optimizer="lm", max_iter=None, tol=None, hessian="exact", kin_prev=None,
                 kin_cur=None):
    """One PBAD step with impulse ground contact (docs/physics.md §5) for a batch of B trajectories.

    body: a Body with contact spheres. q_prev, q_cur (B, nq): q_{k−1}, q_k. tau (B, nv) generalised force.
    dt [s]. forces: a ForceModel without penalty contact (``contact=None``) or a gravity vector (3,).
    params: ImpulseContact (default ImpulseContact()). state: ImpulseState of the previous step or None (cold).
    lcp_method / lcp_order / lcp_iterations / lcp_tol / lcp_omega: passed to :func:`pbad_gym.lcp.solve` (natural-map
    residual, ∞-norm, in mixed units of λ [N s] and w [m/s]). optimizer, max_iter, tol, hessian: the PBAD step's.
    kin_prev / kin_cur: kinematics of q_prev / q_cur when already known.

    Returns (q_next (B, nq), info, new_state). info: "iterations", "grad_norm" (the PBAD optimiser's, (B,)),
    "converged" (B,) (the optimiser's and the contact iteration's), "lm" (its LMResult), "contacts" (B,) int,
    "lcp_iterations" (B,) int (sweeps summed over the LCP passes), "lcp_residual" (B,) ∞-norm natural-map
    residual and "lcp_converged" (B,) bool of the last pass, "sqp_iterations" (B,) LCP passes and
    "sqp_converged" (B,) (see :func:`_sequential_lcp`), "impulse" (B, S, 3) [N s] and "v" (B, nv) the
    post-impulse velocity.
    """
    params = ImpulseContact() if params is None else params
    if not isinstance(params, ImpulseContact):
        raise ValueError(f"params must be an ImpulseContact, got {params!r}")
    lcp = LCPOptions.create(lcp_method=lcp_method, lcp_order=lcp_order, lcp_iterations=lcp_iterations,
                            lcp_tol=lcp_tol, lcp_omega=lcp_omega)
    options = SolverOptions.create(q_cur.dtype, optimizer=optimizer, max_iter=max_iter, tol=tol, hessian=hessian)
    forces = as_force_model(forces)
    if forces.contact is not None:
        raise ValueError("impulse contact replaces the penalty contact energy: pass a ForceModel with contact=None")
    S = len(body.contact_points()[0])
    if S == 0:
        raise ValueError("impulse contact needs contact spheres on the body's links")
    B = q_cur.shape[0]
    if state is None:
        state = initial_state(body, B, xp_of(q_cur), q_cur.dtype)
    if tuple(state.impulse.shape) != (B, S, 3):
        raise ValueError(f"state.impulse must have shape ({B}, {S}, 3), got {tuple(state.impulse.shape)}")
    data = prepare_step(body, q_prev, q_cur, tau, float(dt), forces, kin_prev, kin_cur)
    return _impulse_step(body, data, params, state, options, lcp)


@contract_step(order2_state_velocity)
def step(model, state, tau, options):
    """The impulse-contact step of the step contract: (State, StepInfo); model.impulse holds the ImpulseContact
    and model.lcp the LCPOptions."""
    state = with_kinematics(model, state)
    body = model.body
    kin_prev = forward_kinematics(body, state.q_prev) if state.kin_prev is None else state.kin_prev
    data = prepare_step(body, state.q_prev, state.q, tau, model.dt, model.forces, kin_prev, state.kin)
    q_next, info, impulse = _impulse_step(body, data, model.impulse, state.impulse, options, model.lcp)
    return (advance(model, state, state.q, q_next, impulse=impulse),
            StepInfo(**{k: info[k] for k in StepInfo._fields if k in info}))


def _impulse_step(body, data, params, state, options, lcp):
    """:func:`impulse_step` on prepared StepData (the constants of q_{k−1}, q_k, τ) and validated options."""
    q_cur, dt = data.q_ref, data.dt
    xp = xp_of(q_cur)
    B, dtype = q_cur.shape[0], q_cur.dtype
    kin_cur = data.kin_ref

    # 1. contact-free PBAD step
    q_tilde, res = solve_step(body, data, options)
    v_tilde = difference(body, q_cur, q_tilde) / dt
    info = {"iterations": res.iterations, "grad_norm": res.grad_norm, "converged": res.converged, "lm": res}

    # 2. contacts at q_k (and q̃)
    P, gap = sphere_gaps(body, kin_cur, params.height)
    _, gap_tilde = sphere_gaps(body, forward_kinematics(body, q_tilde), params.height)
    active = xp.minimum(gap, gap_tilde) < params.margin
    slots, valid, counts = select_contacts(active)
    c = slots.shape[1]
    info["contacts"] = counts
    zeros_b = xp.zeros(B, dtype=dtype)
    full = {"lcp_iterations": xp.zeros(B, dtype=np.int64), "lcp_residual": zeros_b,
            "lcp_converged": xp.ones(B, dtype=bool), "sqp_iterations": xp.zeros(B, dtype=np.int64),
            "sqp_converged": xp.ones(B, dtype=bool)}
    if c == 0:
        info.update(full, impulse=xp.zeros_like(state.impulse), v=v_tilde)
        return q_tilde, info, ImpulseState(xp.zeros_like(state.impulse))
    nv = body.nv
    Jc = _gather(contact_jacobian(body, kin_cur, P), slots)  # (B, c, 3, nv)
    Jc = xp.where(valid[:, :, None, None], Jc, 0.0)
    J = Jc.reshape(B, 3 * c, nv)

    # 3–5. the contact-implicit step by sequential LCPs, the rows grouped by contact count: each row's LCP holds
    # its own contacts only (padding it to the batch's largest count would change its bits with the other rows)
    warm = params.warm_start * _gather(state.impulse, slots).reshape(B, 3 * c)
    gaps = _gather(gap, slots)
    q_next, v = q_tilde.copy(), v_tilde.copy()
    lam_all = xp.zeros((B, 3 * c), dtype=dtype)
    for n_c in np.unique(to_numpy(counts)).tolist():
        if n_c == 0:
            continue
        rows = xp.nonzero(counts == n_c)[0]
        m = 3 * n_c
        q_c, v_c, lam, stats = _sequential_lcp(
            body, data.take(rows), q_tilde[rows], v_tilde[rows], J[rows, :m], gaps[rows, :n_c], valid[rows, :n_c],
            warm[rows, :m], params, lcp.solve_kwargs())
        q_next[rows], v[rows] = q_c, v_c
        for k, val in stats.items():
            full[k][rows] = val
        lam_all[rows, :m] = lam
    impulse = xp.zeros_like(state.impulse)
    xp.put_along_axis(impulse, xp.broadcast_to(slots[:, :, None], (B, c, 3)), lam_all.reshape(B, c, 3), axis=1)
    info.update(full, impulse=impulse, v=v, converged=res.converged & full["sqp_converged"])
    return q_next, info, ImpulseState(impulse)


def _sequential_lcp(body, data, q_tilde, v_tilde, J, gap, valid, warm, params, lcp_options):
    """Steps 3–5 for the n trajectories with contacts: a sequence of LCPs on the step energy Φ linearised at the
    current iterate q_i = q_k ⊕ Δt v_i (sequential quadratic programming on the contact-constrained step):

        v_free = v_i − Δt M_i⁻¹ ∇Φ(q_i),  M_i = Δt² H(q_i);  LCP on (A = J M_i⁻¹Jᵀ, b = J v_free − target);
        v_{i+1} = v_free + M_i⁻¹Jᵀλ,  q_{i+1} = q_k ⊕ Δt v_{i+1},

    (∇Φ and H pulled back from q_i's tangent space to q_k's, where v and J live), starting from q_0 = q̃ where
    ∇Φ = 0, so the first pass is the classical impulse correction. Passes after the first take a backtracking
    line search on the merit Φ + friction dissipation (:func:`_line_search`).

    Why iterate: the joint-limit penalty is the one term of Φ whose curvature jumps (at the limit). One
    linearisation at q̃ gives a joint that the correction pushes into its limit no stiffness there, so the
    correction drives it deep into the limit and the next step releases that energy (measured: up to 188 J
    gained in one Spider step). A trajectory is done when the set of joints beyond their limits at q_{i+1} is
    the set whose stiffness H_i held — the step is then the exact response of the piecewise-quadratic limits,
    and the contact impulses do no positive work (complementarity: λ_n·J_n v = λ_n·target ≤ 0 without
    Baumgarte push-out; friction opposes the sliding velocity), so the step's mechanical energy change minus
    the actuator work τᵀ(q_{k+1} ⊖ q_k) is the implicit step's own, ≤ 0. Trajectories whose set still changes
    after ``params.sqp_iterations`` passes, or whose line search cannot lower the merit, are reported
    unconverged. Bodies without active limits take one pass.

    data: StepData of the n trajectories; q_tilde (n, nq), v_tilde (n, nv); J (n, 3c, nv); gap (n, c);
    valid (n, c); warm (n, 3c) the LCP's first start. Returns (q (n, nq), v (n, nv), λ (n, 3c), stats of (n,)
    arrays: lcp_iterations (summed over passes), lcp_residual, lcp_converged (last pass), sqp_iterations,
    sqp_converged).
    """
    xp = xp_of(q_tilde)
    n, dt = q_tilde.shape[0], data.dt
    c = gap.shape[1]
    friction = Friction.per_contact(c, params.mu, batch=1, xp=xp)
    q, v, lam = q_tilde.copy(), v_tilde.copy(), warm.copy()
    stats = {"lcp_iterations": xp.zeros(n, dtype=np.int64), "lcp_residual": xp.zeros(n, dtype=q.dtype),
             "lcp_converged": xp.zeros(n, dtype=bool), "sqp_iterations": xp.zeros(n, dtype=np.int64),
             "sqp_converged": xp.zeros(n, dtype=bool)}
    limits = _LimitSet(body, data.forces.limit_stiffness)
    work = xp.arange(n)  # trajectories still iterating
    beyond = limits(q)  # joints beyond their limits where the Hessian was taken
    for it in range(params.sqp_iterations + 1):
        if it == 0:  # q̃ is the converged contact-free step: ∇Φ = 0 up to the PBAD tolerance
            d = data
            M = effective_mass(body, q, d, params)
            grad = xp.zeros_like(v)
        else:
            now = limits(q[work])
            done = xp.all(now == beyond[work], -1)
            stats["sqp_converged"][work[done]] = True
            work, now = work[~done], now[~done]
            if it == params.sqp_iterations or work.size == 0:
                break
            beyond[work] = now
            d = data.take(work)
            phi, grad, ctx = step_energy_grad(body, q[work], d, params.effective_mass)
            H, _ = step_hessian(body, ctx)
            M = crba(body, q[work]) if params.effective_mass == "mass" else (dt * dt) * H
        # Φ's derivatives at q_i are in q_i's tangent space; v (and J) live in q_k's: pull them back through
        # q_i = q_k ⊕ Δt v
        T = _increment_jacobian(body, dt * v[work])
        grad = (xp.swapaxes(T, -1, -2) @ grad[..., None])[..., 0]
        M = xp.swapaxes(T, -1, -2) @ M @ T
        v_free = v[work] - dt * xp.linalg.solve(M, grad[..., None])[..., 0]
        A, b, mask, MinvJT = _lcp_system(J[work], M, v_free, gap[work], valid[work], params, dt)
        lcp = solve(A, b, friction=friction, warm_start=lam[work], mask=mask, **lcp_options)
        lam_w = xp.where(mask, lcp.lam, 0.0)
        v_w = v_free + (MinvJT @ lam_w[..., None])[..., 0]
        if it == 0:  # from the contact-free q̃ (not feasible): the classical correction, taken whole
            lam[work], v[work] = lam_w, v_w
            q[work] = integrate(body, data.q_ref[work], dt * v_w)
        else:
            moved = _line_search(body, d, q, v, lam, work, phi, v_w, lam_w, J, params)
            work = work[moved]  # a pass that cannot lower the merit ends the iteration (unconverged)
            lcp = _take_lcp(lcp, moved)
        stats["lcp_iterations"][work] += lcp.iterations
        stats["lcp_residual"][work] = lcp.residual_inf
        stats["lcp_converged"][work] = lcp.converged
        stats["sqp_iterations"][work] += 1
    return q, v, lam, stats


class _LimitSet:
    """Which limited joints lie beyond their range at q (n, nq) -> (n, n_limited) bool (n_limited = 0 when the
    limits are off)."""

    def __init__(self, body, stiffness):
        idx, self.lo, self.hi = limit_arrays(body)
        if not stiffness > 0:
            idx = idx[:0]
        q_of_v = dict(zip(body.lin_v.tolist(), body.lin_q.tolist()))
        self.q_idx = np.array([q_of_v[int(j)] for j in idx], dtype=np.int64)
        self.lo, self.hi = self.lo[:len(idx)], self.hi[:len(idx)]

    def __call__(self, q):
        qi = q[:, self.q_idx]
        xp = xp_of(q)
        return (qi > xp.asarray(self.hi, dtype=q.dtype)) | (qi < xp.asarray(self.lo, dtype=q.dtype))


def _increment_jacobian(body, dq):
    """∂(q ⊕ dq)/∂dq expressed as an increment at q ⊕ dq: (B, nv, nv), the identity on linear coordinates and
    the right Jacobian of SO(3)'s exponential, Jr(φ) = I − (1 − cos θ)/θ² [φ]× + (θ − sin θ)/θ³ [φ]×²
    (θ = |φ|), on each quaternion joint (increments compose on the right)."""
    xp = xp_of(dq)
    B, nv = dq.shape
    T = xp.broadcast_to(xp.eye(nv, dtype=dq.dtype), (B, nv, nv)).copy()
    if len(body.quat_v):
        phi = dq[:, body.quat_v]  # (B, n_quat, 3)
        th2 = xp.sum(phi * phi, -1)[..., None, None]
        th = xp.sqrt(th2)
        small = th2 < 1e-8
        safe = xp.where(small, 1.0, th)
        a = xp.where(small, 0.5 - th2 / 24.0, (1.0 - xp.cos(safe)) / (safe * safe))
        b = xp.where(small, 1.0 / 6.0 - th2 / 120.0, (safe - xp.sin(safe)) / (safe * safe * safe))
        K = skew(phi)
        qv = body.quat_v
        T[:, qv[:, :, None], qv[:, None, :]] = xp.eye(3, dtype=dq.dtype) - a * K + b * (K @ K)
    return T


def _take_lcp(lcp, rows):
    """The per-trajectory diagnostics of an LCPResult for ``rows`` (bool mask)."""
    return dataclasses.replace(lcp, iterations=lcp.iterations[rows], residual_inf=lcp.residual_inf[rows],
                               converged=lcp.converged[rows])


def _merit(phi, v, Jc, mu_n):
    """Φ + the friction pyramid's maximal dissipation Σ_c μλ_n,c (|J_t1 v| + |J_t2 v|) [J] (n,), with Jc
    (n, c, 3, nv) the contact rows and mu_n (n, c) = μ·λ_n held at the newest LCP's normal impulses."""
    xp = xp_of(v)
    w = (Jc @ v[:, None, :, None])[..., 0]
    return phi + xp.sum(mu_n * (xp.abs(w[..., 1]) + xp.abs(w[..., 2])), -1)


def _line_search(body, data, q, v, lam, work, phi, v_new, lam_new, J, params, halvings=6):
    """Backtracking on the merit Φ(q_k ⊕ Δt v) + friction dissipation (:func:`_merit`) from v_i towards v_new,
    λ moving along (the friction pyramid and the linearised normal constraints are convex: every point of the
    segment stays feasible). Writes q, v, lam of the rows of ``work`` that lowered the merit; returns that mask.
    Without it the iteration can cycle between both sides of a joint limit's kink."""
    xp = xp_of(v)
    n_w, dt = len(work), data.dt
    Jc = J[work].reshape(n_w, -1, 3, J.shape[-1])
    mu_n = params.mu * lam_new.reshape(n_w, -1, 3)[..., 0]
    v0, lam0 = v[work], lam[work]
    m0 = _merit(phi, v0, Jc, mu_n)
    band = 64 * xp.finfo(v.dtype).eps
    alpha = xp.ones(n_w, dtype=v.dtype)
    pending = xp.ones(n_w, dtype=bool)
    for _ in range(halvings):
        idx = xp.nonzero(pending)[0]
        a = alpha[idx, None]
        v_try = v0[idx] + a * (v_new[idx] - v0[idx])
        q_try = integrate(body, data.q_ref[idx], dt * v_try)
        m = _merit(step_energy(body, q_try, data.take(idx)), v_try, Jc[idx], mu_n[idx])
        ok = m <= m0[idx] + band * (xp.abs(m) + xp.abs(m0[idx]))
        acc, rows = idx[ok], work[idx[ok]]
        q[rows], v[rows] = q_try[ok], v_try[ok]
        lam[rows] = lam0[acc] + a[ok] * (lam_new[acc] - lam0[acc])
        pending[acc] = False
        alpha[idx[~ok]] *= 0.5
        if not bool(xp.any(pending)):
            break
    return ~pending
