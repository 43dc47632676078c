"""The step contract shared by every integrator (docs/architecture.md, "The step seam").

Every scheme is one function ``step(model, state, tau, options, substeps=1) -> (state, StepInfo)``: ``model`` holds
what does not change between steps (:class:`StepModel`), ``state`` every batched array that does (:class:`State`),
``options`` the :class:`~pbad_gym.integrators.options.SolverOptions`, ``substeps`` how many steps of Δt run under
the same tau (an environment's frame_skip). The NumPy schemes write the single step and get the substeps by
:func:`contract_step` (a loop); a compiled backend may fuse them. Steps never write into their input arrays, so a
State is a value: keeping a reference is a snapshot.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..arrays import to_numpy, tree_map, xp_of
from ..dynamics import centre_of_mass, crba
from ..energies import contact_state, joint_potential, sphere_centres, sphere_forces
from ..energies.contact import normal_point_terms
from ..kinematics import difference, forward_kinematics


class StepModel(NamedTuple):
    """Constants of a simulation: the Body (topology for the NumPy path), its BodyArrays, the ForceModel, Δt [s],
    gravity (3,) [m/s²] as an array of the state's module and dtype, and for contact_model="impulse" the
    ImpulseContact parameters and LCPOptions (else None)."""

    body: object
    arrays: object
    forces: object
    dt: float
    gravity: object
    impulse: object = None
    lcp: object = None
    gauge: object = None


class EnergyGauge(NamedTuple):
    """Which actuators the energy terms measure (envs/divergence.py): actuated (n,) int64 DOF indices and gear
    (n,) float64, each actuator's largest |τ| [N m or N]."""

    actuated: np.ndarray
    gear: np.ndarray

    @classmethod
    def create(cls, actuated, gear):
        """Validated, C-contiguous arrays (the compiled kernel takes them as they are)."""
        act = np.ascontiguousarray(np.asarray(actuated, dtype=np.int64).reshape(-1))
        g = np.ascontiguousarray(np.broadcast_to(np.asarray(gear, dtype=np.float64), act.shape))
        if not np.all(np.isfinite(g)):
            raise ValueError(f"gear must be finite, got {gear!r}")
        return cls(act, g)


class EnergyTerms(NamedTuple):
    """The energy terms of a state that the divergence guard (envs/divergence.py) reads, each batched (B first):
    kinetic ½q̇ᵀM(q)q̇ (B,) [J]; actuation c = √(Σ_ab gear_a gear_b |M⁻¹(q)|_ab) over the gauged DOFs (B,)
    [√J/s] (the bound ‖τ‖_{M⁻¹} ≤ c on an actuator torque's power per √(2·KE); 0 without a gauge); limits
    (B,) [J], the energy stored in the joints (limit penalty and springs, energies.joint_potential); contact
    (B,) [J], the penalty contact's normal energy D1/2·d²; com (B, 3) [m], the centre of mass. The NumPy
    reference (:func:`energy_terms`) gives host float64 arrays, the
    compiled kernel arrays of its dtype."""

    kinetic: object
    actuation: object
    limits: object
    contact: object
    com: object


class State(NamedTuple):
    """Batched state of B trajectories (batch axis first).

    q, q_prev (B, nq): q_k and q_{k−1} (collocation: the previous step's last interior node). qd (B, nv): the
    velocity of the explicit schemes, and the reset velocity until a collocation row's first step. nodes
    (B, K+1, nq): collocation's last nodes or None. contact: penalty ContactMemory of q_k or None. impulse: the
    impulse model's ImpulseState or None. force (B, S, 3) [N]: the ground force of the last step or None.
    fresh (B,) bool: reset since the last step. kin, kin_prev: kinematics of q and q_prev (caches, None until
    needed). time [s]. velocity (B, nv): order 2's (q ⊖ q_prev)/Δt and terms (:class:`EnergyTerms`): caches of
    the new state that a compiled step fills in the same call (None until needed; every step that changes q
    drops them).
    """

    q: object
    q_prev: object
    qd: object
    nodes: object = None
    contact: object = None
    impulse: object = None
    force: object = None
    fresh: object = None
    kin: object = None
    kin_prev: object = None
    time: float = 0.0
    velocity: object = None
    terms: object = None

    def take(self, idx):
        """The rows ``idx`` of every batched field."""
        return tree_map(lambda a: a[idx], self)

    def with_rows(self, idx, new):
        """A copy with rows ``idx`` of every field that both States hold replaced by ``new``'s; fields either
        lacks keep this State's value. A cache (kinematics, velocity, energy terms) that both hold is merged the
        same way (each row's cache depends on that row alone); one that either lacks is dropped."""
        def put(cur, val):
            out = cur.copy()
            out[idx] = val
            return out

        def merged(k, keep_if_missing):
            cur, val = getattr(self, k), getattr(new, k)
            if cur is not None and val is not None:
                return tree_map(put, cur, val)
            return cur if keep_if_missing else None

        fields = {k: merged(k, k not in CACHES) for k in self._fields if k != "time"}
        return State(**fields, time=self.time)


CACHES = ("kin", "kin_prev", "velocity", "terms")  # State fields derived from the others


class StepInfo(NamedTuple):
    """Per-trajectory diagnostics of one step, each (B,): optimiser iterations, scaled gradient norm (units of
    q), converged; the impulse model adds contacts, lcp_iterations, lcp_residual, lcp_converged, sqp_iterations
    and sqp_converged (None otherwise). Of a step with n > 1 substeps: iterations summed over the substeps,
    converged on every substep, the other fields the last substep's, and with a gauge (``model.gauge``) ``terms``:
    the :class:`EnergyTerms` of every substep's state, fields with a leading axis of n (None otherwise)."""

    iterations: object
    grad_norm: object
    converged: object
    contacts: object = None
    lcp_iterations: object = None
    lcp_residual: object = None
    lcp_converged: object = None
    sqp_iterations: object = None
    sqp_converged: object = None
    terms: object = None

    def as_dict(self):
        """The fields that are set, as a dict (the Simulator's public ``step`` result)."""
        return {k: v for k, v in self._asdict().items() if v is not None}


def with_contact_memory(model, state, kinematics=forward_kinematics):
    """``state`` with the penalty contact memory of q_k filled in when it is missing (and the kinematics of q,
    computed by ``kinematics``, when that needed them)."""
    if model.forces.contact is None or state.contact is not None:
        return state
    kin = kinematics(model.body, state.q) if state.kin is None else state.kin
    return state._replace(kin=kin, contact=contact_state(model.body, kin, model.forces.contact, model.dt))


def with_kinematics(model, state):
    """``state`` with the kinematics of q and, for contact, the contact memory of q_k filled in."""
    if state.kin is None:
        state = state._replace(kin=forward_kinematics(model.body, state.q))
    return with_contact_memory(model, state)


def advance(model, state, q_prev, q, kinematics=forward_kinematics, **fields):
    """The State after a step that produced (q_prev, q): kinematics of the new q (by ``kinematics``; None leaves
    them to be computed when asked for), and for penalty contact the force the step applied (the new poses with
    the step's lagged memory) and the memory of the new q_k. The velocity and energy-terms caches of the old state
    are dropped (unless given in ``fields``)."""
    body, contact, force = model.body, state.contact, state.force
    kin = None if kinematics is None else kinematics(body, q)
    if model.forces.contact is not None:
        force = sphere_forces(body, kin, model.forces.contact, contact, model.dt)
        contact = contact_state(body, kin, model.forces.contact, model.dt, prev=contact)
    fresh = None if state.fresh is None else state.fresh & False
    kin_prev = state.kin if q_prev is state.q else None  # collocation's q_prev is a node, not q_k
    fields = {"velocity": None, "terms": None, **fields}
    return state._replace(q=q, q_prev=q_prev, contact=contact, force=force, fresh=fresh, kin=kin,
                          kin_prev=kin_prev, time=state.time + model.dt, **fields)


def energy_terms(model, state, kin, qd):
    """The NumPy (or CuPy) reference of :class:`EnergyTerms` of ``state`` with kinematics ``kin`` of its q and
    velocity qd (B, nv), for the DOFs and gears of ``model.gauge`` (host float64 arrays, as the divergence guard
    has always measured them: the mass matrix by CRBA, M⁻¹ by the array module's inverse)."""
    body, forces, q = model.body, model.forces, state.q
    xp = xp_of(q)
    M = crba(body, q, kin)
    ke = to_numpy(0.5 * xp.sum(qd * (M @ qd[..., None])[..., 0], -1)).astype(np.float64)
    B = ke.shape[0]
    gauge = model.gauge
    if gauge is None or len(gauge.actuated) == 0:
        act = np.zeros(B)
    else:
        a = gauge.actuated
        Minv = to_numpy(xp.linalg.inv(M)[:, a[:, None], a[None, :]]).astype(np.float64)
        act = np.sqrt(np.einsum("i,bij,j->b", gauge.gear, np.abs(Minv), gauge.gear))
    limits = to_numpy(joint_potential(body, forces, q)).astype(np.float64)
    contact = (to_numpy(normal_point_terms(body, sphere_centres(body, kin), forces.contact, False)[0]).astype(
        np.float64) if forces.contact is not None else np.zeros(B))
    com = np.asarray(to_numpy(centre_of_mass(body, kin=kin)), dtype=np.float64)
    return EnergyTerms(ke, act, limits, contact, com)


def order2_velocity(model, state):
    """(q ⊖ q_prev)/Δt (B, nv): order 2's velocity of ``state`` (NumPy / CuPy reference)."""
    return difference(model.body, state.q_prev, state.q) / model.dt


def check_substeps(n):
    """``n`` (substeps of a step) as an int >= 1; ValueError otherwise."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"substeps must be a positive integer, got {n!r}")
    return int(n)


def order2_state_velocity(model, state, options):
    """(state with its velocity cache, the velocity (q ⊖ q_prev)/Δt): order 2's velocity (PBAD, impulse)."""
    v = state.velocity
    if v is None:
        v = order2_velocity(model, state)
        state = state._replace(velocity=v)
    return state, v


def stored_velocity(model, state, options):
    """(state, state.qd): the velocity an explicit scheme carries."""
    return state, state.qd


def with_energy_terms(model, state, options, velocity):
    """``state`` with its kinematics and energy-terms caches filled (the NumPy reference :func:`energy_terms`,
    velocity by ``velocity(model, state, options) -> (state, qd)``); a state that has them is returned as is."""
    if state.terms is not None:
        return state
    if state.kin is None:
        state = state._replace(kin=forward_kinematics(model.body, state.q))
    state, qd = velocity(model, state, options)
    return state._replace(terms=energy_terms(model, state, state.kin, qd))


def combine_infos(infos, terms=None):
    """One StepInfo of successive substeps: iterations summed, converged on every one, the rest the last's;
    ``terms``: the substeps' EnergyTerms (a list), stacked on a leading axis (host float64)."""
    xp = xp_of(infos[0].converged)
    iterations = sum(i.iterations for i in infos)
    converged = infos[0].converged
    for i in infos[1:]:
        converged = xp.logical_and(converged, i.converged)
    stacked = None
    if terms:
        stacked = EnergyTerms(*(np.stack([to_numpy(f) for f in fields]) for fields in zip(*terms)))
    return infos[-1]._replace(iterations=iterations, converged=converged, terms=stacked)


def contract_step(velocity):
    """Decorator: the step contract ``step(model, state, tau, options, substeps=1)`` of a single step
    ``single(model, state, tau, options)``, looping over the substeps; with a gauge (``model.gauge``) every
    substep's state gets its energy terms (``velocity(model, state, options) -> (state, qd)``: the scheme's
    velocity), returned stacked in ``StepInfo.terms``. One substep is the single step itself."""
    def wrap(single):
        @functools.wraps(single)
        def step(model, state, tau, options, substeps=1):
            n = check_substeps(substeps)
            if n == 1:
                return single(model, state, tau, options)
            infos, terms = [], []
            for _ in range(n):
                state, info = single(model, state, tau, options)
                infos.append(info)
                if model.gauge is not None:
                    state = with_energy_terms(model, state, options, velocity)
                    terms.append(state.terms)
            return state, combine_infos(infos, terms)

        step.single = single
        return step

    return wrap
