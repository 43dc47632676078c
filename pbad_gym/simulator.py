"""Simulator: a body, the integrator options and the batched state of ``num_envs`` trajectories."""
from __future__ import annotations

import numpy as np

from .arrays import check_dtype, get_xp, real_number, to_numpy
from .contact import CONTACT_MODELS, check_lcp_options, impulse_step, initial_state, make_impulse_contact
from .dynamics import GRAVITY, energy
from .energies import contact_state, make_force_model, sphere_forces
from .integrators import EXPLICIT, HESSIANS, INTEGRATORS, OPTIMIZERS, pbad_step
from .integrators.collocation import ORDERS as COLLOCATION_ORDERS
from .integrators.collocation import collocation_step, node_velocity, start_node
from .kinematics import difference, forward_kinematics, integrate, normalize



_STATE = ("q", "q_prev", "qd", "nodes", "contact", "impulse", "fresh", "force")


def _take(v, idx):
    """Rows ``idx`` of an array, a dict of arrays or a tuple of arrays (None stays None)."""
    if v is None:
        return None
    if isinstance(v, dict):
        return {k: a[idx] for k, a in v.items()}
    if isinstance(v, tuple):
        return type(v)(*(a[idx] for a in v))
    return v[idx]


def _with_rows(cur, new, idx):
    """A copy of ``cur`` (array, dict or tuple of arrays) with rows ``idx`` replaced by ``new``."""
    if isinstance(cur, dict):
        return {k: _with_rows(a, new[k], idx) for k, a in cur.items()}
    if isinstance(cur, tuple):
        return type(cur)(*(_with_rows(a, b, idx) for a, b in zip(cur, new)))
    out = cur.copy()
    out[idx] = new
    return out


def _check_options(integrator, optimizer, order, hessian, dt, num_envs, max_iter):
    """Clear errors for the Simulator's scalar options."""
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
    real_number(dt, "dt (time step in seconds)", positive=True)
    if int(num_envs) != num_envs or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if max_iter is not None and (int(max_iter) != max_iter or max_iter < 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")


class Simulator:
    """Batched simulation of one articulated ``body``.

    Args:
        body: a :class:`pbad_gym.model.Body`.
        dt: time step [s].
        integrator: "pbad" (position-based, order 2) or a baseline: "euler", "semi_implicit_euler", "rk4".
        optimizer: "lm" (Levenberg-Marquardt), "lbfgs" (diagonal initial inverse Hessian) or "lbfgs_hessian"
            (L-BFGS from the inverse Gauss-Newton step Hessian at the warm start) for PBAD.
        num_envs: batch size B.
        dtype: float64 (default) or float32.
        device: "cpu" (NumPy) or "cuda" (CuPy).
        gravity: (3,) [m/s²].
        max_iter, tol: optimiser limits (max_iter default: 50 for LM, 500 for L-BFGS); tol is the scaled
            gradient tolerance in units of q (rad, m), default 1e-9 in float64 and 1e-5 in float32.
        hessian: "exact" or "gauss_newton".
        order: 2 (the PBAD energy step) or 3 / 4 (position-based collocation, docs/physics.md §3).
        contact_model: "penalty" (contact energies in the step, docs/physics.md §2) or "impulse" (a contact-free PBAD
            step corrected by a boxed LCP on the contact impulses, §7; ``contact`` is then None/True, a dict of
            :class:`pbad_gym.contact.ImpulseContact` fields or an ImpulseContact).
        lcp_method, lcp_order, lcp_omega, lcp_iterations, lcp_tol: the impulse model's LCP solver
            (:func:`pbad_gym.lcp.solve`; lcp_omega is the relaxation ω of "pgs", "psor" and "amgs").
        drag: fluid drag coefficients [1/s] (PBAD only): scalar (isotropic), (axial, normal), (3,), (L, 2) or
            (L, 3) in each link's frame (axial = link x axis); None: no drag.
        contact: ground contact on the links' contact spheres (PBAD only): None, True (defaults), a dict of
            :class:`pbad_gym.energies.GroundContact` fields or a GroundContact.
        limit_stiffness: penalty stiffness [N m/rad] of the joint ranges (0: limits off).
        damping: per-DOF joint damping (nv,) or scalar [N m s/rad]; default: the joints' own.

    State: ``q`` (B, nq), ``qd`` (B, nv), ``time`` [s]. For PBAD the velocity is (q_k ⊖ q_{k−1})/Δt.
    Methods: ``step(tau)``, ``reset(q, qd, rows=None)`` (all or some trajectories), ``snapshot()`` /
    ``restore(snapshot, rows=None)``, ``kinematics()``, ``energy()``.
    """

    @property
    def xp(self):
        """The array module of the state (numpy or cupy), derived from ``device`` so that a Simulator pickles."""
        return get_xp(self.device)

    def __init__(self, body, dt, integrator="pbad", optimizer="lm", num_envs=1, dtype=np.float64, device="cpu",
                 gravity=GRAVITY, max_iter=None, tol=None, hessian="exact", drag=None, contact=None,
                 limit_stiffness=0.0, damping=None, order=2, contact_model="penalty", lcp_method="pgs",
                 lcp_order="default", lcp_iterations=50, lcp_tol=1e-9, lcp_omega=1.0):
        _check_options(integrator, optimizer, order, hessian, dt, num_envs, max_iter)
        self.body, self.dt, self.integrator, self.optimizer = body, float(dt), integrator, optimizer
        self.num_envs, self.device, self.hessian, self.order = int(num_envs), device, hessian, int(order)
        self.dtype = check_dtype(dtype)
        get_xp(device)  # fails early, naming the device, when its array module is missing
        if contact_model not in CONTACT_MODELS:
            raise ValueError(f"contact_model must be one of {CONTACT_MODELS}, got {contact_model!r}")
        self.contact_model, self.impulse = contact_model, None
        if contact_model == "impulse":
            if integrator != "pbad" or order != 2:
                raise ValueError("contact_model='impulse' needs integrator='pbad' and order=2")
            if len(body.contact_points()[0]) == 0:
                raise ValueError("contact_model='impulse' needs contact spheres on the body's links")
            check_lcp_options(lcp_method, lcp_order, lcp_iterations, lcp_tol, lcp_omega)
            self.impulse = make_impulse_contact(contact)
            contact = None  # no penalty energies in the step
        self.lcp_options = dict(lcp_method=lcp_method, lcp_order=lcp_order, lcp_iterations=int(lcp_iterations),
                                lcp_tol=float(lcp_tol), lcp_omega=float(lcp_omega))
        self.forces = make_force_model(body, gravity, drag, contact, limit_stiffness, damping)
        extra = (self.forces.drag is not None or self.forces.contact is not None
                 or self.forces.limit_stiffness > 0 or self.forces.has_damping)
        if integrator != "pbad" and extra:
            raise ValueError(f"drag, contact, limits and damping are PBAD energies; integrator={integrator!r} "
                             "models gravity and actuation only")
        self.max_iter = None if max_iter is None else int(max_iter)
        self.tol = (1e-9 if self.dtype == np.float64 else 1e-5) if tol is None else real_number(
            tol, "tol (solver tolerance in rad or m)", positive=True)
        self.reset()

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
        # PBAD keeps the previous configuration (order 2: a backward difference reproduces the requested
        # velocity; collocation: the previous step's last interior node, extrapolated to third order)
        if self.order == 2:
            q_prev = integrate(body, q, -self.dt * qd)
        else:
            q_prev = start_node(body, q, qd, self.dt, self.order, self.gravity)
        impulse = None if self.impulse is None else initial_state(body, n, self.xp, self.dtype)
        fresh = dict(q=q, q_prev=q_prev, qd=qd, impulse=impulse, fresh=self.xp.ones(n, dtype=bool))
        if idx is None:
            self._q, self._q_prev, self._qd, self._impulse, self._fresh = (fresh[k] for k in (
                "q", "q_prev", "qd", "impulse", "fresh"))
            self._nodes, self._contact, self._force = None, None, None
            self.time = 0.0
        else:
            self._write_rows(idx, fresh)
            if self._contact is not None:  # fresh contact memory (anchors) for the reset rows only
                new = contact_state(body, forward_kinematics(body, self._q), self.forces.contact, self.dt)
                self._contact = _with_rows(self._contact, _take(new, idx), idx)
            if self._force is not None:
                kin = forward_kinematics(body, self._q[idx])
                memory = contact_state(body, kin, self.forces.contact, self.dt)
                self._force = _with_rows(self._force, sphere_forces(body, kin, self.forces.contact, memory,
                                                                    self.dt), idx)
        self._kin = self._kin_prev = None  # cached kinematics of q and q_prev, recomputed on the next step
        return self

    def snapshot(self):
        """A copy of the complete dynamic state (for :meth:`restore`)."""
        copy = lambda v: None if v is None else (  # noqa: E731
            {k: a.copy() for k, a in v.items()} if isinstance(v, dict) else
            type(v)(*(a.copy() for a in v)) if isinstance(v, tuple) else v.copy())
        return {k: copy(getattr(self, "_" + k)) for k in _STATE} | {"time": self.time}

    def restore(self, snapshot, rows=None):
        """Put back the state of :meth:`snapshot` for every trajectory, or only for ``rows`` (mask or indices)."""
        if rows is None:
            for k in _STATE:
                setattr(self, "_" + k, snapshot[k])
            self.time = snapshot["time"]
        else:
            idx = self._rows(rows)
            self._write_rows(idx, {k: _take(snapshot[k], idx) for k in _STATE if k not in ("nodes", "contact")})
            for k in ("nodes", "contact"):
                cur, old = getattr(self, "_" + k), snapshot[k]
                if cur is not None and old is not None:
                    setattr(self, "_" + k, _with_rows(cur, _take(old, idx), idx))
        self._kin = self._kin_prev = None

    def _rows(self, rows):
        r = np.asarray(to_numpy(rows))
        if r.dtype == bool:
            if r.shape != (self.num_envs,):
                raise ValueError(f"rows mask must have shape ({self.num_envs},), got {r.shape}")
            r = np.nonzero(r)[0]
        if r.ndim != 1 or (r.size and (r.min() < 0 or r.max() >= self.num_envs)):
            raise ValueError(f"rows must be a ({self.num_envs},) bool mask or indices in [0, {self.num_envs})")
        return self.xp.asarray(r.astype(np.int64))

    def _write_rows(self, idx, fields):
        for k, v in fields.items():
            cur = getattr(self, "_" + k)
            if cur is not None and v is not None:
                setattr(self, "_" + k, _with_rows(cur, v, idx))

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
        v = node_velocity(self.body, self._nodes, self.dt, self.order)
        return self.xp.where(self._fresh[:, None], self._qd, v)  # rows reset since the last step

    @property
    def gravity(self):
        """Gravity (3,) [m/s²] as an array of the simulator's module and dtype (held by the force model)."""
        return self.xp.asarray(self.forces.gravity, dtype=self.dtype)

    def kinematics(self):
        """Forward kinematics of the current configuration (cached between steps)."""
        if self._kin is None:
            self._kin = forward_kinematics(self.body, self._q)
        return self._kin

    @property
    def contact_impulses(self):
        """Impulse contact: the last step's per-sphere impulses (B, S, 3) in (n, t1, t2) = (z, x, y) order [N s];
        None for the penalty model."""
        return None if self._impulse is None else self._impulse.impulse

    @property
    def contact_forces(self):
        """Ground force on each contact sphere (B, S, 3) [N, world (x, y, z)] over the last step: the penalty
        model's −∂E/∂P at the new poses with the step's lagged memory, or the impulse model's impulses / Δt; after a
        reset (no step yet) the penalty model's normal forces. None without ground contact."""
        xp = self.xp
        if self.impulse is not None:
            lam = self._impulse.impulse / self.dt  # (n, t1, t2) = (z, x, y)
            return xp.stack([lam[..., 1], lam[..., 2], lam[..., 0]], -1)
        if self.forces.contact is None:
            return None
        if self._force is None:
            kin = self.kinematics()
            memory = self._contact if self._contact is not None else contact_state(
                self.body, kin, self.forces.contact, self.dt)
            self._force = sphere_forces(self.body, kin, self.forces.contact, memory, self.dt)
        return self._force

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
        self._fresh = self.xp.zeros(self.num_envs, dtype=bool)
        self._kin = forward_kinematics(body, self._q)
        if self.forces.contact is not None:  # the force the step applied: the new poses with the step's memory
            self._force = sphere_forces(body, self._kin, self.forces.contact, self._contact, self.dt)
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
                                     "lcp_residual", "lcp_converged", "sqp_iterations", "sqp_converged")}

    def _step_pbad(self, tau):
        q_new, res = pbad_step(self.body, self._q_prev, self._q, tau, self.dt, self.forces,
                               optimizer=self.optimizer, max_iter=self.max_iter, tol=self.tol, hessian=self.hessian,
                               kin_prev=self._kin_prev, kin_cur=self._kin, contact=self._contact)
        self._q_prev, self._q, self._kin_prev = self._q, q_new, self._kin
        return res

    def _step_collocation(self, tau):
        # warm start at constant velocity: extrapolating the last step's polynomial cuts iterations, but on stiff
        # chains (100 links) its overshoot lands Newton on a spurious root and the run blows up
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
