"""Simulator: a body, the integrator options and the batched state of ``num_envs`` trajectories."""
from __future__ import annotations

import numpy as np

from .backend import check_dtype, get_xp
from .contact import CONTACT_MODELS, check_lcp_options, impulse_step, initial_state, make_impulse_contact
from .dynamics import GRAVITY, energy
from .energies import contact_state, make_force_model
from .integrators import EXPLICIT, HESSIANS, INTEGRATORS, OPTIMIZERS, pbad_step
from .integrators.collocation import ORDERS as COLLOCATION_ORDERS
from .integrators.collocation import _check_forces, collocation_step, node_velocity, start_node
from .kinematics import difference, forward_kinematics, integrate, normalize



class Simulator:
    """Batched simulation of one articulated ``body``.

    Args:
        body: a :class:`pbad_gym.model.Body`.
        dt: time step [s].
        integrator: "pbad" (position-based, order 2) or a baseline: "euler", "semi_implicit_euler", "rk4".
        optimizer: "lm" (Levenberg-Marquardt) or "lbfgs" for PBAD.
        num_envs: batch size B.
        dtype: float64 (default) or float32.
        device: "cpu" (NumPy) or "cuda" (CuPy).
        gravity: (3,) [m/s²].
        max_iter, tol: optimiser limits (max_iter default: 50 for LM, 500 for L-BFGS); tol is the scaled
            gradient tolerance in units of q (rad, m)
            (default 1e-9 in float64, 1e-5 in float32).
        hessian: "exact" or "gauss_newton".
        order: 2 (the PBAD energy step) or 3 / 4 (position-based collocation, DESIGN.md §5).
        contact_model: "penalty" (contact energies in the step, DESIGN.md §4) or "impulse" (a contact-free PBAD
            step corrected by a boxed LCP on the contact impulses, §7; ``contact`` is then None/True, a dict of
            :class:`pbad_gym.contact.ImpulseContact` fields or an ImpulseContact).
        lcp_method, lcp_order, lcp_iterations, lcp_tol: the impulse model's LCP solver (:func:`pbad_gym.lcp.solve`).
        drag: fluid drag coefficients [1/s] (PBAD only): scalar (isotropic), (axial, normal), (3,), (L, 2) or
            (L, 3) in each link's frame (axial = link x axis); None: no drag.
        contact: ground contact on the links' contact spheres (PBAD only): None, True (defaults), a dict of
            :class:`pbad_gym.energies.GroundContact` fields or a GroundContact.
        limit_stiffness: penalty stiffness [N m/rad] of the joint ranges (0: limits off).
        damping: per-DOF joint damping (nv,) or scalar [N m s/rad]; default: the joints' own.

    State: ``q`` (B, nq), ``qd`` (B, nv), ``time`` [s]. For PBAD the velocity is (q_k ⊖ q_{k−1})/Δt.
    """

    def __init__(self, body, dt, integrator="pbad", optimizer="lm", num_envs=1, dtype=np.float64, device="cpu",
                 gravity=GRAVITY, max_iter=None, tol=None, hessian="exact", drag=None, contact=None,
                 limit_stiffness=0.0, damping=None, order=2, contact_model="penalty", lcp_method="pgs",
                 lcp_order="default", lcp_iterations=50, lcp_tol=1e-9):
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if order not in (2,) + COLLOCATION_ORDERS:
            raise ValueError(f"order must be 2 (PBAD) or one of {COLLOCATION_ORDERS} (collocation), got {order!r}")
        if order > 2 and integrator != "pbad":
            raise ValueError("collocation (order > 2) needs integrator='pbad'")
        if hessian not in HESSIANS:
            raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
        if not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive number of seconds, got {dt!r}")
        if int(num_envs) != num_envs or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if max_iter is not None and (int(max_iter) != max_iter or max_iter < 1):
            raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
        self.body, self.dt, self.integrator, self.optimizer = body, float(dt), integrator, optimizer
        self.num_envs, self.device, self.hessian, self.order = int(num_envs), device, hessian, int(order)
        self.dtype = check_dtype(dtype)
        self.xp = get_xp(device)
        self.gravity = self.xp.asarray(gravity, dtype=self.dtype).reshape(3)
        if contact_model not in CONTACT_MODELS:
            raise ValueError(f"contact_model must be one of {CONTACT_MODELS}, got {contact_model!r}")
        self.contact_model, self.impulse = contact_model, None
        if contact_model == "impulse":
            if integrator != "pbad" or order != 2:
                raise ValueError("contact_model='impulse' needs integrator='pbad' and order=2")
            if len(body.contact_points()[0]) == 0:
                raise ValueError("contact_model='impulse' needs contact spheres on the body's links")
            check_lcp_options(lcp_method, lcp_order, lcp_iterations, lcp_tol)
            self.impulse = make_impulse_contact(contact)
            contact = None  # no penalty energies in the step
        self.lcp_options = dict(lcp_method=lcp_method, lcp_order=lcp_order, lcp_iterations=int(lcp_iterations),
                                lcp_tol=float(lcp_tol))
        self.forces = make_force_model(body, gravity, drag, contact, limit_stiffness, damping)
        extra = (self.forces.drag is not None or self.forces.contact is not None
                 or self.forces.limit_stiffness > 0 or self.forces.has_damping)
        if integrator != "pbad" and extra:
            raise ValueError(f"drag, contact, limits and damping are PBAD energies; integrator={integrator!r} "
                             "models gravity and actuation only")
        if self.order > 2:
            _check_forces(body, self.forces)
        self.max_iter = None if max_iter is None else int(max_iter)
        self.tol = (1e-9 if self.dtype == np.float64 else 1e-5) if tol is None else float(tol)
        self.reset()

    # --- state ----------------------------------------------------------------------------------------------
    def _batch(self, a, n, what):
        xp = self.xp
        a = xp.asarray(a, dtype=self.dtype)
        if a.ndim == 1:
            a = xp.broadcast_to(a, (self.num_envs, a.shape[0]))
        if a.shape != (self.num_envs, n):
            raise ValueError(f"{what} must have shape ({n},) or ({self.num_envs}, {n}), got {tuple(a.shape)}")
        if not bool(xp.all(xp.isfinite(a))):
            raise ValueError(f"{what} contains NaN or inf")
        return a.copy()

    def reset(self, q=None, qd=None):
        """Set the state: q (B, nq) or (nq,) (default: neutral pose), qd (B, nv) or (nv,) (default: rest)."""
        body = self.body
        self._q = normalize(body, self._batch(body.q0() if q is None else q, body.nq, "q"))
        qd = self._batch(np.zeros(body.nv) if qd is None else qd, body.nv, "qd")
        self._qd = qd
        # PBAD keeps the previous configuration (order 2: a backward difference reproduces the requested
        # velocity; collocation: the previous step's last interior node, extrapolated to third order)
        if self.order == 2:
            self._q_prev = integrate(body, self._q, -self.dt * qd)
        else:
            self._q_prev = start_node(body, self._q, qd, self.dt, self.order, self.gravity)
        self._nodes = None
        self._kin = self._kin_prev = None  # cached kinematics of q and q_prev (PBAD)
        self._contact = None  # lagged contact state of q (PBAD with contact)
        self._impulse = None if self.impulse is None else initial_state(body, self.num_envs, self.xp, self.dtype)
        self.time = 0.0
        return self

    @property
    def q(self):
        """Configuration (B, nq)."""
        return self._q

    @property
    def qd(self):
        """Velocity (B, nv): (q_k ⊖ q_{k−1})/Δt for PBAD order 2; for collocation the derivative of the last
        step's polynomial at t_k (the reset velocity before the first step)."""
        if self.integrator != "pbad":
            return self._qd
        if self.order == 2:
            return difference(self.body, self._q_prev, self._q) / self.dt
        if self._nodes is None:
            return self._qd
        return node_velocity(self.body, self._nodes, self.dt, self.order)

    def energy(self):
        """(kinetic, potential) energy [J] of the current state, each (B,)."""
        return energy(self.body, self.q, self.qd, self.gravity)

    # --- stepping --------------------------------------------------------------------------------------------
    def step(self, tau=None):
        """Advance one step under generalised force tau (B, nv) or (nv,) [N m or N] (default 0).

        Returns diagnostics: iterations (B,), grad_norm (B,), converged (B,) (explicit integrators: 0, 0, True).
        """
        xp, body = self.xp, self.body
        tau = self._batch(np.zeros(body.nv) if tau is None else tau, body.nv, "tau")
        if self.integrator != "pbad":
            self._q, self._qd = EXPLICIT[self.integrator](body, self._q, self._qd, tau, self.dt, self.gravity)
            zeros = xp.zeros(self.num_envs)
            self.time += self.dt
            return {"iterations": zeros.astype(xp.int64), "grad_norm": zeros,
                    "converged": xp.ones(self.num_envs, dtype=bool)}
        if self._kin is None:
            self._kin = forward_kinematics(body, self._q)
        if self.forces.contact is not None and self._contact is None:
            self._contact = contact_state(body, self._kin, self.forces.contact, self.dt)
        if self.impulse is not None:
            return self._step_impulse(tau)
        res = self._step_collocation(tau) if self.order > 2 else self._step_pbad(tau)
        self._kin = forward_kinematics(body, self._q)
        if self.forces.contact is not None:
            self._contact = contact_state(body, self._kin, self.forces.contact, self.dt, prev=self._contact)
        self.time += self.dt
        return {"iterations": res.iterations, "grad_norm": res.grad_norm, "converged": res.converged}

    def _step_impulse(self, tau):
        q_new, info, self._impulse = impulse_step(
            self.body, self._q_prev, self._q, tau, self.dt, self.forces, self.impulse, self._impulse,
            optimizer=self.optimizer, max_iter=self.max_iter, tol=self.tol, hessian=self.hessian,
            kin_prev=self._kin_prev, kin_cur=self._kin, **self.lcp_options)
        self._q_prev, self._q, self._kin_prev = self._q, q_new, self._kin
        self._kin = forward_kinematics(self.body, q_new)
        self.time += self.dt
        return {k: info[k] for k in ("iterations", "grad_norm", "converged", "contacts", "lcp_iterations",
                                     "lcp_residual", "lcp_converged")}

    def _step_pbad(self, tau):
        q_new, res = pbad_step(self.body, self._q_prev, self._q, tau, self.dt, self.forces,
                               optimizer=self.optimizer, max_iter=self.max_iter, tol=self.tol, hessian=self.hessian,
                               kin_prev=self._kin_prev, kin_cur=self._kin, contact=self._contact)
        self._q_prev, self._q, self._kin_prev = self._q, q_new, self._kin
        return res

    def _step_collocation(self, tau):
        nodes, res = collocation_step(self.body, self._q_prev, self._q, self.qd, tau, self.dt, self.forces,
                                      self.order, optimizer=self.optimizer, max_iter=self.max_iter, tol=self.tol,
                                      contact=self._contact)
        xp = self.xp
        self._nodes = xp.concatenate([self._q_prev[:, None], self._q[:, None], nodes], 1)
        self._q_prev, self._q = nodes[:, -2], nodes[:, -1]
        return res

    def __repr__(self):
        return (f"Simulator({self.body!r}, dt={self.dt}, integrator={self.integrator!r}, num_envs={self.num_envs}, "
                f"dtype={self.dtype}, device={self.device!r})")
