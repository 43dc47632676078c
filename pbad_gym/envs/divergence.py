"""Divergence guard: per-trajectory energy checks derived from what gravity and the actuators can inject.

Mechanical energy of a state, measured from a floor so that it is non-negative,

    K = ½ q̇ᵀM(q) q̇ + U_limits(q) + U_contact(q) + m g (z_com − z_floor)        [J]

(U_contact: the penalty contact's normal energy D1/2·d², 0 for impulse contact), changes only by the power of
the actuators and of gravity's unbounded part; damping, drag, friction and contact impulses dissipate. Bounds on
that power from the state alone:

- actuators: P = τᵀq̇ ≤ ‖τ‖_{M⁻¹} ‖q̇‖_M ≤ c_act √(2·KE) with c_act² = Σ_ij gear_i gear_j |(M⁻¹)_ij| over the
  actuated DOFs (|τ_j| ≤ gear_j bounds τᵀM⁻¹τ term by term);
- gravity: its vertical part is a potential bounded below by the ground: the centre of mass cannot sink more
  than the body's reach (:func:`body_reach`, a configuration-free bound on the distance between any two of its
  points) below the ground plane, so z_floor = ground − reach. Without a ground (or for a horizontal part)
  gravity acts like an actuator: P = m gᵀv_com ≤ |g| √m √(2·KE) since ½ m |v_com|² ≤ KE.

With c = c_act + |g_free| √m, one step that does the work τᵀ(q_{k+1} ⊖ q_k) = Δt τᵀq̇_{k+1} gains at most

    K_{k+1} − K_k ≤ c_{k+1} √(2·KE_{k+1}) Δt                               (per-step check),

and from KE ≤ K this gives √K_{k+1} ≤ √K_k + √2 c_{k+1} Δt, so since the reset

    √K_n ≤ s_n = √K_0 + Σ_{k=1..n} √2 c_k Δt                              (cumulative check).

Both are checked with c multiplied by ``safety`` (3 by default, i.e. as if gravity and every actuator could
deliver three times their force — about ten times the energy): the bounds already assume every actuator at full
torque in its most effective direction, so a physical trajectory stays far below them (measured: below a third
of the un-scaled bounds under random actions), while a blow-up grows geometrically and crosses the per-step
bound within a few steps. The
budget starts at each reset (:meth:`EnergyBudget.start`); a state written by ``set_state`` is checked against
the running budget.
"""
from __future__ import annotations

import numpy as np

from ..arrays import to_numpy

DEFAULT_SAFETY = 3.0
SQRT2 = float(np.sqrt(2.0))  # (a constant: np.sqrt(2.0) per check was a step-rate cost)


def _energy_check():
    """The compiled check (imported on first use: only the numba backend, which has imported numba, calls it)."""
    global _ENERGY_CHECK
    if _ENERGY_CHECK is None:
        from ..kernels.numba.guard import energy_check

        _ENERGY_CHECK = energy_check
    return _ENERGY_CHECK


_ENERGY_CHECK = None


def body_reach(body):
    """Upper bound [m] on the distance between any two points of ``body`` in any configuration: the sum over
    links of each link's extent (the farthest of its child joints, centre of mass and contact-sphere surfaces
    from its own joint). inf when a slide joint can move a link without bound (no range)."""
    children = {i: [] for i in range(body.L)}
    for i, lk in enumerate(body.links):
        if lk.parent >= 0:
            children[lk.parent].append(i)
    reach = 0.0
    for i, lk in enumerate(body.links):
        pts = [np.zeros(3), lk.com] + [body.links[j].placement[1] for j in children[i]]
        ext = max(float(np.linalg.norm(p)) for p in pts)
        for centre, r in lk.contact_spheres:
            ext = max(ext, float(np.linalg.norm(centre)) + float(r))
        if lk.joint.type == "slide" and lk.parent >= 0:
            if lk.joint.range is None:
                return float("inf")
            ext += float(np.max(np.abs(np.concatenate(lk.joint.range))))
        reach += ext
    return reach


class EnergyBudget:
    """Energy checks of the B trajectories of one Simulator (see the module docstring).

    sim: the Simulator. actuated (n_act,) DOF indices, gear (n_act,) [N m or N] the largest |τ| per actuator.
    ground: height [m] of the ground plane z = ground, or None without one. safety: factor (> 1) on the power
    coefficient c of both bounds.

    The state's energy terms (kinetic energy, the actuators' coefficient from M⁻¹, limit and contact energies,
    centre of mass) come from :meth:`Simulator.energy_terms`: on the numba backend the step's own compiled call
    computes them, on numpy the reference (:func:`pbad_gym.integrators.state.energy_terms`); what is left here
    is a few (B,) operations — on the numba backend (float64) one compiled call,
    :func:`pbad_gym.kernels.numba.guard.energy_check`, with the same numbers.
    """

    def __init__(self, sim, actuated, gear, ground=None, safety=DEFAULT_SAFETY):
        if not (np.isfinite(safety) and safety > 1):
            raise ValueError(f"divergence safety factor must be a finite number > 1, got {safety!r}")
        self.sim, self.safety = sim, float(safety)
        self.actuated = np.asarray(actuated, dtype=np.int64)
        self.gear = np.asarray(gear, dtype=np.float64)
        sim.track_energy(self.actuated, self.gear)
        body = sim.body
        self.mass = body.total_mass
        g = np.asarray(to_numpy(sim.gravity), dtype=np.float64)
        reach = body_reach(body)
        self.floor = None
        g_free = g
        if ground is not None and g[2] < 0 and np.isfinite(reach):
            self.floor = float(ground) - reach  # lowest centre-of-mass height
            g_free = g * np.array([1.0, 1.0, 0.0])
        self.g = g
        self._mg_z = float(self.mass * g[2])  # (the factor measure() applies to the height above the floor)
        self._compiled = sim.backend == "numba"
        self.c_gravity = float(np.linalg.norm(g_free)) * np.sqrt(self.mass)
        self.round_off = 64 * float(np.finfo(sim.dtype).eps)
        B = sim.num_envs
        self.s = np.zeros(B)  # cumulative bound on √K [√J]
        self.K = np.zeros(B)  # energy of the last accepted state [J]
        self._pending = None

    def measure(self, com=None, terms=None):
        """(K, KE [J], c [√J/s]), each (B,) float64, of the Simulator's current state, or of the states whose
        EnergyTerms are ``terms`` (fields (B,), or (n, B) for n successive states: :meth:`Simulator.step` with substeps;
        the results then (n, B)). com (B, 3): the centre of mass [m]; None takes the one of the energy terms."""
        t = self.sim.energy_terms() if terms is None else terms
        ke = t.kinetic if t.kinetic.dtype == np.float64 else t.kinetic.astype(np.float64)
        c = t.actuation.astype(np.float64, copy=False) + self.c_gravity
        K = ke + t.limits + t.contact  # (float64 + float32 widens exactly)
        if self.floor is not None:
            z = t.com[..., 2] if com is None else np.asarray(com, dtype=np.float64)[:, 2]
            K -= self.mass * self.g[2] * (z - self.floor)
        return K, ke, c

    def start(self, rows, com=None):
        """Start the budgets of ``rows`` (index array) at the current (reset) state, centre of mass com (B, 3)
        (None: the Simulator's)."""
        K, _, _ = self.measure(com)
        self.K[rows] = K[rows]
        self.s[rows] = np.sqrt(np.maximum(K[rows], 0.0))

    def check(self, com=None, terms=None):
        """After a step: (exceeded (B,) bool, K (B,) [J]) of the new state (centre of mass com (B, 3); None: the
        Simulator's). With ``terms`` of n successive steps (fields (n, B), see :meth:`measure`) each step is checked
        against the one before it and the cumulative bound runs through them: exceeded on any of them, K of the
        last. NaN counts as exceeded. :meth:`accept` then commits the rows that go on (to the last state)."""
        with np.errstate(invalid="ignore"):
            return self.check_unguarded(com, terms)

    def check_unguarded(self, com=None, terms=None):
        """:meth:`check` under the caller's floating-point error state: for a caller that already ignores the
        warnings NaN rows raise (the environments' step), without a second ``np.errstate`` per step."""
        t = self.sim.energy_terms() if terms is None else terms
        if self._compiled and com is None and t.kinetic.dtype == np.float64:
            return self._check_compiled(t)
        K, ke, c = self.measure(com, t)
        c = self.safety * c
        dt = self.sim.dt
        if K.ndim == 1:
            K_before, s = self.K, self.s + SQRT2 * c * dt
        else:  # successive steps: the state before step k is step k−1's
            K_before = np.concatenate([self.K[None], K[:-1]])
            s = np.empty_like(K)
            acc = self.s
            for k in range(len(K)):  # as that many single checks add it
                acc = s[k] = acc + SQRT2 * c[k] * dt
        slack = self.round_off * (np.abs(K) + np.abs(K_before))
        step_ok = K - K_before <= c * np.sqrt(2.0 * np.maximum(ke, 0.0)) * dt + slack
        ok = step_ok & (K <= s * s + slack)
        if K.ndim > 1:
            K, s, ok = K[-1], s[-1], ok.all(0)
        self._pending = (K, s)
        return ~ok, K

    def _check_compiled(self, t):
        """:meth:`check_unguarded` of the energy terms ``t`` (float64 NumPy, fields (B,) or (n, B)) in one compiled
        call: the reference's expressions row by row, the same numbers bit for bit."""
        B = self.K.shape[0]
        exceeded, K, s = np.empty(B, dtype=bool), np.empty(B), np.empty(B)
        _energy_check()(t.kinetic.reshape(-1, B), t.actuation.reshape(-1, B), t.limits.reshape(-1, B),
                        t.contact.reshape(-1, B), t.com[..., 2].reshape(-1, B), self.floor is not None, self._mg_z,
                        0.0 if self.floor is None else self.floor, self.c_gravity, self.safety, self.sim.dt,
                        self.round_off, self.K, self.s, exceeded, K, s)
        self._pending = (K, s)
        return exceeded, K

    def accept(self, rows=None):
        """Commit the last :meth:`check` for ``rows`` (bool mask (B,); None: every row): their budgets move on to the
        new state."""
        K, s = self._pending
        if rows is None or rows.all():  # the common case: every row goes on (no copies through np.where)
            self.K, self.s = K, s
        else:
            self.K = np.where(rows, K, self.K)
            self.s = np.where(rows, s, self.s)
