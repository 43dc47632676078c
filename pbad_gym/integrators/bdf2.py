"""PBAD with BDF2 inertia (docs/physics.md §2.6): the order-2 energy step made second order in Δt.

The order-2 step's inertia term 1/(2Δt²)∫ρ‖P(q) − 2P(q_k) + P(q_{k−1})‖² with every force at the end of the step
is backward Euler on a constrained (minimal-coordinate) system: first order, and it slows a swinging link by
projecting the central-difference target back onto the link's circle. BDF2 keeps every force at the end of the
step (stiff penalties stay L-stable) and replaces the two-point differences with the three-point ones,

    v_{k+1} = (3x_{k+1} − 4x_k + x_{k−1})/(2Δt),   a_{k+1} = (3v_{k+1} − 4v_k + v_{k−1})/(2Δt),

so that a material point x = P(q) obeys ρ·9/(4Δt²)·(x − x̂) = f(q) with the target
x̂ = (24x_k − 22x_{k−1} + 8x_{k−2} − x_{k−3})/9. That is the order-2 step's energy with

- Δt' = 2Δt/3 in place of Δt (the inertia's 1/(2Δt'²) and every damper's c/Δt');
- the inertia target x̂ in place of 2x_k − x_{k−1} (affine in the link poses, as before);
- the dampers' reference x̃ = (4x_k − x_{k−1})/3 in place of x_k: (x − x̃)/Δt' is the BDF2 velocity. Joint
  dampers and limits take q̃ = q_k ⊕ (q_k ⊖ q_{k−1})/3 (exact on hinge and slide coordinates), the contact's
  normal damper and friction the sphere centres P̃ = (4P_k − P_{k−1})/3, their stick anchors moved with them;
- the armature's target q̂ = the same combination of q_k … q_{k−3} (joint space), also the warm start.

The step reads four configurations: State.back holds q_{k−2}, q_{k−3}. A multistep formula needs history
accurate to O(Δt³), else the error it starts with drifts (first order again): a row's first step after a reset
estimates the acceleration with one order-2 step and builds its history q_{−j} = q_0 ⊕ (−j·Δt·v_0 + ½j²Δt²·a).
Penalty springs act at the end of the step ("implicit"; the trapezoidal springs are order-2 terms).
"""
from __future__ import annotations

from ..arrays import tree_map, xp_of
from ..energies import ContactMemory, sphere_centres
from ..kinematics import difference, forward_kinematics, integrate
from .pbad import as_force_model, prepare_step, solve_step_in_cone
from .state import StepInfo, advance, cached_velocity, contract_step, with_kinematics

INERTIA = (24 / 9, -22 / 9, 8 / 9, -1 / 9)  # x̂ from x_k, x_{k−1}, x_{k−2}, x_{k−3}
REFERENCE = (4 / 3, -1 / 3)  # x̃ from x_k, x_{k−1}
STEP_SCALE = 2 / 3  # Δt' / Δt


def _combine(weights, arrays):
    return sum(w * a for w, a in zip(weights, arrays))


def joint_combination(body, qs, weights):
    """q_k ⊕ Σ_j w_j (q_j ⊖ q_k) for configurations qs[0] = q_k, qs[1:] (the weights of a combination summing to
    1): exact on linear coordinates, in the tangent of q_k on rotations."""
    qk = qs[0]
    return integrate(body, qk, _combine(weights[1:], [difference(body, qk, q) for q in qs[1:]]))


def prepare_bdf2_step(body, history, tau, dt, forces, kins=None, contact=None):
    """StepData of the BDF2 step (module docstring) from ``history`` = (q_k, q_{k−1}, q_{k−2}, q_{k−3}) (each
    (B, nq)) under tau (B, nv) [N m or N] and ``forces``; step ``dt`` [s] (the data carry Δt' = 2Δt/3). kins: the
    history's kinematics when known (None entries are computed); contact: the lagged ContactMemory of q_k."""
    forces = as_force_model(forces)
    kins = [forward_kinematics(body, q) if k is None else k
            for q, k in zip(history, kins if kins is not None else (None,) * 4)]
    A = _combine(INERTIA, [k.R for k in kins])
    b = _combine(INERTIA, [k.t for k in kins])
    q_ref = joint_combination(body, history[:2], REFERENCE)
    q_hat = joint_combination(body, history, INERTIA)
    kin_ref = kins[0]._replace(R=_combine(REFERENCE, [k.R for k in kins[:2]]),
                               t=_combine(REFERENCE, [k.t for k in kins[:2]]))
    h = STEP_SCALE * float(dt)
    base = prepare_step(body, history[1], history[0], tau, h, forces, kins[1], kins[0], contact)
    if forces.contact is not None:
        P_k = base.contact.P
        P_ref = _combine(REFERENCE, (P_k, sphere_centres(body, kins[1])))
        c = base.contact
        # a stuck sphere's anchor is where it is (and stays, since P̃ = P_k at rest): moved with the reference, an
        # anchor keeps its offset from it, so the friction term sees the BDF2 slip (x − anchor)/Δt'
        base = base._replace(contact=ContactMemory(P_ref, c.active, c.normal, c.anchor + (P_ref - P_k)))
    return base._replace(A=A, b=b, q_ref=q_ref, kin_ref=kin_ref, q_pred=q_hat, dt=h)


def start_history(body, q, q_prev, q_next):
    """(q_{k−1}, q_{k−2}, q_{k−3}) (each (B, nq)) for rows starting from (q_k = q, velocity v = (q ⊖ q_prev)/Δt),
    given ``q_next``, one order-2 step from (q_prev, q) (its estimate of the acceleration a):
    q_{−j} = q ⊕ (−j·Δt·v + ½j²Δt²·a)."""
    back = difference(body, q, q_prev)  # −Δt·v
    accel_dt2 = difference(body, q, q_next) + back  # Δt²·a
    return tuple(integrate(body, q, j * back + 0.5 * j * j * accel_dt2) for j in (1, 2, 3))


def order2_next(body, q_prev, q, tau, dt, forces, options, contact=None):
    """q_{k+1} (B, nq) of one order-2 step (NumPy) from (q_prev, q) under tau: :func:`start_history`'s estimate."""
    data = prepare_step(body, q_prev, q, tau, dt, forces, contact=contact)
    return solve_step_in_cone(body, data, options)[0]


def bdf2_velocity(model, state):
    """The BDF2 velocity (B, nv) of ``state``: (3(q ⊖ q_prev) − (q_prev ⊖ q_{k−1}))/(2Δt); (q ⊖ q_prev)/Δt where
    the state has no history yet (a reset row: its velocity as reset)."""
    body, dt = model.body, model.dt
    last = difference(body, state.q_prev, state.q)
    if state.back is None:
        return last / dt
    xp = xp_of(last)
    before = difference(body, state.back[:, 0], state.q_prev)
    v = (3 * last - before) / (2 * dt)
    return v if state.fresh is None else xp.where(state.fresh[:, None], last / dt, v)


bdf2_state_velocity = cached_velocity(bdf2_velocity)


def history(model, state, tau, order2):
    """(q_{k−1}, q_{k−2}, q_{k−3}) of every row: the State's, or :func:`start_history` for rows reset since their
    last step, their order-2 step taken by ``order2(q_prev, q, tau, contact) -> q_next`` (a backend's); and
    whether q_{k−1} is the State's q_prev."""
    xp = xp_of(state.q)
    fresh = xp.ones(state.q.shape[0], dtype=bool) if state.back is None else state.fresh
    if fresh is None or not bool(xp.any(fresh)):
        return (state.q_prev, state.back[:, 0], state.back[:, 1]), True
    rows = xp.nonzero(fresh)[0]
    contact = tree_map(lambda a: a[rows], state.contact)
    q, q_prev = state.q[rows], state.q_prev[rows]
    started = start_history(model.body, q, q_prev, order2(q_prev, q, tau[rows], contact))
    if state.back is None:  # (every row is fresh)
        return started, False
    out = []
    for j, s in enumerate(started):
        q = (state.q_prev if j == 0 else state.back[:, j - 1]).copy()
        q[rows] = s
        out.append(q)
    return tuple(out), False


@contract_step(bdf2_state_velocity)
def step(model, state, tau, options):
    """One BDF2 PBAD step of the step contract: (State, StepInfo) under tau (B, nv)."""
    state = with_kinematics(model, state)
    body, xp = model.body, xp_of(state.q)
    order2 = lambda qp, q, t, c: order2_next(body, qp, q, t, model.dt, model.forces, options, c)  # noqa: E731
    (q_prev, q_back2, q_back3), kept = history(model, state, tau, order2)
    configs = (state.q, q_prev, q_back2, q_back3)
    kin_prev = state.kin_prev if kept and state.kin_prev is not None else forward_kinematics(body, q_prev)
    data = prepare_bdf2_step(body, configs, tau, model.dt, model.forces, (state.kin, kin_prev, None, None),
                             state.contact)
    q_next, res, data = solve_step_in_cone(body, data, options)
    back = xp.stack([q_prev, q_back2], axis=1)
    stepped = state._replace(contact=data.contact)
    new = advance(model, stepped, state.q, q_next, contact_dt=data.dt, back=back)
    return new, StepInfo(res.iterations, res.grad_norm, res.converged)


def check_bdf2(forces, order, contact_model):
    """ValueError naming the argument where a Simulator's settings have no BDF2 form."""
    if order != 2:
        raise ValueError(f"integrator='bdf2' is a one-stage step: it needs order=2, got order={order!r}")
    if contact_model != "penalty":
        raise ValueError("integrator='bdf2' models penalty contact: contact_model must be 'penalty'")
    if forces.limit_springs != "implicit":
        raise ValueError("limit_springs='trapezoidal' is a term of the order-2 step; integrator='bdf2' takes "
                         "'implicit' (BDF2 is second order with the springs at the end of the step)")
    if forces.contact is not None and forces.contact.springs != "implicit":
        raise ValueError("the contact's springs 'trapezoidal' are a term of the order-2 step; integrator='bdf2' "
                         "takes 'implicit'")
