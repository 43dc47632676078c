"""Simulator: a body, the step options and the batched State of ``num_envs`` trajectories.

The Simulator packs its keyword arguments once into a StepModel (constants), SolverOptions / LCPOptions and a State,
picks one step implementation from a registry keyed by (scheme, backend), and then only calls
``state, info = step(model, state, tau, options)``.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from .arrays import check_dtype, get_xp, real_number, to_numpy
from .dynamics import GRAVITY, energy
from .energies import DEFAULT_SPRINGS, contact_state, make_force_model, sphere_forces
from .integrators import (CONTACT_MODELS, INTEGRATORS, PBAD_INTEGRATORS, LCPOptions, SolverOptions, State,
                          StepModel, bdf2, collocation, explicit_step, impulse, pbad)
from .integrators.collocation import node_velocity, start_node
from .integrators.state import order2_velocity
from .kinematics import forward_kinematics, integrate, normalize

BACKENDS = ("numpy", "numba", "cuda")
log = logging.getLogger(__name__)


class StateView(NamedTuple):
    """What an environment reads of a Simulator's state (:meth:`Simulator.view`), arrays of the Simulator's module and
    dtype: q (B, nq), qd (B, nv), kin (the Kinematics of q), force (B, S, 3) [N, world] the ground force of the last
    step (:attr:`Simulator.contact_forces`; None without ground contact)."""

    q: object
    qd: object
    kin: object
    force: object


def numba_available() -> bool:
    """True when numba imports (the compiled CPU backend can run)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def default_backend(device="cpu"):
    """numba on CPU when it imports, else numpy (CuPy runs the numpy code on device arrays)."""
    return "numba" if device == "cpu" and numba_available() else "numpy"


def select_step(integrator, order, contact_model, backend="numpy", *, optimizer="lm", hessian="exact",
                dtype=np.float64, device="cpu"):
    """The step function of the step contract for a scheme and backend, and the backend that runs it: a case
    the compiled kernel does not cover runs on numpy, with the reason logged once (INFO)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "numba":
        if not numba_available():
            raise ValueError("backend='numba' needs numba: pip install numba")
        from .kernels import numba as kernel

        reason = kernel.supports(None, integrator=integrator, order=order, optimizer=optimizer,
                                 contact_model=contact_model, hessian=hessian, dtype=dtype, device=device)
        if reason is None:
            from .kernels.numba.contract import bdf2_step, step

            return (bdf2_step if integrator == "bdf2" else step), "numba"
        log.info("backend='numba' falls back to numpy: %s", reason)
    if backend == "cuda":
        from .kernels import cuda as fused

        why = fused.unavailable_reason(device)
        if why is not None:
            raise ValueError(why)
        reason = fused.supports(integrator=integrator, order=order, optimizer=optimizer, contact_model=contact_model,
                                hessian=hessian, dtype=dtype)
        if reason is None:
            from .kernels.cuda.contract import step

            return step, "cuda"
        log.info("backend='cuda' falls back to numpy: %s", reason)
    if integrator == "bdf2":
        return bdf2.step, "numpy"
    if integrator != "pbad":
        return explicit_step(integrator), "numpy"
    if order > 2:
        return collocation.step, "numpy"
    return (impulse.step if contact_model == "impulse" else pbad.step), "numpy"


def select_finish(backend):
    """The backend's ``finish(model, state) -> state`` that fills the velocity and kinematics caches of a state
    that did not come out of a step (None: the NumPy references fill them one at a time)."""
    if backend == "numba":
        from .kernels.numba.contract import finish

        return finish
    if backend == "cuda":
        from .kernels.cuda.contract import finish

        return finish
    return None


class Simulator:
    """Batched simulation of one articulated ``body``.

    Args:
        body: a :class:`pbad_gym.model.Body`.
        dt: time step [s].
        integrator: "pbad" (position-based, order 2), "bdf2" (the same step energy with BDF2 differences: second
            order in Δt, NumPy engine and numba kernel, implicit penalty springs; docs/physics.md §2.6) or a
            baseline: "euler", "semi_implicit_euler", "rk4".
        optimizer: "lm" (Levenberg-Marquardt), "lbfgs" (diagonal initial inverse Hessian) or "lbfgs_hessian"
            (L-BFGS from the inverse Gauss-Newton step Hessian at the warm start) for PBAD.
        num_envs: batch size B.
        dtype: float64 (default) or float32.
        device: "cpu" (NumPy) or "cuda" (CuPy).
        gravity: (3,) [m/s²].
        max_iter, tol: optimiser limits (max_iter default: 50 for LM, 500 for L-BFGS); tol is the scaled
            gradient tolerance in units of q (rad, m), default 1e-9 in float64 and 1e-5 in float32.
        hessian: "exact" or "gauss_newton".
        newton_memory: keep a Newton memory between order-2 LM steps (a third-order warm start and a chord first
            iteration: docs/physics.md §2.5); on by default (False: the memoryless solve, the same trajectories
            to the solver tolerance).
        order: 2 (the PBAD energy step) or 3 / 4 (position-based collocation, docs/physics.md §3).
        contact_model: "penalty" (contact energies in the step, docs/physics.md §2) or "impulse" (a contact-free PBAD
            step corrected by a boxed LCP on the contact impulses, §7; ``contact`` is then None/True, a dict of
            :class:`pbad_gym.integrators.ImpulseContact` fields or an ImpulseContact).
        lcp_method, lcp_order, lcp_omega, lcp_iterations, lcp_tol: the impulse model's LCP solver
            (:func:`pbad_gym.lcp.solve`; lcp_omega is the relaxation ω of "pgs", "psor" and "amgs").
        drag: fluid drag coefficients [1/s] (PBAD only): scalar (isotropic), (axial, normal), (3,), (L, 2) or
            (L, 3) in each link's frame (axial = link x axis); None: no drag.
        contact: ground contact on the links' contact spheres (PBAD only): None, True (defaults), a dict of
            :class:`pbad_gym.energies.GroundContact` fields or a GroundContact.
        limit_stiffness: penalty stiffness [N m/rad] of the joint ranges (0: limits off).
        limit_damping: damping [N m s/rad] of the limit penalty while a joint drives into its limit (0: off;
            order 2 only).
        limit_springs: where the limit penalty's spring sits in time within a step: "implicit" (default; at the
            step's end) or "trapezoidal" (Newmark's average acceleration: no numerical dissipation of the penalty's
            oscillation; docs/physics.md §2.4, energies/penalty.py; order 2 only). The ground's is the contact's
            ``springs`` field.
        damping: per-DOF joint damping (nv,) or scalar [N m s/rad]; default: the joints' own.
        spring: per-DOF joint spring stiffness (nv,) or scalar [N m/rad or N/m], the potential k/2·‖q ⊖ q_rest‖²
            (PBAD only; None: off); spring_rest: its rest configuration (nq,), default ``body.q0()``.
        backend: "numba" (the compiled CPU kernel: order 2 and BDF2, LM, penalty contact; other cases run on
            numpy with a logged reason), "cuda" (the same kernel fused on the GPU, one thread per trajectory, one
            launch per step, order 2 only: needs device="cuda" and numba.cuda, or device="cpu" under numba's CUDA
            simulator; other cases run on numpy, logged), "numpy" (the reference array code; NumPy on CPU, CuPy on
            GPU) or None (numba on CPU when it imports, numpy on GPU). ``sim.backend`` is the one that runs.

    State: ``q`` (B, nq), ``qd`` (B, nv), ``time`` [s]. For PBAD the velocity is (q_k ⊖ q_{k−1})/Δt.
    Methods: ``step(tau, substeps=1)`` (n steps under one tau: an env's frame_skip, one compiled call on numba),
    ``advance(tau, substeps=1)`` (the same on a tau the caller has checked, returning the new state's
    :class:`StateView`: an environment's one call per step), ``view()``, ``reset(q, qd, rows=None)`` (all or some
    trajectories), ``snapshot()`` / ``restore(snapshot, rows=None)``, ``kinematics()``, ``energy()``.
    """

    @property
    def xp(self):
        """The array module of the state (numpy or cupy), derived from ``device`` so that a Simulator pickles."""
        return get_xp(self.device)

    def __init__(self, body, dt, integrator="pbad", optimizer="lm", num_envs=1, dtype=np.float64, device="cpu",
                 gravity=GRAVITY, max_iter=None, tol=None, hessian="exact", drag=None, contact=None,
                 limit_stiffness=0.0, damping=None, order=2, contact_model="penalty", lcp_method=LCPOptions.method,
                 lcp_order=LCPOptions.order, lcp_iterations=LCPOptions.iterations, lcp_tol=LCPOptions.tol,
                 lcp_omega=LCPOptions.omega, backend=None, limit_damping=0.0, spring=None, spring_rest=None,
                 newton_memory=SolverOptions.newton_memory, limit_springs=DEFAULT_SPRINGS):
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
        real_number(dt, "dt (time step in seconds)", positive=True)
        if isinstance(num_envs, bool) or int(num_envs) != num_envs or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        self.dtype = check_dtype(dtype)
        self.options = SolverOptions.create(self.dtype, order=order, optimizer=optimizer, max_iter=max_iter, tol=tol,
                                            hessian=hessian, newton_memory=newton_memory)
        if self.options.order > 2 and integrator != "pbad":
            raise ValueError("collocation (order > 2) needs integrator='pbad'")
        self.body, self.dt, self.integrator = body, float(dt), integrator
        self.num_envs, self.device = int(num_envs), device
        get_xp(device)  # fails early, naming the device, when its array module is missing
        if contact_model not in CONTACT_MODELS:
            raise ValueError(f"contact_model must be one of {CONTACT_MODELS}, got {contact_model!r}")
        self.contact_model = contact_model
        self.lcp = LCPOptions.create(lcp_method=lcp_method, lcp_order=lcp_order, lcp_iterations=lcp_iterations,
                                     lcp_tol=lcp_tol, lcp_omega=lcp_omega)
        params = None
        if contact_model == "impulse":
            if integrator != "pbad" or self.options.order != 2:
                raise ValueError("contact_model='impulse' needs integrator='pbad' and order=2")
            if len(body.contact_points()[0]) == 0:
                raise ValueError("contact_model='impulse' needs contact spheres on the body's links")
            params = impulse.make_impulse_contact(contact)
            contact = None  # no penalty energies in the step
        self.forces = make_force_model(body, gravity, drag, contact, limit_stiffness, damping, limit_damping, spring,
                                       spring_rest, limit_springs)
        c = self.forces.contact
        normal_damping = c is not None and c.normal_damping > 0
        if self.options.order > 2 and (normal_damping or self.forces.limit_damping > 0):
            raise ValueError("the contact's normal_damping and limit_damping are terms of the order-2 step (they damp "
                             "the change since q_k); collocation (order > 2) does not model them: set them to 0 or "
                             "use order=2")
        if self.options.order > 2 and "trapezoidal" in (self.forces.limit_springs, getattr(c, "springs", None)):
            raise ValueError("limit_springs and the contact's springs 'trapezoidal' are terms of the order-2 step "
                             "(they read q_k and q_{k-1}); collocation (order > 2) takes 'implicit'")
        extra = (self.forces.drag is not None or self.forces.contact is not None
                 or self.forces.limit_stiffness > 0 or self.forces.has_damping or self.forces.has_spring)
        if integrator not in PBAD_INTEGRATORS and extra:
            raise ValueError(f"drag, contact, limits, damping and springs are PBAD energies; integrator={integrator!r} "
                             "models gravity and actuation only")
        if integrator == "bdf2":
            bdf2.check_bdf2(self.forces, self.options.order, contact_model)
        backend = default_backend(device) if backend is None else backend
        self._step, self.backend = select_step(integrator, self.options.order, contact_model, backend,
                                               optimizer=self.options.optimizer, hessian=self.options.hessian,
                                               dtype=self.dtype, device=device)
        self._finish = select_finish(self.backend)
        self._shape_tau = (self.num_envs, body.nv)
        self.model = self._make_model(params)
        self.reset()

    def _make_model(self, params):
        xp = self.xp
        gravity = xp.asarray(self.forces.gravity, dtype=self.dtype)
        return StepModel(self.body, self.body.arrays(xp, self.dtype), self.forces, self.dt, gravity, params,
                         self.lcp if params is not None else None)

    # --- options (read through the typed option values) --------------------------------------------------------
    @property
    def optimizer(self):
        return self.options.optimizer

    @property
    def order(self):
        return self.options.order

    @property
    def hessian(self):
        return self.options.hessian

    @property
    def max_iter(self):
        """Iteration cap of the step's optimiser (SolverOptions' default for the optimiser unless given)."""
        return self.options.max_iter

    @property
    def tol(self):
        """Scaled-gradient tolerance in units of q (SolverOptions' default for the dtype unless given)."""
        return self.options.tol

    @property
    def impulse(self):
        """The impulse contact parameters (ImpulseContact), None for the penalty model; assignable."""
        return self.model.impulse

    @impulse.setter
    def impulse(self, params):
        if (params is None) != (self.model.impulse is None):
            raise ValueError("the contact model is fixed at construction; only its parameters may change")
        self.model = self._make_model(None if params is None else impulse.make_impulse_contact(params))

    @property
    def lcp_options(self):
        """The LCP options as the flat keyword arguments of the constructor."""
        o = self.lcp
        return dict(lcp_method=o.method, lcp_order=o.order, lcp_iterations=o.iterations, lcp_tol=o.tol,
                    lcp_omega=o.omega)

    # --- state ----------------------------------------------------------------------------------------------
    def _batch(self, a, n, what, rows=None):
        xp = self.xp
        rows = self.num_envs if rows is None else rows
        a = xp.asarray(a, dtype=self.dtype)
        if a.ndim == 1:
            a = xp.broadcast_to(a, (rows, a.shape[0]))
        if a.shape != (rows, n):
            raise ValueError(f"{what} must have shape ({n},) or ({rows}, {n}), got {tuple(a.shape)}")
        if not bool(xp.all(xp.isfinite(a))):
            raise ValueError(f"{what} contains NaN or inf")
        return a.copy()

    def _fresh_state(self, q, qd):
        """The State of trajectories starting at (q, qd) (n rows), before any step."""
        body, xp, n = self.body, self.xp, q.shape[0]
        # PBAD keeps the previous configuration (order 2: a backward difference reproduces the requested
        # velocity; collocation: the previous step's last interior node, extrapolated to third order)
        if self.integrator not in PBAD_INTEGRATORS:
            q_prev = q
        elif self.order == 2:
            q_prev = integrate(body, q, -self.dt * qd)
        else:
            q_prev = start_node(body, q, qd, self.dt, self.order, self.model.gravity)
        imp = None if self.impulse is None else impulse.initial_state(body, n, xp, self.dtype)
        return State(q=q, q_prev=q_prev, qd=qd, impulse=imp, fresh=xp.ones(n, dtype=bool))

    def reset(self, q=None, qd=None, rows=None):
        """Set the state: q (nq,) or one row per reset trajectory (default: neutral pose), qd (nv,) or one row
        per reset trajectory (default: rest).

        rows: None resets every trajectory (and the clock); a bool mask (B,) or an index array resets only those
        trajectories — the others keep their state, caches and contact memory bit for bit.
        """
        body = self.body
        idx = None if rows is None else self._rows(rows)
        n = self.num_envs if idx is None else len(idx)
        q = normalize(body, self._batch(body.q0() if q is None else q, body.nq, "q", n))
        qd = self._batch(np.zeros(body.nv) if qd is None else qd, body.nv, "qd", n)
        new = self._fresh_state(q, qd)
        if idx is None:
            self.state = new
            return self
        cur = self.state
        if cur.contact is not None or cur.force is not None:  # fresh contact memory (anchors) for the reset rows
            c = self.forces.contact
            kin = forward_kinematics(body, q)
            memory = contact_state(body, kin, c, self.dt)
            new = new._replace(contact=memory, force=sphere_forces(body, kin, c, memory, self.dt))
        if cur.velocity is not None and self._finish is not None and self.order == 2:
            # the reset rows' caches from one compiled call on those rows alone: the other rows keep theirs
            # (otherwise the next read of any cache recomputes every row's); a fresh row's velocity is
            # (q ⊖ q_prev)/Δt in either PBAD scheme
            new = self._finish(self.model, new)
        self.state = cur.with_rows(idx, new)
        return self

    def snapshot(self):
        """The complete dynamic state (for :meth:`restore`): the State value itself — steps never write into a
        State's arrays, so holding it is a copy."""
        return self.state

    def restore(self, snapshot, rows=None):
        """Put back the state of :meth:`snapshot` for every trajectory, or only for ``rows`` (mask or indices)."""
        if rows is None:
            self.state = snapshot
        else:
            idx = self._rows(rows)
            self.state = self.state.with_rows(idx, snapshot.take(idx))

    def _rows(self, rows):
        r = np.asarray(to_numpy(rows))
        if r.dtype == bool:
            if r.shape != (self.num_envs,):
                raise ValueError(f"rows mask must have shape ({self.num_envs},), got {r.shape}")
            r = np.nonzero(r)[0]
        if r.ndim != 1 or (r.size and (r.min() < 0 or r.max() >= self.num_envs)):
            raise ValueError(f"rows must be a ({self.num_envs},) bool mask or indices in [0, {self.num_envs})")
        return self.xp.asarray(r.astype(np.int64))

    @property
    def q(self):
        """Configuration (B, nq)."""
        return self.state.q

    @property
    def time(self):
        """Simulated time since the last full reset [s]."""
        return self.state.time

    @property
    def qd(self):
        """Velocity (B, nv): (q_k ⊖ q_{k−1})/Δt for PBAD order 2 (BDF2: (3(q_k ⊖ q_{k−1}) − (q_{k−1} ⊖ q_{k−2}))/(2Δt));
        for collocation the derivative of the last
        step's polynomial at t_k (the reset velocity before the first step)."""
        s = self.state
        if self.integrator not in PBAD_INTEGRATORS:
            return s.qd
        if self.order == 2:
            if s.velocity is None:
                s = self._complete("velocity")
            return s.velocity
        if s.nodes is None:
            return s.qd
        v = node_velocity(self.body, s.nodes, self.dt, self.order)
        return self.xp.where(s.fresh[:, None], s.qd, v)  # rows reset since the last step

    @property
    def gravity(self):
        """Gravity (3,) [m/s²] as an array of the simulator's module and dtype (held by the force model)."""
        return self.model.gravity

    def kinematics(self):
        """Forward kinematics of the current configuration (cached between steps)."""
        kin = self.state.kin
        return self._complete("kin").kin if kin is None else kin

    def _compiled_finish(self):
        """Whether this backend fills the caches of a state (kinematics, velocity) in one compiled call
        (:meth:`_complete`)."""
        return self._finish is not None and self.integrator == "pbad" and self.order == 2

    def _complete(self, field):
        """Fill the cache ``field`` of the state ("kin" or "velocity"): on a backend with a compiled finish both at
        once, else the one asked for by the NumPy reference. Returns the new state."""
        s = self.state
        if self._compiled_finish():
            s = self._finish(self.model, s)
        elif field == "kin":
            s = s._replace(kin=forward_kinematics(self.body, s.q))
        elif self.integrator == "bdf2":
            s = s._replace(velocity=bdf2.bdf2_velocity(self.model, s))
        else:
            s = s._replace(velocity=order2_velocity(self.model, s))
        self.state = s
        return s

    @property
    def contact_impulses(self):
        """Impulse contact: the last step's per-sphere impulses (B, S, 3) in (n, t1, t2) = (z, x, y) order [N s];
        None for the penalty model."""
        return None if self.state.impulse is None else self.state.impulse.impulse

    @property
    def contact_forces(self):
        """Ground force on each contact sphere (B, S, 3) [N, world (x, y, z)] over the last step: the penalty
        model's −∂E/∂P at the new poses with the step's lagged memory, or the impulse model's impulses / Δt; after a
        reset (no step yet) the penalty model's normal forces. None without ground contact."""
        if self.impulse is not None:
            lam = self.state.impulse.impulse / self.dt  # (n, t1, t2) = (z, x, y)
            return self.xp.stack([lam[..., 1], lam[..., 2], lam[..., 0]], -1)
        c = self.forces.contact
        if c is None:
            return None
        if self.state.force is None:
            kin = self.kinematics()
            memory = self.state.contact if self.state.contact is not None else contact_state(
                self.body, kin, c, self.dt)
            self.state = self.state._replace(force=sphere_forces(self.body, kin, c, memory, self.dt))
        return self.state.force

    def energy(self):
        """(kinetic, potential) energy [J] of the current state, each (B,)."""
        return energy(self.body, self.q, self.qd, self.gravity)

    # --- stepping --------------------------------------------------------------------------------------------
    def step(self, tau=None, substeps=1, *, substep_kin=False):
        """Advance ``substeps`` steps of Δt under generalised force tau (B, nv) or (nv,) [N m or N] (default 0),
        held over the substeps (an environment's frame_skip: one compiled call on numba, a loop elsewhere — the
        same numbers as that many single steps).

        Returns diagnostics, each (B,): iterations (summed over the substeps), grad_norm (the last substep's),
        converged (on every substep) (explicit integrators: 0, 0, True); the impulse model adds contacts,
        lcp_iterations, lcp_residual, lcp_converged, sqp_iterations, sqp_converged; with n > 1 substeps,
        substep_q (n, B, nq) and substep_qd (n, B, nv): every substep's configuration and velocity (the last
        are :attr:`q` and :attr:`qd`; an environment's divergence guard checks each), and on numba with
        ``substep_kin`` their Kinematics as substep_kin (fields with a leading axis n; the last is
        :meth:`kinematics`). Without it substep_kin is left out: writing every substep's link poses cost a
        10-link chain about a fifth of its step time (BENCHMARKS.md).
        """
        return self._advance(self._checked_tau(tau), substeps, substep_kin).as_dict()

    def advance(self, tau, substeps=1):
        """:meth:`step` on a tau the caller has already checked — (B, nv), an array of the Simulator's module and
        dtype, finite; not checked again here (an environment validates its action once) — returning
        (:class:`StateView` of the new state, :class:`~pbad_gym.integrators.StepInfo`, with substep_kin on numba:
        the divergence guard reads it)."""
        info = self._advance(tau, substeps, substep_kin=True)
        return self.view(), info

    def view(self):
        """The :class:`StateView` of the current state: q, its velocity, kinematics and ground force (the state's
        caches, filled here where the step did not leave them: on numba one compiled call)."""
        return StateView(self.q, self.qd, self.kinematics(), self.contact_forces)

    def _advance(self, tau, substeps=1, substep_kin=False):
        """The backend's step contract on a checked tau; its state becomes the Simulator's. -> StepInfo
        (``substep_kin``: every substep's kinematics where the backend computes them, numba)."""
        kw = {"substep_kin": substep_kin} if self.backend == "numba" else {}
        self.state, info = self._step(self.model, self.state, tau, self.options, substeps, **kw)
        return info

    def _checked_tau(self, tau):
        xp = self.xp
        if type(tau) is xp.ndarray and tau.dtype == self.dtype and tau.shape == self._shape_tau:
            if not bool(xp.isfinite(tau).all()):  # the common case: checked, not copied (steps never write tau)
                raise ValueError("tau contains NaN or inf")
            return tau
        return self._batch(np.zeros(self.body.nv) if tau is None else tau, self.body.nv, "tau")

    def __repr__(self):
        return (f"Simulator({self.body!r}, dt={self.dt}, integrator={self.integrator!r}, num_envs={self.num_envs}, "
                f"dtype={self.dtype}, device={self.device!r})")
