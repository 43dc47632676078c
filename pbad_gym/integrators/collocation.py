"""High-order position-based collocation, order K = 3 or 4 (docs/physics.md §3, the PBAD paper's eq. 11-12).

Every body point moves on a degree-K polynomial in time through K+1 nodes (in units of Δt from t_k): the last
interior node of the previous step, t_k itself, and K−1 unknown configurations at α_1 < … < α_{K−1} = 1, the
interior α being the roots of the Legendre polynomial L_{K−2}(2α − 1). At each unknown node a the d'Alembert
residual vanishes:

    r_a = Σ_links J_aᵀ ∫ρ P''(t_a)  +  ∂U/∂q(q_a)  +  (velocity forces at P'(t_a))  −  τ  = 0,

with P''(t_a) = Σ_j w''_aj P(q_j)/Δt² and P'(t_a) = Σ_j w'_aj P(q_j)/Δt from the Lagrange basis. Forces need not
be conservative: drag and viscous friction use the polynomial velocity. All unknowns are solved together by LM on
½ Σ r²/D (D = diag(M(q_k))/Δt², so each residual is measured as a step in units of q), with the exact residual
Jacobian: diagonal blocks from the per-node Hessian machinery, off-diagonal blocks from the cross mass matrices
∫ρ J_aᵀ J_b between nodes. Convergence: max |r|/D < tol. Order K behaves like Runge-Kutta of order K − 1.

Supported terms: gravity, actuation, drag, ground contact (normal; viscous or Coulomb friction), joint limits,
joint damping and armature (on quaternion joints through the same chart as the order-2 step).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..arrays import tree_map, xp_of
from ..dynamics import crba, forward_dynamics
from ..energies import (actuation_terms, contact_state, contact_terms, drag_weights, gravity_terms, limit_terms,
                        spring_terms)
from ..energies.actuation import actuation_trivialized_correction
from ..energies.joints import chart_jacobian, joint_chart
from ..energies.contact import GroundContact, point_terms_to_links, sphere_centres
from ..kinematics import (cross_hessian, cross_spatial_form, difference, forward_kinematics, generalized_gradient,
                          generalized_hessian, integrate, matvec, mixed_moments, pose_gradient_wrench, skew)
from .options import COLLOCATION_ORDERS as ORDERS
from .options import SolverOptions
from .pbad import as_force_model
from .solve import minimize
from .state import StepInfo, advance, contract_step, with_kinematics


def collocation_nodes(order):
    """Nodes (K+1,) in units of Δt from t_k: [previous step's last interior node, 0, α_1, …, α_{K−1} = 1]."""
    if order == 2:
        return np.array([-1.0, 0.0, 1.0])
    if order not in ORDERS:
        raise ValueError(f"collocation order must be 2, 3 or 4, got {order!r}")
    interior = np.sort((1.0 + np.polynomial.legendre.leggauss(order - 2)[0]) / 2.0)
    return np.concatenate([[interior[-1] - 1.0, 0.0], interior, [1.0]])


def basis_derivatives(nodes, at):
    """First and second derivatives of the Lagrange basis of ``nodes`` at times ``at``: W1, W2 (len(at), len(nodes))
    with P'(t) = Σ_j W1[t, j] P_j and P''(t) = Σ_j W2[t, j] P_j (unit node spacing scale)."""
    V = np.vander(nodes, increasing=True)
    coef = np.linalg.inv(V)  # column j: coefficients of ℓ_j
    W1, W2 = np.zeros((len(at), len(nodes))), np.zeros((len(at), len(nodes)))
    for j in range(len(nodes)):
        p = np.polynomial.Polynomial(coef[:, j])
        W1[:, j], W2[:, j] = p.deriv(1)(at), p.deriv(2)(at)
    return W1, W2


class CollocationData(NamedTuple):
    """Constants of one collocation step: poses (B, 2, L, …) and sphere centres (B, 2, S, 3) of the two known
    nodes, q_k (B, nq), τ (B, nv), drag weights, lagged contact state, residual scale D (B, nv) and the basis."""

    R0: object
    t0: object
    P0: object
    q_ref: object
    dprev: object
    tau: object
    W: object
    contact: object
    D: object
    dt: float
    forces: object
    W1: np.ndarray
    W2: np.ndarray

    def take(self, idx):
        if idx is None:
            return self
        contact = tree_map(lambda v: v[idx], self.contact)
        sub = {k: (None if getattr(self, k) is None else getattr(self, k)[idx])
               for k in ("R0", "t0", "P0", "q_ref", "dprev", "tau", "W", "D")}
        return self._replace(contact=contact, **sub)


def prepare_collocation(body, q_prevnode, q_cur, tau, dt, forces, order, contact=None, W=None):
    """CollocationData for one step of ``order`` from the previous node and q_k."""
    forces = as_force_model(forces)
    xp = xp_of(q_cur)
    nodes = collocation_nodes(order)
    W1, W2 = basis_derivatives(nodes, nodes[2:])
    kin_p, kin_k = forward_kinematics(body, q_prevnode), forward_kinematics(body, q_cur)
    R0 = xp.stack([kin_p.R, kin_k.R], 1)
    t0 = xp.stack([kin_p.t, kin_k.t], 1)
    P0 = None
    if forces.contact is not None:
        P0 = xp.stack([sphere_centres(body, kin_p), sphere_centres(body, kin_k)], 1)
    if forces.drag is not None and W is None:
        W = drag_weights(kin_k, xp.asarray(forces.drag, dtype=q_cur.dtype))
    if forces.contact is not None and contact is None:
        contact = contact_state(body, kin_k, forces.contact, dt)
    D = xp.diagonal(crba(body, q_cur, kin_k), axis1=-2, axis2=-1) / dt**2
    dprev = joint_chart(body, q_cur, q_prevnode)[0]  # chart coordinates of the previous node around q_k
    return CollocationData(R0, t0, P0, q_cur, dprev, tau, W, contact, D, float(dt), forces, W1, W2)


def _field(W, known, unknown, scale):
    """Σ_j W[a, j]·X_j·scale for X over all nodes: known (B, 2, …), unknown (B, n, …) -> (B, n, …)."""
    xp = xp_of(known, unknown)
    allx = xp.concatenate([known, unknown], 1)
    return xp.stack([_combine(allx, W[a] * scale) for a in range(W.shape[0])], 1)


def _combine(X, w):
    """Σ_j w_j X[:, j] (B, …) over the nodes in a fixed order: elementwise, so each trajectory's bits do not depend
    on the batch (one tensordot is one BLAS call over all rows, whose blocking does)."""
    out = X[:, 0] * float(w[0])
    for j in range(1, len(w)):
        out = out + X[:, j] * float(w[j])
    return out


def _flat(a):
    return a.reshape((-1,) + a.shape[2:])


def _rep(a, n):
    """Repeat per-trajectory data for each of the n unknown nodes: (B, …) -> (B·n, …)."""
    xp = xp_of(a)
    return xp.repeat(a, n, axis=0)


def residual(body, X, data, jacobian=True):
    """Collocation residuals r (B, n, nv) at the unknown nodes X (B, n, nq), n = K − 1, and (with ``jacobian``)
    the residual Jacobian Jr (B, n, nv, n, nv) [∂r_a/∂δ_b]."""
    xp = xp_of(X)
    B, n, nq = X.shape
    dt, f, c = data.dt, data.forces, body.arrays(xp, X.dtype)
    kin = forward_kinematics(body, X.reshape(B * n, nq))
    L = body.L
    Ru, tu = kin.R.reshape(B, n, L, 3, 3), kin.t.reshape(B, n, L, 3)
    # inertia: the pose gradient of ∫ρ P·a with the acceleration field a = A p0 + b of each node
    A2, b2 = _field(data.W2, data.R0, Ru, 1 / dt**2), _field(data.W2, data.t0, tu, 1 / dt**2)
    G = A2 @ c.S + b2[..., :, None] * c.c[:, None, :]
    fl = matvec(A2, c.c) + c.mass[:, None] * b2
    if f.drag is not None:  # drag force density −ρ W v with the polynomial velocity field
        A1, b1 = _field(data.W1, data.R0, Ru, 1 / dt), _field(data.W1, data.t0, tu, 1 / dt)
        Wn = data.W[:, None]
        G = G + Wn @ (A1 @ c.S + b1[..., :, None] * c.c[:, None, :])
        fl = fl + matvec(Wn, matvec(A1, c.c) + c.mass[:, None] * b1)
    G, fl = _flat(G), _flat(fl)
    grav = gravity_terms(body, kin, xp.asarray(f.gravity, dtype=X.dtype))
    G, fl = G + grav.G, fl + grav.f
    Kc_pts = None
    if f.contact is not None:
        G, fl, Kc_pts, Pu = _contact_node_terms(body, kin, data, n, G, fl)
    wrench, Xg = pose_gradient_wrench(kin, G, fl)
    q_ref, tau = _rep(data.q_ref, n), _rep(data.tau, n)
    Xf = X.reshape(B * n, nq)
    joints = actuation_terms(body, Xf, q_ref, tau)
    if f.limit_stiffness > 0:
        joints = joints + limit_terms(body, Xf, f.limit_stiffness)
    if f.has_spring:
        joints = joints + spring_terms(body, Xf, f.spring_rest, f.spring)
    r = generalized_gradient(body, kin, wrench) + joints.grad
    damping = _joint_rate_terms(body, Xf, data, n, jacobian) if f.has_damping or body.has_armature else None
    if damping is not None:
        r = r + damping[0]
    r = r.reshape(B, n, body.nv)
    if not jacobian:
        return r, None
    Jr = _jacobian(body, kin, Xf, data, n, G, fl, Xg, joints, Kc_pts)
    return r, Jr if damping is None else Jr + damping[1]


def _joint_rate_terms(body, Xf, data, n, jacobian):
    """Joint damping and armature at the unknown nodes: r_a = J_aᵀ (b ⊙ q̇_a + a ⊙ q̈_a) with q̇_a = Σ_j w'_aj d_j/Δt
    and q̈_a = Σ_j w''_aj d_j/Δt² the polynomial rates of the chart coordinates d_j of every node around q_k
    (:func:`joint_chart`), J_a the chart Jacobian at q_a, b the damping and a the armature (nv,).
    Returns r (B·n, nv) and, with ``jacobian``, its Jacobian (B, n, nv, n, nv)."""
    xp = xp_of(Xf)
    B, nv, dt = data.q_ref.shape[0], body.nv, data.dt
    b = xp.zeros(nv, dtype=Xf.dtype) if data.forces.damping is None else xp.asarray(data.forces.damping,
                                                                                     dtype=Xf.dtype)
    arm = body.arrays(xp, Xf.dtype).armature
    d, rq = joint_chart(body, _rep(data.q_ref, n), Xf)
    known = xp.stack([data.dprev, xp.zeros_like(data.dprev)], 1)
    dn = d.reshape(B, n, nv)
    y = _flat(b * _field(data.W1, known, dn, 1 / dt) + arm * _field(data.W2, known, dn, 1 / dt**2))
    J = chart_jacobian(body, rq, B * n, Xf.dtype, xp)
    r = (xp.swapaxes(J, -1, -2) @ y[..., None])[..., 0]
    if not jacobian:
        return r, None
    Jt = xp.swapaxes(J, -1, -2).reshape(B, n, nv, nv)
    Jn = J.reshape(B, n, nv, nv)
    W1u, W2u = data.W1[:, 2:], data.W2[:, 2:]
    out = xp.zeros((B, n, nv, n, nv), dtype=Xf.dtype)
    for a in range(n):
        for c in range(n):
            coef = b * (W1u[a, c] / dt) + arm * (W2u[a, c] / dt**2)
            out[:, a, :, c] = (Jt[:, a] * coef) @ Jn[:, c]
    if rq is not None:  # the chart Jacobian turns with q_a: ∂(Jᵀy)/∂δ = −½ y vᵀ + ½ w [y]× + ½ [y]×[v]×
        qv = body.quat_v
        yq, w, v = y[:, qv], rq[..., :1, None], rq[..., 1:]
        curv = (-0.5 * yq[..., :, None] * v[..., None, :] + 0.5 * w * skew(yq) + 0.5 * skew(yq) @ skew(v))
        curv = curv.reshape((B, n) + curv.shape[1:])
        for a in range(n):
            blk = out[:, a, :, a]
            blk[:, qv[:, :, None], qv[:, None, :]] += curv[:, a]
            out[:, a, :, a] = blk
    return r, out


def _contact_node_terms(body, kin, data, n, G, fl):
    """Ground contact at every unknown node: normal and Coulomb terms as energies at the node, viscous friction
    as a force on the polynomial velocity of each sphere. Returns updated (G, f), the points' own Gauss-Newton
    link forms, and the sphere centres (B, n, S, 3)."""
    xp = xp_of(G)
    p, dt = data.forces.contact, data.dt
    B = data.q_ref.shape[0]
    state = tree_map(lambda v: _rep(v, n), data.contact)
    pos_params = GroundContact(p.stiffness, "none" if p.friction == "viscous" else p.friction, p.damping, p.mu,
                               p.slip_velocity, p.height)
    t = contact_terms(body, kin, pos_params, state, dt)
    G, fl, K = G + t.G, fl + t.f, t.K
    Pu = sphere_centres(body, kin).reshape(B, n, -1, 3)
    if p.friction == "viscous":
        v = _field(data.W1, data.P0, Pu, 1 / dt)  # (B, n, S, 3)
        k = p.damping * _rep(data.contact.active, 1)[:, None, :] * xp.ones((1, n, 1), dtype=G.dtype)
        g = xp.zeros_like(v)
        g[..., :2] = k[..., None] * v[..., :2]
        Hs = xp.zeros(v.shape + (3,), dtype=G.dtype)
        own = xp.asarray(np.diag(data.W1[:, 2:]) / dt, dtype=G.dtype)[None, :, None]
        Hs[..., 0, 0] = Hs[..., 1, 1] = k * own
        Gv, fv, Kv = point_terms_to_links(body, _flat(Pu), _flat(g), _flat(Hs))
        G, fl, K = G + Gv, fl + fv, K + Kv
    return G, fl, K, Pu


def _jacobian(body, kin, Xf, data, n, G, fl, Xg, joints, Kc_pts):
    """Jr (B, n, nv, n, nv): own-node blocks (curvature + own coefficients) and cross-node blocks."""
    xp = xp_of(G)
    dt, f, c = data.dt, data.forces, body.arrays(xp, G.dtype)
    B, nv = data.q_ref.shape[0], body.nv
    W1u, W2u = data.W1[:, 2:], data.W2[:, 2:]  # coefficients of the unknown nodes
    mom_c, _, mom_S = mixed_moments(body, kin, kin)
    own = lambda Wu, s: xp.asarray(np.tile(np.diag(Wu), B) * s, dtype=G.dtype)  # noqa: E731
    K = cross_spatial_form(c.mass, mom_c, mom_c, mom_S) * own(W2u, 1 / dt**2)[:, None, None, None]
    Wf = None
    if f.drag is not None:
        Wf = _rep(data.W, n)
        K = K + cross_spatial_form(c.mass, mom_c, mom_c, mom_S, Wf) * own(W1u, 1 / dt)[:, None, None, None]
    if Kc_pts is not None:
        K = K + Kc_pts
    diag = generalized_hessian(body, kin, K=K, G=G, f=fl, X=Xg, trivialized=True) + joints.hess + \
        actuation_trivialized_correction(body, Xf, _rep(data.q_ref, n), _rep(data.tau, n))
    Jr = xp.zeros((B, n, nv, n, nv), dtype=G.dtype)
    diag = diag.reshape(B, n, nv, nv)
    kins = [type(kin)(*(a.reshape((B, n) + a.shape[1:])[:, i] for a in kin)) for i in range(n)]
    for a in range(n):
        Jr[:, a, :, a] = diag[:, a]
        for b in range(n):
            if a != b:
                Jr[:, a, :, b] = _cross_block(body, kins[a], kins[b], data, W2u[a, b], W1u[a, b], B)
    return Jr


def _cross_block(body, ka, kb, data, w2, w1, B):
    """∂r_a/∂δ_b for two different unknown nodes: w2/Δt² ∫ρJ_aᵀJ_b + w1/Δt (drag, viscous friction)."""
    xp = xp_of(ka.R)
    c = body.arrays(xp, ka.R.dtype)
    dt, f = data.dt, data.forces
    ca, cb, Sab = mixed_moments(body, ka, kb)
    K = cross_spatial_form(c.mass, ca, cb, Sab) * (w2 / dt**2)
    if f.drag is not None:
        K = K + cross_spatial_form(c.mass, ca, cb, Sab, data.W) * (w1 / dt)
    if f.contact is not None and f.contact.friction == "viscous":
        Pa, Pb = sphere_centres(body, ka), sphere_centres(body, kb)
        k = f.contact.damping * data.contact.active * (w1 / dt)
        H = xp.zeros(Pa.shape + (3,), dtype=Pa.dtype)
        H[..., 0, 0] = H[..., 1, 1] = k
        eye = xp.broadcast_to(xp.eye(3, dtype=Pa.dtype), Pa.shape + (3,))
        Ta, Tb = xp.concatenate([-skew(Pa), eye], -1), xp.concatenate([-skew(Pb), eye], -1)
        Kp = xp.swapaxes(Ta, -1, -2) @ H @ Tb
        S = Pa.shape[1]
        K = K + (c.contact_inc @ Kp.reshape(B, S, 36)).reshape(B, -1, 6, 6)
    return cross_hessian(body, ka, kb, K)


class _Ctx(NamedTuple):
    J: object  # (B, N, N) residual Jacobian, N = n·nv
    w: object  # (B, N) residual weights 1/D
    measure: object  # (B,) max |r|/D

    def take(self, rows):
        return _Ctx(self.J[rows], self.w[rows], self.measure[rows])


def _objective(body, x, data, n):
    """½ Σ r²/D, its gradient Jᵀ(r/D) and the context for the Gauss-Newton Hessian, at flattened unknowns x."""
    B = x.shape[0]
    r, Jr = residual(body, x.reshape(B, n, body.nq), data)
    xp = xp_of(x)
    N = n * body.nv
    r, J = r.reshape(B, N), Jr.reshape(B, N, N)
    w = 1.0 / xp.tile(data.D, (1, n))
    wr = w * r
    grad = (xp.swapaxes(J, -1, -2) @ wr[..., None])[..., 0]
    return 0.5 * xp.sum(r * wr, -1), grad, _Ctx(J, w, xp.max(xp.abs(wr), -1))


def _gauss_newton_factor(ctx):
    """Square-root factor F = W½ J of the Gauss-Newton Hessian FᵀF and its diagonal (column norms²)."""
    xp = xp_of(ctx.J)
    F = xp.sqrt(ctx.w)[..., None] * ctx.J
    return F, xp.sum(F * F, axis=-2)


def start_node(body, q, qd, dt, order, gravity):
    """The previous-step node for a collocation run starting at (q, qd): q ⊕ (τ_p Δt q̇ + ½ (τ_p Δt)² q̈) with the
    free-fall acceleration q̈ (gravity only), so the first step's polynomial is consistent to third order."""
    xp = xp_of(q)
    h = collocation_nodes(order)[0] * dt
    qdd = forward_dynamics(body, q, qd, xp.zeros_like(qd), gravity)
    return integrate(body, q, h * qd + 0.5 * h * h * qdd)


def velocity_guess(body, q_cur, qd_cur, dt, order):
    """Warm start (B, K−1, nq) of the unknown nodes at constant velocity qd_cur from q_k."""
    xp = xp_of(q_cur)
    return xp.stack([integrate(body, q_cur, a * dt * qd_cur) for a in collocation_nodes(order)[2:]], 1)


def collocation_step(body, q_prevnode, q_cur, qd_cur, tau, dt, forces, order, *, optimizer="lm", max_iter=None,
                     tol=None, contact=None, W=None, guess=None):
    """One collocation step of ``order`` for a batch. q_prevnode: the previous step's last interior node (B, nq);
    qd_cur (B, nv): a velocity estimate at t_k for the default warm start; guess (B, K−1, nq): another warm start;
    optimizer "lm" (default: Gauss-Newton steps on the residual), "lbfgs" or "lbfgs_hessian" (on the same weighted
    squared residual, for comparison); max_iter / tol: None takes :class:`SolverOptions`' defaults.
    Returns (nodes (B, K−1, nq) at α_1 … 1, LMResult with grad_norm = max |r|/D)."""
    options = SolverOptions.create(q_cur.dtype, order=order, optimizer=optimizer, max_iter=max_iter, tol=tol)
    data = prepare_collocation(body, q_prevnode, q_cur, tau, dt, forces, order, contact, W)
    B, n = q_cur.shape[0], order - 1
    x0 = (velocity_guess(body, q_cur, qd_cur, dt, order) if guess is None else guess).reshape(B, -1)

    def retract(x, idx, dx):
        Bx = x.shape[0]
        out = integrate(body, x.reshape(Bx * n, body.nq), dx.reshape(Bx * n, body.nv))
        return out.reshape(Bx, -1)

    def initial_inverse(ctx, matrix):
        F, D = _gauss_newton_factor(ctx)
        if not matrix:
            return D, None
        Finv = xp_of(F).linalg.inv(F)  # (FᵀF)⁻¹ = F⁻¹F⁻ᵀ: cond(F) ~1e6 where cond(FᵀF) ~1e12
        return D, Finv @ xp_of(F).swapaxes(Finv, -1, -2)

    # the residual Jacobian is exact: LM starts with undamped Newton steps
    res = minimize(lambda x, idx: _objective(body, x, data.take(idx), n), retract, x0, options,
                   hessian=_gauss_newton_factor, initial_inverse=initial_inverse, sqrt_hessian=True, mu0=0.0)
    return res.x.reshape(B, n, body.nq), res


def _velocity(model, state, options):
    """(state, velocity): the derivative of the last step's polynomial at t_k (the reset velocity of rows reset
    since the last step), as ``Simulator.qd`` reads it."""
    if state.nodes is None:
        return state, state.qd
    v = node_velocity(model.body, state.nodes, model.dt, options.order)
    return state, xp_of(state.q).where(state.fresh[:, None], state.qd, v)


@contract_step(_velocity)
def step(model, state, tau, options):
    """The collocation step of the step contract (order K = options.order): (State, StepInfo)."""
    state = with_kinematics(model, state)
    xp, body, dt, order = xp_of(state.q), model.body, model.dt, options.order
    qd = state.qd if state.nodes is None else xp.where(
        state.fresh[:, None], state.qd, node_velocity(body, state.nodes, dt, order))
    # warm start at constant velocity: extrapolating the last step's polynomial cuts iterations, but on stiff
    # chains (100 links) its overshoot lands Newton on a spurious root and the run blows up
    nodes, res = collocation_step(body, state.q_prev, state.q, qd, tau, dt, model.forces, order,
                                  optimizer=options.optimizer, max_iter=options.max_iter, tol=options.tol,
                                  contact=state.contact)
    all_nodes = xp.concatenate([state.q_prev[:, None], state.q[:, None], nodes], 1)
    return (advance(model, state, nodes[:, -2], nodes[:, -1], nodes=all_nodes),
            StepInfo(res.iterations, res.grad_norm, res.converged))


def node_velocity(body, nodes_all, dt, order):
    """Velocity (B, nv) at the last node from the polynomial through all K+1 nodes (B, K+1, nq)."""
    xp = xp_of(nodes_all)
    tn = collocation_nodes(order)
    W1, _ = basis_derivatives(tn, tn[-1:])
    q_end = nodes_all[:, -1]
    d = xp.stack([difference(body, q_end, nodes_all[:, j]) for j in range(len(tn))], 1)
    return _combine(d, W1[0] / dt)
