"""What one order-2 step's solve leaves for the next: the Newton memory (docs/physics.md §2.5).

Two things make a converged step cheap when Δt is small beside the motion:

- **A higher-order warm start.** q_k ⊕ (Δq + Δ²q + Δ³q), the backward differences of the last three steps'
  change, extrapolates the motion to third order where q_k ⊕ (q_k ⊖ q_{k−1}) extrapolated to first: its error is
  O(Δt⁴) instead of O(Δt²). At 0.001 s a 10-link chain's warm start then lies a median 2.4 tolerances from the
  solution (27 at second order), within reach of one chord step; where q_{k−3} is not known yet (the second step
  after a reset) it is second order, Δ³q left out.
- **Chord first iterations.** The step Hessian moves little between steps 1 ms apart, so the first iterations
  solve with the Cholesky factor kept from the last damped system the previous step solved (O(nv²)) instead of
  forming and factoring a new Hessian (O(nv²) to form, O(nv³) to factor): up to CHORD_STEPS of them while each is
  accepted and contracts the measure by CHORD_RATE, and only from a warm start within CHORD_GATE times the
  tolerance. Where they meet the tolerance the step is done without a
  Hessian at all; elsewhere the step goes on as before, with a fresh Hessian at the last accepted point. The LM's
  accept test and convergence measure are unchanged, so every accepted point still decreases the step energy and
  meets the same tolerance: the memory decides only how the solver gets there (trajectories agree with a
  memoryless solve to the solver tolerance, not bit for bit).

The step energy (and so the armature term's target, the first-order prediction) is unchanged. The memory lives in
the State (``State.newton``); a reset row has none (its first step starts first-order, with a fresh Hessian), a
restored State carries its own. Both engines (NumPy here, the numba kernel's lm.step_row) take the same decisions.
The second-order start is gated by how well it predicted the last step (TRUST): on long chains the extrapolation
otherwise rings on the solves' residual errors and costs more iterations than it saves (docs/physics.md §2.5).
"""
from __future__ import annotations

from typing import NamedTuple

from ..arrays import xp_of
from ..kinematics import difference, integrate


class NewtonMemory(NamedTuple):
    """The Newton memory of a batch of B states (each row its own).

    q_back (B, nq): q_{k−1} of the step that arrived at the state (the next step's q_{k−2}); history (B,) bool: q_back
    is valid (False after a reset); q_back2 (B, nq), history2 (B,) bool: the same one step further back (the next step's
    q_{k−3}, for the third-order start). factor (B, nv, nv): lower Cholesky factor L of the last damped system H +
    μ·diag(D) the step solved, D (B, nv) and mu (B,) that system's Gauss-Newton diagonal and damping; valid (B,) bool:
    the factor is usable (the last solve was a finite Cholesky solve). trust (B,) bool: the second-order extrapolation
    predicted the step that arrived here TRUST times better than the first-order one (:func:`predictor_trust`; True
    where that step had no q_{k−2} to judge by). It gates the higher-order start as a whole."""

    q_back: object
    history: object
    factor: object
    D: object
    mu: object
    valid: object
    trust: object
    q_back2: object
    history2: object

    def forget(self, rows):
        """A copy with rows ``rows`` holding nothing (a reset): neither history nor a factor (and trust restored: a
        new motion's extrapolation is judged afresh)."""
        history, valid, trust = self.history.copy(), self.valid.copy(), self.trust.copy()
        history2 = self.history2.copy()
        history[rows] = False
        history2[rows] = False
        valid[rows] = False
        trust[rows] = True
        return self._replace(history=history, valid=valid, trust=trust, history2=history2)


SMOOTH = 0.5  # the memory is used where max_j |Δ²q_j| ≤ SMOOTH · max_j |Δq_j|, the third order where also
# max_j |Δ³q_j| ≤ SMOOTH · max_j |Δ²q_j| (:func:`warm_start`)
# Chord steps go on while each is accepted and cuts the convergence measure to CHORD_RATE of the last one, at most
# CHORD_STEPS of them; then the LM goes on with a fresh Hessian. One: up to three at a rate of 0.25 ran the Ant
# body at 0.001 s and a 10-link chain 0.8-0.9x as fast as one (the chord contracts too slowly where one step does
# not converge; BENCHMARKS.md, "The Newton memory").
CHORD_STEPS = 1
CHORD_RATE = 0.25
# The chord step is tried only where the warm start's convergence measure is within CHORD_GATE times the tolerance:
# a chord step contracts it by 0.05-0.4 (NumPy, 8 rows x 450 steps at 0.001 s: median 0.05 on a 10-link chain, 0.37
# on 40 links), so from further out it rarely converges and costs an energy evaluation before the fresh Hessian.
CHORD_GATE = 10.0
# The second-order start is used only after a step whose solution it would have predicted at least 1/TRUST times
# closer than the first-order start did (max-norm in the tangent space; :func:`predictor_trust`, judged on every step
# whichever start it took). Where the solves' residual errors excite a barely damped mode (the tip of a long chain)
# the extrapolation amplifies them (weights 3, −3, 1) and stops being closer; the first-order start (weights 2, −1)
# then keeps the mode quiet: an 80-link chain took 1.77 LM iterations per step with the memory ungated, 1.00
# without the memory and 0.79 with the gate (BENCHMARKS.md, "The Newton memory").
TRUST = 0.25


def warm_start(body, q_back, q_prev, q, q_pred, history, q_back2, history2):
    """(x0 (B, nq), smooth (B,) bool): the LM's first point, q_k ⊕ (Δq + Δ²q + Δ³q) with Δq = q_k ⊖ q_{k−1},
    Δ²q = Δq − (q_{k−1} ⊖ q_{k−2}) and Δ³q = Δ²q − ((q_{k−1} ⊖ q_{k−2}) − (q_{k−2} ⊖ q_{k−3})), where the motion is
    smooth — ``history`` (B,) is set and max_j |Δ²q_j| ≤ SMOOTH · max_j |Δq_j| — and q_pred = q_k ⊕ Δq elsewhere; Δ³q
    only where also ``history2`` (B,) is set (q_back2 = q_{k−3} is known) and max_j |Δ³q_j| ≤ SMOOTH · max_j |Δ²q_j|
    (after a change of the actuation, a contact switch, the third difference jumps and the extrapolation would carry the
    jump on). ``smooth`` also says where the chord step may be tried. Where the last step's motion changed by as much as
    the motion itself (an impact, a joint slammed into its limit, a violent large step) the extrapolation is no better
    than the first-order guess, and on an energy with several minima (rotations of a radian per step) it can start the
    solve in another one's basin."""
    xp = xp_of(q)
    d1 = difference(body, q_prev, q)
    e1 = difference(body, q_back, q_prev)
    d2 = d1 - e1
    d3 = d2 - (e1 - difference(body, q_back2, q_back))
    smooth = history & (xp.max(xp.abs(d2), -1) <= SMOOTH * xp.max(xp.abs(d1), -1))
    third = smooth & history2 & (xp.max(xp.abs(d3), -1) <= SMOOTH * xp.max(xp.abs(d2), -1))
    x = integrate(body, q, d1 + d2 + xp.where(third[:, None], d3, 0.0))
    return xp.where(smooth[:, None], x, q_pred), smooth


def predictor_trust(body, q_back, q_prev, q, q_next, history):
    """(B,) bool: whether the second-order extrapolation from q_back, q_prev, q (q_{k−2}, q_{k−1}, q_k; (B, nq))
    predicted the step's solution q_next at least 1/TRUST times closer than the first-order one, max_j of
    |u − Δq − Δ²q|_j against max_j |u − Δq|_j with u = q_next ⊖ q_k, Δq = q_k ⊖ q_{k−1}, Δ²q = Δq − (q_{k−1} ⊖
    q_{k−2}) — and True where ``history`` (B,) is not set (no q_{k−2} to judge by). kernels/numba/lm.py
    predictor_trust is the same arithmetic, row by row."""
    xp = xp_of(q)
    d1 = difference(body, q_prev, q)
    d2 = d1 - difference(body, q_back, q_prev)
    u = difference(body, q, q_next) - d1
    return ~history | (xp.max(xp.abs(u - d2), -1) <= TRUST * xp.max(xp.abs(u), -1))  # (NaN: not trusted)


def chord_solve(factor, g):
    """δ = −(L Lᵀ)⁻¹ g (B, nv) for lower Cholesky factors L (B, nv, nv)."""
    xp = xp_of(g)
    y = xp.linalg.solve(factor, -g[..., None])
    return xp.linalg.solve(xp.swapaxes(factor, -1, -2), y)[..., 0]


def cholesky_rows(A):
    """(L (B, n, n), ok (B,) bool): the lower Cholesky factor of each A (B, n, n) where it is positive definite
    (LAPACK's test; L is zero elsewhere)."""
    xp = xp_of(A)
    try:
        return xp.linalg.cholesky(A), xp.ones(A.shape[0], dtype=bool)
    except xp.linalg.LinAlgError:  # one indefinite member fails the whole call: one at a time
        L, ok = xp.zeros_like(A), xp.zeros(A.shape[0], dtype=bool)
        for i in range(A.shape[0]):
            try:
                L[i], ok[i] = xp.linalg.cholesky(A[i]), True
            except xp.linalg.LinAlgError:
                pass
        return L, ok
