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

The guard belongs to the environments: the physics knows nothing of it. Its energy terms are a pure function of a
state (q, q̇) and of the model's constants (:func:`energy_terms`): on the numba and cuda backends the kernel's
compiled code (``kernels.numba.step.energy_terms_numba`` / ``kernels.cuda.launch.energy_terms_cuda``, in the
simulation's dtype), else the NumPy reference :func:`energy_terms_reference`. A step of n substeps (frame_skip)
reports every substep's (q, q̇) (``StepInfo.substep_q`` / ``substep_qd``), and each is checked.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..arrays import to_numpy, xp_of
from ..dynamics import centre_of_mass, crba
from ..energies import joint_potential, sphere_centres
from ..energies.contact import normal_point_terms
from ..kinematics import forward_kinematics

DEFAULT_SAFETY = 3.0
SQRT2 = float(np.sqrt(2.0))  # (a constant: np.sqrt(2.0) per check was a step-rate cost)


class EnergyTerms(NamedTuple):
    """The energy terms of states that the guard reads, each with the states' leading axes (B,) or (n, B):
    kinetic ½q̇ᵀM(q)q̇ [J]; actuation c = √(Σ_ab gear_a gear_b |M⁻¹(q)|_ab) over the actuated DOFs [√J/s] (the
    bound ‖τ‖_{M⁻¹} ≤ c on an actuator torque's power per √(2·KE); 0 without actuators); limits [J], the
    energy stored in the joints (limit penalty, springs); contact [J], the penalty contact's normal energy
    D1/2·d²; com (…, 3) [m], the centre of mass. The reference (:func:`energy_terms_reference`) gives float64
    arrays, the compiled kernels arrays of the simulation's dtype; host (NumPy) arrays either way."""

    kinetic: object
    actuation: object
    limits: object
    contact: object
    com: object


class GuardModel(NamedTuple):
    """The constants the guard's energy terms read: the Body, its ForceModel, Δt [s] (the kernels' constants are
    keyed on it), actuated (n,) int64 DOF indices, gear (n,) float64 [N m or N] the largest |τ| per actuator, and
    ``backend`` ("numba", "cuda" or "numpy": whose code computes the terms)."""

    body: object
    forces: object
    dt: float
    actuated: np.ndarray
    gear: np.ndarray
    backend: str


def energy_terms_reference(model, q, qd, kin=None):
    """The NumPy (or CuPy) reference of the :class:`EnergyTerms` of states q (B, nq) with velocities qd (B, nv)
    and kinematics ``kin`` of q (None: computed here), host float64 arrays (B,) / (B, 3): the mass matrix by CRBA,
    M⁻¹ by the array module's inverse."""
    body, forces = model.body, model.forces
    xp = xp_of(q)
    kin = forward_kinematics(body, q) if kin is None else kin
    M = crba(body, q, kin)
    ke = to_numpy(0.5 * xp.sum(qd * (M @ qd[..., None])[..., 0], -1)).astype(np.float64)
    B = ke.shape[0]
    a = model.actuated
    if len(a) == 0:
        act = np.zeros(B)
    else:
        Minv = to_numpy(xp.linalg.inv(M)[:, a[:, None], a[None, :]]).astype(np.float64)
        act = np.sqrt(np.einsum("i,bij,j->b", model.gear, np.abs(Minv), model.gear))
    limits = to_numpy(joint_potential(body, forces, q)).astype(np.float64)
    contact = (to_numpy(normal_point_terms(body, sphere_centres(body, kin), forces.contact, False)[0]).astype(
        np.float64) if forces.contact is not None else np.zeros(B))
    com = np.asarray(to_numpy(centre_of_mass(body, kin=kin)), dtype=np.float64)
    return EnergyTerms(ke, act, limits, contact, com)


def energy_terms(model, q, qd, kin=None):
    """The :class:`EnergyTerms` of states with configurations q (B, nq) or (n, B, nq) and velocities qd (B, nv)
    or (n, B, nv) (fields (B,) or (n, B); com with a trailing 3), for the GuardModel ``model``: a pure function of
    the states. numba / cuda: the kernel's compiled arithmetic in the states' dtype (views of one (…, N_TERMS)
    host array); numpy: :func:`energy_terms_reference` state by state (``kin``: the kinematics of q (B, nq), to
    reuse the simulator's)."""
    if model.backend in ("numba", "cuda"):
        if model.backend == "numba":
            from ..kernels.numba.step import energy_terms_numba as compiled
        else:
            from ..kernels.cuda.launch import energy_terms_cuda as compiled
        return _columns(to_numpy(compiled(model.body, model.forces, model.dt, model.actuated, model.gear, q, qd)))
    if q.ndim == 2:
        return energy_terms_reference(model, q, qd, kin)
    per_state = [energy_terms_reference(model, q[k], qd[k]) for k in range(q.shape[0])]
    return EnergyTerms(*(np.stack(fields) for fields in zip(*per_state)))


def _columns(out):
    """:class:`EnergyTerms` (views) of the compiled kernels' terms array (…, N_TERMS) (kernels.numba.constants.T_*,
    imported on first use: only the compiled backends, which have imported the kernels, call this)."""
    global _COLUMNS
    if _COLUMNS is None:
        from ..kernels.numba.constants import T_ACTUATION, T_COM, T_CONTACT, T_KINETIC, T_LIMITS

        _COLUMNS = T_KINETIC, T_ACTUATION, T_LIMITS, T_CONTACT, slice(T_COM, T_COM + 3)
    k, a, lim, c, com = _COLUMNS
    return EnergyTerms(out[..., k], out[..., a], out[..., lim], out[..., c], out[..., com])


_COLUMNS = None


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

    The states' energy terms (kinetic energy, the actuators' coefficient from M⁻¹, limit and contact energies,
    centre of mass) come from :func:`energy_terms` (:meth:`terms`); what is left here is a few (B,) operations.
    After a step (:meth:`check_step`) the numba backend computes both in one compiled call
    (:class:`pbad_gym.kernels.numba.step.GuardNumba`), with the same numbers.
    """

    def __init__(self, sim, actuated, gear, ground=None, safety=DEFAULT_SAFETY):
        if not (np.isfinite(safety) and safety > 1):
            raise ValueError(f"divergence safety factor must be a finite number > 1, got {safety!r}")
        self.sim, self.safety = sim, float(safety)
        self.actuated = np.asarray(actuated, dtype=np.int64)
        self.gear = np.ascontiguousarray(np.broadcast_to(np.asarray(gear, dtype=np.float64), self.actuated.shape))
        if not np.all(np.isfinite(self.gear)):
            raise ValueError(f"gear must be finite, got {gear!r}")
        self.model = GuardModel(sim.body, sim.forces, sim.dt, self.actuated, self.gear, sim.backend)
        self._current = (None, None, None)  # (q, q̇) arrays of the last state measured, and its EnergyTerms
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
        self.c_gravity = float(np.linalg.norm(g_free)) * np.sqrt(self.mass)
        self.round_off = 64 * float(np.finfo(sim.dtype).eps)
        self._compiled = None
        if sim.backend == "numba":  # terms and checks of a step's states in one compiled call (check_step)
            from ..kernels.numba.step import GuardNumba

            has_floor = self.floor is not None
            constants = (has_floor, float(self.mass * g[2]), self.floor if has_floor else 0.0, self.c_gravity,
                         self.safety, float(sim.dt), self.round_off)
            self._compiled = GuardNumba(sim.body, sim.forces, sim.dt, self.actuated, self.gear, sim.dtype,
                                        constants)
        B = sim.num_envs
        self.s = np.zeros(B)  # cumulative bound on √K [√J]
        self.K = np.zeros(B)  # energy of the last accepted state [J]
        self._pending = None

    def terms(self, q=None, qd=None):
        """:class:`EnergyTerms` of the states q (n, B, nq), qd (n, B, nv) (fields (n, B): a step's substeps,
        ``StepInfo.substep_q`` / ``substep_qd``), or with q None of the Simulator's current state (:meth:`current`
        of its view)."""
        if q is not None:
            return energy_terms(self.model, q, qd)
        return self.current(self.sim.view())

    def current(self, view):
        """:class:`EnergyTerms` (fields (B,)) of the state a :class:`~pbad_gym.simulator.StateView` shows, kept while
        its q and q̇ are the same arrays (steps never write into a state's arrays; :meth:`check_step` leaves the
        terms of the step's last state, the one its view shows)."""
        q, qd, t = self._current
        if q is not view.q or qd is not view.qd:
            t = energy_terms(self.model, view.q, view.qd, view.kin if self.model.backend == "numpy" else None)
            self._current = (view.q, view.qd, t)
        return t

    def measure(self, com=None, terms=None):
        """(K, KE [J], c [√J/s]), each (B,) float64, of the Simulator's current state, or of the states whose
        EnergyTerms are ``terms`` (fields (B,), or (n, B) for n successive states: :meth:`Simulator.step` with substeps;
        the results then (n, B)). com (B, 3): the centre of mass [m]; None takes the one of the energy terms."""
        t = self.terms() if terms is None else terms
        ke = t.kinetic if t.kinetic.dtype == np.float64 else t.kinetic.astype(np.float64)
        c = t.actuation.astype(np.float64, copy=False) + self.c_gravity
        K = ke + t.limits + t.contact  # (float64 + float32 widens exactly)
        if self.floor is not None:
            z = t.com[..., 2] if com is None else np.asarray(com, dtype=np.float64)[:, 2]
            K -= self.mass * self.g[2] * (z - self.floor)
        return K, ke, c

    def start(self, rows, com=None, view=None):
        """Start the budgets of ``rows`` (index array) at the (reset) state of ``view`` (a StateView; None: the
        Simulator's current state), centre of mass com (B, 3) (None: the state's)."""
        K, _, _ = self.measure(com, self.current(self.sim.view() if view is None else view))
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
        K, ke, c = self.measure(com, terms)
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

    def check_step(self, view, info):
        """After a step (``Simulator.advance``'s StateView of the new state and StepInfo): (exceeded (B,) bool,
        K (B,) [J]) of the states it went through — with n > 1 substeps every substep's (``info.substep_q``
        (n, B, nq), ``substep_qd`` (n, B, nv), and ``substep_kin`` where the backend reports it), else the new
        state's — as :meth:`check` of their energy terms, under the caller's floating-point error state. On the
        numba backend the terms (from the step's own kinematics) and the checks are one compiled call
        (kernels.numba.guard: the reference's expressions, the same numbers bit for bit). The terms of the last
        state become :meth:`current`'s for ``view``."""
        q, qd = info.substep_q, info.substep_qd
        if self._compiled is None or (q is not None and info.substep_kin is None):  # (Simulator.step's info)
            if q is None:
                return self.check_unguarded(terms=self.current(view))
            t = energy_terms(self.model, q, qd)
            self._current = (view.q, view.qd, EnergyTerms(*(f[-1] for f in t)))
            return self.check_unguarded(terms=t)
        if q is None:
            k = view.kin
            q, qd, kin = view.q[None], view.qd[None], (k.R[None], k.t[None], k.w[None], k.v[None])
        else:
            kin = info.substep_kin
        exceeded, K, s, out = self._compiled(q, qd, kin, self.K, self.s)
        self._current = (view.q, view.qd, _columns(out[-1]))
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
