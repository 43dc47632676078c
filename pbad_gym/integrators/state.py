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

from ..arrays import tree_map, xp_of
from ..energies import contact_state, sphere_forces
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


class State(NamedTuple):
    """Batched state of B trajectories (batch axis first).

    q, q_prev (B, nq): q_k and q_{k−1} (collocation: the previous step's last interior node). qd (B, nv): the
    velocity of the explicit schemes, and the reset velocity until a collocation row's first step. nodes
    (B, K+1, nq): collocation's last nodes or None. contact: penalty ContactMemory of q_k or None. impulse: the
    impulse model's ImpulseState or None. force (B, S, 3) [N]: the ground force of the last step or None.
    fresh (B,) bool: reset since the last step. kin, kin_prev: kinematics of q and q_prev (caches, None until
    needed). time [s]. velocity (B, nv): order 2's (q ⊖ q_prev)/Δt, a cache of the new state that a compiled step
    fills in the same call (None until needed; every step that changes q drops it). newton: the order-2 LM's
    NewtonMemory (integrators/newton.py: q_{k−1} of the last step and its last Newton factor, which make the next
    step's solve cheaper) or None; a reset row holds none.
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
    newton: object = None
    back: object = None

    def take(self, idx):
        """The rows ``idx`` of every batched field."""
        return tree_map(lambda a: a[idx], self)

    def with_rows(self, idx, new):
        """A copy with rows ``idx`` of every field that both States hold replaced by ``new``'s; fields either
        lacks keep this State's value. A cache (kinematics, velocity) that both hold is merged the
        same way (each row's cache depends on that row alone); one that either lacks is dropped. The Newton
        memory of rows taken from a State without one is forgotten (a reset row starts without)."""
        def put(cur, val):
            out = cur.copy()
            out[idx] = val
            return out

        def merged(k, keep_if_missing):
            cur, val = getattr(self, k), getattr(new, k)
            if cur is not None and val is not None:
                return tree_map(put, cur, val)
            if k == "newton" and cur is not None:
                return cur.forget(idx)
            return cur if keep_if_missing else None

        fields = {k: merged(k, k not in CACHES) for k in self._fields if k != "time"}
        return State(**fields, time=self.time)


CACHES = ("kin", "kin_prev", "velocity")  # State fields derived from the others


class StepInfo(NamedTuple):
    """Per-trajectory diagnostics of one step, each (B,): optimiser iterations, scaled gradient norm (units of
    q), converged; the impulse model adds contacts, lcp_iterations, lcp_residual, lcp_converged, sqp_iterations
    and sqp_converged (None otherwise). Of a step with n > 1 substeps: iterations summed over the substeps,
    converged on every substep, the other fields the last substep's, and every substep's state as the environments'
    divergence guard checks it: substep_q (n, B, nq) and substep_qd (n, B, nv), the configuration and the scheme's
    velocity after each substep (arrays of the state's module; None for one step, whose state is the new State),
    and where the backend computed them anyway (numba), substep_kin: the Kinematics of each substep's
    configuration (fields with a leading axis n)."""

    iterations: object
    grad_norm: object
    converged: object
    contacts: object = None
    lcp_iterations: object = None
    lcp_residual: object = None
    lcp_converged: object = None
    sqp_iterations: object = None
    sqp_converged: object = None
    substep_q: object = None
    substep_qd: object = None
    substep_kin: object = None

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


def advance(model, state, q_prev, q, kinematics=forward_kinematics, contact_dt=None, **fields):
    """The State after a step that produced (q_prev, q): kinematics of the new q (by ``kinematics``; None leaves
    them to be computed when asked for), and for penalty contact the force the step applied (the new poses with
    the step's lagged memory) and the memory of the new q_k. contact_dt: the Δt [s] the step's contact terms were
    written with (None: the model's; BDF2: 2Δt/3). The velocity cache of the old state is dropped (unless given in
    ``fields``)."""
    body, contact, force = model.body, state.contact, state.force
    kin = None if kinematics is None else kinematics(body, q)
    if model.forces.contact is not None:
        h = model.dt if contact_dt is None else contact_dt
        force = sphere_forces(body, kin, model.forces.contact, contact, h)
        contact = contact_state(body, kin, model.forces.contact, h, prev=contact)
    fresh = None if state.fresh is None else state.fresh & False
    kin_prev = state.kin if q_prev is state.q else None  # collocation's q_prev is a node, not q_k
    fields = {"velocity": None, **fields}
    return state._replace(q=q, q_prev=q_prev, contact=contact, force=force, fresh=fresh, kin=kin,
                          kin_prev=kin_prev, time=state.time + model.dt, **fields)


def order2_velocity(model, state):
    """(q ⊖ q_prev)/Δt (B, nv): order 2's velocity of ``state`` (NumPy / CuPy reference)."""
    return difference(model.body, state.q_prev, state.q) / model.dt


def check_substeps(n):
    """``n`` (substeps of a step) as an int >= 1; ValueError otherwise."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"substeps must be a positive integer, got {n!r}")
    return int(n)


def cached_velocity(velocity):
    """The ``state_velocity(model, state, options) -> (state with its velocity cache, the velocity)`` of a scheme
    whose velocity is ``velocity(model, state)`` (computed once per State, then read from the cache)."""
    def state_velocity(model, state, options):
        v = state.velocity
        if v is None:
            v = velocity(model, state)
            state = state._replace(velocity=v)
        return state, v

    return state_velocity


order2_state_velocity = cached_velocity(order2_velocity)  # order 2's (q ⊖ q_prev)/Δt (PBAD, impulse)


def stored_velocity(model, state, options):
    """(state, state.qd): the velocity an explicit scheme carries."""
    return state, state.qd


def combine_infos(infos, qs=None, qds=None):
    """One StepInfo of successive substeps: iterations summed, converged on every one, the rest the last's;
    ``qs``, ``qds``: the substeps' configurations (B, nq) and velocities (B, nv) (lists), stacked on a leading
    axis as substep_q (n, B, nq) and substep_qd (n, B, nv)."""
    xp = xp_of(infos[0].converged)
    iterations = sum(i.iterations for i in infos)
    converged = infos[0].converged
    for i in infos[1:]:
        converged = xp.logical_and(converged, i.converged)
    info = infos[-1]._replace(iterations=iterations, converged=converged)
    if qs:
        info = info._replace(substep_q=xp.stack(qs), substep_qd=xp.stack(qds))
    return info


def contract_step(velocity):
    """Decorator: the step contract ``step(model, state, tau, options, substeps=1)`` of a single step
    ``single(model, state, tau, options)``, looping over the substeps; every substep's configuration and velocity
    (``velocity(model, state, options) -> (state, qd)``: the scheme's velocity) are returned stacked in
    ``StepInfo.substep_q`` / ``substep_qd`` (what the environments' divergence guard checks). One substep is the
    single step itself."""
    def wrap(single):
        @functools.wraps(single)
        def step(model, state, tau, options, substeps=1):
            n = check_substeps(substeps)
            if n == 1:
                return single(model, state, tau, options)
            infos, qs, qds = [], [], []
            for _ in range(n):
                state, info = single(model, state, tau, options)
                infos.append(info)
                state, qd = velocity(model, state, options)
                qs.append(state.q)
                qds.append(qd)
            return state, combine_infos(infos, qs, qds)

        step.single = single
        return step

    return wrap
