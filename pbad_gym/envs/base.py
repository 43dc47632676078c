"""Native batched Gymnasium environments on one Simulator (docs/environments.md).

:class:`PBADVectorEnv` is a ``gymnasium.vector.VectorEnv`` that owns one batched :class:`Simulator`; a concrete
environment supplies a model, a reset distribution, an observation, a reward and its info through hooks named
after Gymnasium's MuJoCo environments (:meth:`~PBADVectorEnv.reset_model`, :meth:`~PBADVectorEnv._get_obs`,
:meth:`~PBADVectorEnv._get_rew`, :meth:`~PBADVectorEnv._get_reset_info`), each acting on the whole batch.
:class:`PBADEnv` is the single-environment form (``gymnasium.Env``) built on a batch of one; it steps it through
the vector env's public :meth:`~PBADVectorEnv.advance` (a step without autoreset and time limit).

Conventions shared by both forms:
- actions are float arrays in [-1, 1] (clipped, as MuJoCo clamps ``ctrlrange``), scaled by a per-actuator gear;
  a wrong shape or a non-numeric dtype raises ``ValueError`` / ``TypeError``; NaN or inf raises ``ValueError``
  naming the sub-environments, unless ``nonfinite_action="zero"`` replaces them by 0 (reported in
  ``info["action_sanitised"]``);
- autoreset (``autoreset_mode``, recorded in ``metadata["autoreset_mode"]`` as the ``AutoresetMode`` enum):
  NEXT_STEP (default): the step after a sub-environment ended resets it, ignores its action and returns reward 0;
  SAME_STEP: the step that ends it resets it and returns the reset observation, the final observation and info
  going into ``info["final_obs"]`` / ``info["final_info"]`` as ``SyncVectorEnv`` hands them out; DISABLED: no
  automatic reset, ended rows are reset with ``reset(options={"reset_mask": mask})``;
- sub-environment i draws its reset noise from its own generator, seeded with ``seed + i`` by
  ``reset(seed=seed)`` — the seeds ``SyncVectorEnv`` gives its sub-environments, so the native batch and
  ``make_vec(..., vectorization_mode="sync")`` produce the same trajectories;
- ``reset(options={"reset_mask": mask})`` resets only the masked sub-environments, leaving the others' states
  untouched bit for bit;
- a sub-environment whose state turns non-finite, whose mechanical energy leaves the budget that gravity and
  its actuators can supply since its reset (:mod:`pbad_gym.envs.divergence`), or whose solver has not converged
  for more than ``max_unconverged_steps`` consecutive steps, is truncated with ``info["diverged"]``, reward 0,
  its last finite observation, and restored to its pre-step state until the autoreset; the others are
  unaffected;
- ``newton_memory=True`` keeps the solver's Newton memory between physics steps (``Simulator``'s option, on by
  default there; docs/physics.md §2.5); the environments solve without it unless asked (DEFAULT_NEWTON_MEMORY);
- ``integrator="bdf2"`` steps with PBAD's BDF2 form (second order in Δt; docs/physics.md §2.6; NumPy engine and
  numba kernel); the environments' own step is "pbad", the order-2 step.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ..arrays import check_dtype, real_number, to_numpy, tree_map
from ..dynamics import centre_of_mass
from ..integrators import LCPOptions, SolverOptions
from ..integrators.impulse import CONTACT_MODELS
from ..simulator import Simulator
from .array_types import ArrayExport
from .divergence import DEFAULT_SAFETY, EnergyBudget
from .render import render_frames

NONFINITE_ACTIONS = ("raise", "zero")
# solver tolerance (a Newton-step estimate in rad) per dtype: far below the O(Δt) integration error in float64;
# in float32 a step below ~1e-5 rad is lost in the configuration's round-off, so a tighter tolerance only makes
# every batched step wait max_iter iterations for its stuck rows
DEFAULT_TOL = {np.dtype(np.float64): 1e-7, np.dtype(np.float32): 1e-5}
# The environments solve without the Newton memory unless asked (the Simulator's default is with it): at their
# physics steps it gains little (Spider-v4: 1.08x the speed at 16 envs, 1.10x at 256; the environments' trajectories
# would change to the solver tolerance) and its bookkeeping costs the cheapest steps more than it saves (Swimmer-v1
# 0.92x at 256 envs; BENCHMARKS.md, "The Newton memory")
DEFAULT_NEWTON_MEMORY = False


def validate_solver_options(order, optimizer, contact_model, lcp_method, contact=False):
    """Check the solver options the environments accept before building anything; name the accepted values
    otherwise. The generic checks are the engine's own (SolverOptions); ``contact`` (whether the environment has
    ground contact) adds the environments' rule that collocation is refused there."""
    SolverOptions(order=order, optimizer=optimizer)
    if contact and order > 2:
        raise ValueError(
            f"order={order} (collocation) is refused with ground contact: the contact force is not smooth at the "
            "ground, and the collocation residual it enters then stalls (measured on the Spider: order 3 leaves "
            "30 % of steps unconverged, order 4 blows up); use order=2")
    if contact_model not in CONTACT_MODELS:
        raise ValueError(f"contact_model must be one of {CONTACT_MODELS}, got {contact_model!r}")
    if contact_model == "impulse" and order != 2:
        raise ValueError("contact_model='impulse' runs with order=2 only")


def check_max_iter(max_iter, minimum, task="the environment"):
    """An environment's ``max_iter``: None (the engine's default for the optimiser: 50 for LM, 500 for L-BFGS)
    or an integer >= ``minimum``, the task's measured floor: below it random actions leave the task's steps
    unconverged and its rows are truncated as diverged after ``max_unconverged_steps`` steps — a configuration
    mistake that would read as a physics failure (docs/environments.md, "Solver iterations")."""
    if max_iter is None:
        return None
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < minimum:
        raise ValueError(f"max_iter must be None (the optimiser's default) or an integer >= {minimum} (solver "
                         f"iterations per step; fewer leave {task}'s steps unconverged), got {max_iter!r}")
    return int(max_iter)


def row_norm(x):
    """``np.linalg.norm(x, axis=1)`` of a real float array (B, n), bit for bit (its own code for this case), without
    the wrapper's argument handling: a step-rate cost at small batches."""
    return np.sqrt(np.add.reduce(x * x, axis=1))


def actuated_index(actuated):
    """The columns of the actuated DOFs as a slice when they are consecutive (a slice assignment is several times
    cheaper than a fancy-index one at small batches), else the index array itself."""
    actuated = np.asarray(actuated, dtype=np.int64)
    if len(actuated) and np.array_equal(actuated, np.arange(actuated[0], actuated[0] + len(actuated))):
        return slice(int(actuated[0]), int(actuated[0]) + len(actuated))
    return actuated


def _positive_int(value, name, allow_none=False):
    """``value`` as an int >= 1 (None passes when ``allow_none``): an ``int`` or NumPy integer, not a bool, a float
    (2.0 is refused: a count given as a float is usually a computed value whose rounding nobody checked) or a
    string; ValueError naming ``name`` otherwise."""
    if allow_none and value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer (int){' or None' if allow_none else ''}, got {value!r}"
                         f" of type {type(value).__name__}")
    return int(value)


# the bound on reset_noise_scale: U(-s, s) turns the base's rotation vector and every hinge by up to s rad and
# s·N(0, 1) (or U(-s, s)) sets the joint speeds in rad/s, so s = 1 already means up to 57° about every axis; above it
# the reset pose is no perturbation of the nominal pose any more (hinges pushed past their ranges, base rotations
# heading for the rotation vector's wrap at π). The environments' defaults are 0.1.
MAX_RESET_NOISE_SCALE = 1.0


def check_reset_noise_scale(value) -> float:
    """An environment's ``reset_noise_scale`` as a float in [0, :data:`MAX_RESET_NOISE_SCALE`]: TypeError naming it
    unless a real number, ValueError naming it and the bound otherwise."""
    s = real_number(value, "reset_noise_scale")
    if not 0.0 <= s <= MAX_RESET_NOISE_SCALE:
        raise ValueError(
            f"reset_noise_scale must be in [0, {MAX_RESET_NOISE_SCALE}], got {value!r}: it is the half-width (rad; m "
            f"for positions) of the uniform noise on every coordinate (base rotation and hinge angles included) and "
            f"the scale of the velocity noise (rad/s, m/s), so {MAX_RESET_NOISE_SCALE} already turns every joint by "
            "up to 57° and more is no perturbation of the reset pose; the defaults are 0.1")
    return s


AUTORESET_NAMES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
                   "disabled": AutoresetMode.DISABLED}


def check_autoreset_mode(value) -> AutoresetMode:
    """``autoreset_mode`` as the ``gymnasium.vector.AutoresetMode`` enum: the enum itself, its value ("NextStep",
    as ``SyncVectorEnv`` accepts) or "next_step" / "same_step" / "disabled"; ValueError naming it otherwise."""
    if isinstance(value, AutoresetMode):
        return value
    if isinstance(value, str):
        if value.lower() in AUTORESET_NAMES:
            return AUTORESET_NAMES[value.lower()]
        for mode in AutoresetMode:
            if value == mode.value:
                return mode
    raise ValueError(f"autoreset_mode must be a gymnasium.vector.AutoresetMode (NEXT_STEP, SAME_STEP, DISABLED) or "
                     f"one of {sorted(AUTORESET_NAMES)}, got {value!r}")


class PBADVectorEnv(gymnasium.vector.VectorEnv):
    """Base of the native batched environments. Subclasses set ``obs_dim`` and implement :meth:`_build_body`,
    :meth:`_sim_options`, :meth:`reset_model`, :meth:`_get_obs` and :meth:`_get_rew`, and may override
    :meth:`_summary` and :meth:`_get_reset_info` (see their docstrings).

    Contract with the single-env form: :meth:`advance` steps every sub-environment once without autoreset and time
    limit and returns the batched step (NumPy); :class:`PBADEnv` calls it, :meth:`reset` and :meth:`render`, and
    hands its observation out through ``array_export`` (the :class:`~pbad_gym.envs.array_types.ArrayExport` of
    ``array_type``), nothing else.

    Common keyword arguments: num_envs, max_episode_steps (None: no time limit), dt, order (2; collocation orders
    3 and 4 are refused with ground contact), optimizer, max_iter (solver iterations per step; None: the engine's
    default for the optimiser, 50 for LM and 500 for L-BFGS; else an integer >= the env's ``min_max_iter``), tol
    (solver tolerance, a Newton-step estimate in rad; None: 1e-7 in float64 — far below the O(Δt) integration
    error, about one LM iteration per step less than the Simulator's 1e-9 — and 1e-5 in float32, near that
    dtype's resolution), contact_model, lcp_method
    (one of :data:`pbad_gym.lcp.METHODS`; "block_pgs" by default: it solves each contact's normal and friction
    rows together and converges within a few sweeps on the Spider where PGS runs into its cap), lcp_omega
    (relaxation ω in (0, 2) of "pgs", "psor" and "amgs"; 1 for "block_pgs"), lcp_iterations (50), lcp_tol
    (1e-6 N s: the natural-map residual of the contact impulses, far below a body's weight × Δt), device, dtype,
    render_mode, nonfinite_action ("raise" | "zero"), max_unconverged_steps, divergence_safety (factor on the
    power bound of :mod:`pbad_gym.envs.divergence`, 3), render_width, render_height, render_num_envs (how
    many sub-environments ``render()`` draws), array_type ("numpy" | "torch" | "cupy": what observations, rewards
    and flags are handed out as; :mod:`pbad_gym.envs.array_types`), frame_skip (physics steps of length ``dt``
    per env step, the action held over them, as MuJoCo's envs do; the env's ``dt`` attribute is then the control
    interval frame_skip·Δt, and info["iterations"] sums the substeps' LM iterations), autoreset_mode (a
    ``gymnasium.vector.AutoresetMode`` or "next_step" | "same_step" | "disabled", recorded in
    ``metadata["autoreset_mode"]``, as Gymnasium's vector envs take it):

    - NEXT_STEP (default): the step after a sub-environment terminated or truncated resets it, ignores its action
      and returns its reset observation with reward 0, terminated and truncated False, and the reset state's
      :meth:`_get_reset_info` entries in info (its float entries 0);
    - SAME_STEP: the step that ends a sub-environment also resets it: it returns the reward and flags of the
      ending step with the reset observation; ``info["final_obs"]`` (an object array (B,), a NumPy float32
      observation at the ended rows and None elsewhere) with mask ``info["_final_obs"]``, and
      ``info["final_info"]`` (the ending step's info: each entry a (B,) array, 0 at the rows that did not end,
      with its mask ``"_" + key``) with mask ``info["_final_info"]``, as ``SyncVectorEnv`` builds them; the
      top-level info of the ended rows holds the reset state's :meth:`_get_reset_info` entries and 0 (False)
      in the others (where SyncVectorEnv has no entry for them);
    - DISABLED: nothing is reset automatically; the caller resets the ended rows with
      ``reset(options={"reset_mask": mask})`` (the other rows keep their state and observation), and stepping a
      row that ended without that reset raises RuntimeError (SyncVectorEnv fails an assertion there).
    """

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}
    obs_dim: int = 0
    # smallest max_iter accepted: LM's first iteration cannot meet the convergence test, so below 2 every step
    # is unconverged and every row is truncated as diverged; tasks raise it to their own measured floor
    min_max_iter: int = 2

    def __init__(self, num_envs=1, max_episode_steps=1000, *, dt, order=2, optimizer="lm", max_iter=None, tol=None,
                 contact_model="penalty", lcp_method="block_pgs", lcp_omega=1.0, lcp_iterations=50, lcp_tol=1e-6,
                 device="cpu", dtype=np.float64, backend=None, render_mode=None, nonfinite_action="raise",
                 max_unconverged_steps=10, divergence_safety=DEFAULT_SAFETY, render_width=320, render_height=240,
                 render_num_envs=4, array_type="numpy", frame_skip=1, autoreset_mode=AutoresetMode.NEXT_STEP,
                 newton_memory=DEFAULT_NEWTON_MEMORY, integrator="pbad"):
        self.num_envs = _positive_int(num_envs, "num_envs")
        self.autoreset_mode = check_autoreset_mode(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        self.frame_skip = _positive_int(frame_skip, "frame_skip")
        self.array_export = ArrayExport(array_type, device)  # checked first: names array_type and its values
        self.array_type = self.array_export.array_type
        self.max_episode_steps = _positive_int(max_episode_steps, "max_episode_steps", allow_none=True)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        if nonfinite_action not in NONFINITE_ACTIONS:
            raise ValueError(f"nonfinite_action must be one of {NONFINITE_ACTIONS}, got {nonfinite_action!r}")
        self.max_unconverged_steps = _positive_int(max_unconverged_steps, "max_unconverged_steps")
        self.order, self.optimizer, self.contact_model, self.lcp_method = order, optimizer, contact_model, lcp_method
        self.render_mode, self.nonfinite_action = render_mode, nonfinite_action
        self.render_width = _positive_int(render_width, "render_width")
        self.render_height = _positive_int(render_height, "render_height")
        self.render_num_envs = _positive_int(render_num_envs, "render_num_envs")
        max_iter = check_max_iter(max_iter, self.min_max_iter, type(self).__name__)

        self.body = self._build_body()
        self.actuated = np.asarray(self.body.meta["actuated"], dtype=np.int64)
        self._actuated_columns = actuated_index(self.actuated)
        self.gear = np.broadcast_to(np.asarray(self._gear(), dtype=np.float64), (len(self.actuated),)).copy()
        options = self._sim_options()
        validate_solver_options(order, optimizer, contact_model, lcp_method, options.get("contact") is not None)
        LCPOptions.create(lcp_method=lcp_method, lcp_iterations=lcp_iterations, lcp_tol=lcp_tol,
                          lcp_omega=lcp_omega)  # checked also when unused (penalty)
        if contact_model != "penalty":
            options.update(contact_model=contact_model, lcp_method=lcp_method, lcp_omega=lcp_omega,
                           lcp_iterations=lcp_iterations, lcp_tol=lcp_tol)
        tol = DEFAULT_TOL[check_dtype(dtype)] if tol is None else tol
        self.sim = Simulator(self.body, dt, optimizer=optimizer, num_envs=self.num_envs, dtype=dtype, device=device,
                             max_iter=max_iter, tol=tol, order=order, backend=backend, newton_memory=newton_memory,
                             integrator=integrator, **options)
        self.dt = self.sim.dt * self.frame_skip  # the control interval: an env step holds its action this long
        ground = self.sim.forces.contact if self.sim.impulse is None else self.sim.impulse
        self.energy_budget = EnergyBudget(self.sim, self.actuated, self.gear,
                                          None if ground is None else ground.height, divergence_safety)

        n_act = len(self.actuated)
        self.single_action_space = spaces.Box(-1.0, 1.0, (n_act,), dtype=np.float32)
        big = float(np.finfo(np.float32).max)  # every finite float32 (infinite bounds make check_env warn)
        self.single_observation_space = spaces.Box(-big, big, (self.obs_dim,), dtype=np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        B = self.num_envs
        self._rngs = [None] * B
        self._elapsed = np.zeros(B, dtype=np.int64)
        self._unconverged = np.zeros(B, dtype=np.int64)
        self._needs_reset = np.zeros(B, dtype=bool)
        self._obs = np.zeros((B, self.obs_dim), dtype=np.float32)
        self._has_reset = False
        self._view = self._host = None  # the Simulator's StateView of its current state, and its NumPy copy

    @property
    def xp(self):
        """The Simulator's array module (not stored: modules do not pickle)."""
        return self.sim.xp

    # --- hooks ----------------------------------------------------------------------------------------------
    def _build_body(self):
        """The Body (with ``meta["actuated"]``: the DOF indices the actions drive)."""
        raise NotImplementedError

    def _gear(self):
        """Per-actuator torque scale [N m] (scalar or (n_act,)): the subclass's ``gear_value``, validated."""
        n_act = len(self.actuated)
        try:
            elements = np.asarray(self.gear_value, dtype=object).ravel()
            # real numbers only: np.asarray(..., dtype=float) would turn "40" into 40.0 and True into 1.0
            g = np.asarray(self.gear_value, dtype=float) if all(
                isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) for x in elements) else None
        except (TypeError, ValueError):
            g = None
        if g is None or g.shape not in ((), (n_act,)) or not (np.all(np.isfinite(g)) and np.all(g > 0)):
            raise ValueError(f"gear must be a positive number or {n_act} positive numbers (one per actuator, "
                             f"N m), got {self.gear_value!r}")
        return g

    def _sim_options(self) -> dict:
        """Simulator keyword arguments: gravity, drag, contact, limit_stiffness, damping."""
        raise NotImplementedError

    def reset_model(self, rng) -> tuple:
        """One sub-environment's initial state (q (nq,), qd (nv,)) drawn from generator ``rng`` (Gymnasium's
        ``reset_model``, which writes the state itself: here the env writes the batch's rows)."""
        raise NotImplementedError

    def _get_obs(self, q, qd, kin) -> np.ndarray:
        """Observations (B, obs_dim) of the current states q (B, nq), qd (B, nv) with kinematics ``kin`` (NumPy
        arrays); quantities of the last step (contact forces) come from the Simulator."""
        raise NotImplementedError

    def _get_rew(self, before, after, action) -> tuple:
        """(reward (B,), terminated (B,), info dict of (B,) arrays: the reward terms and what else a step reports)
        of one step from the ``before`` / ``after`` summaries (:meth:`_summary`) and the clipped actions
        (B, n_act)."""
        raise NotImplementedError

    def _summary(self, q, qd, kin) -> dict:
        """Quantities the reward needs from a state (NumPy arrays (B, ...)); default: the centre of mass."""
        return {"com": self.centre_of_mass(kin)}

    def _get_reset_info(self, summary) -> dict:
        """Info (dict of (B,) arrays) of a state just reset, from its :meth:`_summary`: the reset's info and, on
        an autoreset step, those entries of the reset rows; default: the centre of mass' x and y."""
        com = summary["com"]
        return {"x_position": com[:, 0].copy(), "y_position": com[:, 1].copy()}

    # --- state helpers --------------------------------------------------------------------------------------
    def centre_of_mass(self, kin=None):
        """Centre of mass (B, 3) [m] (NumPy) of the body at kinematics ``kin`` (default: the current state's);
        :func:`pbad_gym.dynamics.centre_of_mass`. For the current state, the one of the divergence guard's energy
        terms (:meth:`EnergyBudget.current`, measured for the guard's check anyway; the same to round-off)."""
        view, host = self._views()
        if kin is None or kin is host.kin:
            return self.energy_budget.current(view).com
        return to_numpy(centre_of_mass(self.body, kin=kin))

    def _views(self):
        """(the Simulator's :class:`~pbad_gym.simulator.StateView` of its current state, the same as NumPy arrays):
        the view the last step returned while the Simulator is still in that state, else a new one (after a reset,
        a restore, or a caller's own ``sim.reset``)."""
        if self._view is None or self._view.q is not self.sim.q:
            self._set_view(self.sim.view())
        return self._view, self._host

    def _set_view(self, view):
        """Keep ``view`` and its NumPy copy: the one conversion of the Simulator's arrays back to the host (none on
        the CPU, where they are NumPy arrays already)."""
        self._view = view
        self._host = view if self.sim.device == "cpu" else tree_map(to_numpy, view)

    def _kinematics(self):
        """Kinematics of the current configuration (NumPy)."""
        return self._views()[1].kin

    def _state_numpy(self):
        """(q (B, nq), q̇ (B, nv)) of the current state (NumPy)."""
        host = self._views()[1]
        return host.q, host.qd

    def set_state(self, q, qd, mask=None):
        """Overwrite the state of the sub-environments selected by ``mask`` (B,) bool (default: all) with
        q (n, nq) and qd (n, nv), n = mask.sum(); the other sub-environments keep their state bit for bit."""
        mask = np.ones(self.num_envs, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"mask must have shape ({self.num_envs},), got {mask.shape}")
        n = int(mask.sum())
        body, xp, sim = self.body, self.xp, self.sim
        q = np.asarray(q, dtype=np.float64).reshape(n, body.nq)
        qd = np.asarray(qd, dtype=np.float64).reshape(n, body.nv)
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd))):
            raise ValueError("set_state: q and qd must be finite")
        if n == 0:
            return
        sim.reset(xp.asarray(q, dtype=sim.dtype), xp.asarray(qd, dtype=sim.dtype), rows=None if n == self.num_envs
                  else mask)

    # --- action handling ------------------------------------------------------------------------------------
    def _check_action(self, action, batched=True):
        shape = (self.num_envs, len(self.actuated)) if batched else (len(self.actuated),)
        a = action if type(action) is np.ndarray else np.asarray(to_numpy(action))
        if a.dtype.kind != "f" and (a.dtype == object or a.dtype == bool or not np.issubdtype(a.dtype, np.integer)):
            raise TypeError(f"action must be a real-valued (float) array of shape {shape}, got dtype {a.dtype}")
        if a.shape != shape:
            layout = "(num_envs, actuators)" if batched else "(actuators,)"
            raise ValueError(f"action must have shape {shape} {layout}, got {a.shape}")
        a = a.astype(np.float64).reshape(self.num_envs, -1)  # a copy: clipped in place below
        finite = np.isfinite(a)
        if finite.all():  # the common case
            bad = np.zeros(self.num_envs, dtype=bool)
        else:
            bad = ~finite.all(1)
            if self.nonfinite_action == "raise":
                raise ValueError(f"action contains NaN or inf in sub-environment(s) {np.nonzero(bad)[0].tolist()}; "
                                 "pass finite actions or construct the env with nonfinite_action='zero'")
            a = np.where(finite, a, 0.0)
        # np.clip's result for finite values, without its Python wrapper (a step-rate cost at small batches)
        return np.minimum(np.maximum(a, -1.0, out=a), 1.0, out=a), bad

    @staticmethod
    def _finite_rows(q, qd, obs, reward):
        """(B,) bool: every entry of the row's q, qd, obs and reward finite; None when all rows are (one sum
        per array decides the common case: a NaN or inf anywhere makes the total non-finite, and a finite total
        proves every entry finite; only a non-finite total, or an overflowing one, takes the per-row test)."""
        total = (np.add.reduce(q, axis=None) + np.add.reduce(qd, axis=None)  # (called under np.errstate)
                 + np.add.reduce(obs, axis=None, dtype=np.float64) + np.add.reduce(reward, axis=None))
        if math.isfinite(total):
            return None
        return np.isfinite(q).all(1) & np.isfinite(qd).all(1) & np.isfinite(obs).all(1) & np.isfinite(reward)

    # --- core step on all rows ------------------------------------------------------------------------------
    def _physics_step(self, action, skip=None):
        """One physics step of every row under clipped actions (B, n_act); rows in ``skip`` get zero torque.
        Returns (obs float32 (B, obs_dim), reward (B,), terminated (B,), diverged (B,), info)."""
        sim = self.sim
        snapshot = sim.snapshot()
        before = self._last_summary
        ctrl = action if skip is None else np.where(skip[:, None], 0.0, action)
        tau = np.zeros((self.num_envs, self.body.nv))
        tau[:, self._actuated_columns] = ctrl * self.gear
        if sim.device != "cpu" or sim.dtype != np.float64:
            tau = self.xp.asarray(tau, dtype=sim.dtype)
        with np.errstate(all="ignore"):
            step_info, converged, iterations, out_of_budget = self._substeps(tau)
            q, qd, kin, _ = self._host
            obs = self._get_obs(q, qd, kin).astype(np.float32)  # finiteness is judged on what the agent receives
            after = self._summary(q, qd, kin)
            reward, terminated, info = self._get_rew(before, after, action)
            finite = self._finite_rows(q, qd, obs, reward)
        self._unconverged += 1  # consecutive unconverged steps
        self._unconverged[converged] = 0
        diverged = out_of_budget | (self._unconverged > self.max_unconverged_steps)
        if finite is not None:
            diverged |= ~finite
        any_diverged = diverged.any()
        self.energy_budget.accept(~diverged if any_diverged else None)
        if skip is not None and any_diverged:
            diverged &= ~skip
            any_diverged = diverged.any()
        if any_diverged:
            # restore the pre-step state of the diverged rows; they are reset by the next step (autoreset)
            sim.restore(snapshot, rows=diverged)
            obs = np.where(diverged[:, None], self._obs, obs)
            reward = np.where(diverged, 0.0, reward)
            terminated = terminated & ~diverged
            for key, val in info.items():
                if val.dtype.kind == "f":
                    info[key] = np.where(diverged, 0.0, val)
            after = {k: np.where(diverged.reshape((-1,) + (1,) * (v.ndim - 1)), before[k], v)
                     for k, v in after.items()}
        self._last_summary = after
        for key in ("lcp_iterations", "lcp_converged", "contacts", "sqp_iterations"):  # the impulse model's
            value = getattr(step_info, key)
            if value is not None:
                info[key] = to_numpy(value)
        info["iterations"] = iterations
        info["converged"] = converged
        info["diverged"] = diverged
        # (the hooks return fresh arrays each step: no copy is needed when they already have the dtype)
        return obs, np.asarray(reward, dtype=np.float64), terminated.astype(bool, copy=False), diverged, info

    def _substeps(self, tau):
        """``frame_skip`` physics steps under torques tau (checked: the env's own, from a validated action), one
        :meth:`Simulator.advance` call (one compiled call on the numba backend), each checked by the divergence guard
        (its bound is per physics step); the new state's view becomes the env's. Returns (the step's StepInfo,
        converged on every substep (B,), LM iterations summed over the substeps (B,) int64, out of the energy budget
        on some substep (B,)); the guard's last check is left pending for :meth:`_physics_step`'s accept. Called
        under ``np.errstate(all="ignore")``. The arrays are the step's own, new on every step (no copies)."""
        view, info = self.sim.advance(tau, self.frame_skip)
        self._set_view(view)
        out = self.energy_budget.check_step(view, info)[0]
        converged = to_numpy(info.converged).astype(bool, copy=False)
        return info, converged, to_numpy(info.iterations).astype(np.int64, copy=False), out

    def _reset_rows(self, mask):
        """Draw reset states for the masked rows from their generators and write them; returns nothing."""
        rows = np.nonzero(mask)[0]
        states = [self.reset_model(self._rngs[i]) for i in rows]
        q = np.stack([s[0] for s in states])
        qd = np.stack([s[1] for s in states])
        self.sim.reset(self.xp.asarray(q, dtype=self.sim.dtype), self.xp.asarray(qd, dtype=self.sim.dtype),
                       rows=None if len(rows) == self.num_envs else mask)
        self.energy_budget.start(rows, view=self._views()[0])
        self._elapsed[rows] = 0
        self._unconverged[rows] = 0
        self._needs_reset[rows] = False

    def _refresh(self, mask=None):
        """Recompute observations and reward summaries of the masked rows from the current state."""
        q, qd, kin, _ = self._views()[1]
        obs = self._get_obs(q, qd, kin).astype(np.float32)
        summary = self._summary(q, qd, kin)
        if mask is None or not getattr(self, "_last_summary", None):
            self._obs, self._last_summary = obs, summary
        else:
            self._obs = np.where(mask[:, None], obs, self._obs)
            self._last_summary = {k: np.where(mask.reshape((-1,) + (1,) * (v.ndim - 1)), v, self._last_summary[k])
                                  for k, v in summary.items()}

    # --- gymnasium API --------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset every sub-environment, or those in ``options["reset_mask"]`` (B,) bool (the others keep their
        state and their observation; a mask without True resets nothing). ``seed`` (int) seeds sub-environment
        i's generator with seed + i (a list of B ints or None seeds each one)."""
        super().reset(seed=seed if isinstance(seed, (int, np.integer)) else None)
        B = self.num_envs
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; accepted: ['reset_mask']")
        mask = np.ones(B, dtype=bool) if mask is None else np.asarray(mask)
        if mask.dtype != bool or mask.shape != (B,):
            raise ValueError(f"options['reset_mask'] must be a bool array of shape ({B},), got {mask!r}")
        if not self._has_reset and not mask.all():
            raise ValueError("the first reset must reset every sub-environment (no reset_mask)")
        if seed is None:
            seeds = [None] * B
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(B)]
        else:
            seeds = list(seed)
            if len(seeds) != B:
                raise ValueError(f"seed must be an int, None or a list of {B} ints/None, got {seed!r}")
        for i in np.nonzero(mask)[0]:
            if seeds[i] is not None or self._rngs[i] is None:
                s = seeds[i] if seeds[i] is not None else int(self.np_random.integers(2**31 - 1))
                self._rngs[i], _ = seeding.np_random(s)
        if mask.any():
            self._reset_rows(mask)
            self._refresh(mask if self._has_reset else None)
        self._has_reset = True
        return self.array_export.obs(self._obs.copy()), self._get_reset_info(self._last_summary)

    def _require_reset(self):
        if not self._has_reset:
            raise RuntimeError("call reset() before step()")

    def advance(self, actions, *, batched=True):
        """One step of every sub-environment without autoreset and time limit: the contract of the single-env
        form :class:`PBADEnv`, which owns its episode's end.

        actions: (num_envs, actuators), or (actuators,) with ``batched=False`` (a batch of one), checked and
        clipped as :meth:`step` does. A diverged row is restored to its pre-step state (as in :meth:`step`) but
        not reset: the caller resets. Returns (obs float32 (B, obs_dim), reward (B,), terminated (B,),
        diverged (B,), info dict of (B,) arrays) — ``diverged`` is the truncation of a row that left physics."""
        self._require_reset()
        a, sanitised = self._check_action(actions, batched=batched)
        obs, reward, terminated, diverged, info = self._physics_step(a)
        self._obs = obs
        self._elapsed += 1
        info["action_sanitised"] = sanitised
        return obs, reward, terminated, diverged, info

    def step(self, actions):
        self._require_reset()
        a, sanitised = self._check_action(actions)
        if self.autoreset_mode is not AutoresetMode.NEXT_STEP:
            return self._step_same_step_or_disabled(a, sanitised)
        pending = self._needs_reset
        any_pending = pending.any()
        if any_pending:
            pending = pending.copy()  # _reset_rows clears _needs_reset in place
        obs, reward, terminated, diverged, info = self._physics_step(a, skip=pending if any_pending else None)
        self._elapsed += 1
        truncated = self._truncated(terminated, diverged)
        self._obs = obs
        if any_pending:
            self._reset_rows(pending)
            self._refresh(pending)
            obs = self._obs
            reward = np.where(pending, 0.0, reward)
            terminated, truncated = terminated & ~pending, truncated & ~pending
            for key, val in info.items():
                if val.dtype.kind == "f":
                    info[key] = np.where(pending, 0.0, val)
            for key, val in self._get_reset_info(self._last_summary).items():  # the reset state (Gymnasium)
                info[key] = np.where(pending, val, info[key])
            info["diverged"] = info["diverged"] & ~pending
        self._needs_reset = terminated | truncated
        info["action_sanitised"] = sanitised
        return (*self.array_export(obs.copy(), reward, terminated, truncated), info)

    def _truncated(self, terminated, diverged):
        """Truncation flags (B,) of the step just taken: diverged, or at the time limit, and not terminated (a new
        array: diverged stays info["diverged"])."""
        truncated = diverged
        if self.max_episode_steps is not None:
            truncated = truncated | (self._elapsed >= self.max_episode_steps)
        return truncated & ~terminated

    def _step_same_step_or_disabled(self, a, sanitised):
        """:meth:`step` under autoreset SAME_STEP or DISABLED (the class docstring) for checked actions ``a``."""
        if self.autoreset_mode is AutoresetMode.DISABLED and self._needs_reset.any():
            raise RuntimeError(
                f"sub-environment(s) {np.nonzero(self._needs_reset)[0].tolist()} ended (terminated or truncated) "
                "and autoreset_mode is DISABLED: reset them with reset(options={'reset_mask': mask}) before the next "
                "step")
        obs, reward, terminated, diverged, info = self._physics_step(a)
        self._elapsed += 1
        truncated = self._truncated(terminated, diverged)
        self._obs = obs
        info["action_sanitised"] = sanitised
        done = terminated | truncated
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._needs_reset = done
        elif done.any():
            info = self._reset_ended_rows(done, obs, info)
            obs = self._obs
        return (*self.array_export(obs.copy(), reward, terminated, truncated), info)

    def _reset_ended_rows(self, done, obs, info):
        """SAME_STEP: reset the rows in ``done`` (B,) bool after a step that returned ``obs`` and ``info``; return
        the step's info with the ended rows' final observation and info (SyncVectorEnv's keys and masks) and their
        reset state's info; ``self._obs`` becomes the observations with the reset rows'."""
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in np.nonzero(done)[0]:
            final_obs[i] = obs[i].copy()
        final_info = {}
        for key, val in info.items():
            final_info[key] = np.where(done.reshape((-1,) + (1,) * (val.ndim - 1)), val, np.zeros_like(val))
            final_info["_" + key] = done.copy()
        self._reset_rows(done)
        self._refresh(done)
        out = {key: np.where(done.reshape((-1,) + (1,) * (val.ndim - 1)), np.zeros_like(val), val)
               for key, val in info.items()}
        for key, val in self._get_reset_info(self._last_summary).items():  # the reset state (Gymnasium)
            out[key] = np.where(done, val, out[key] if key in out else np.zeros_like(val))
        out["final_obs"], out["_final_obs"] = final_obs, done.copy()
        out["final_info"], out["_final_info"] = final_info, done.copy()
        return out

    def render(self):
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; construct the env with "
                                  "render_mode='rgb_array'")
            return None
        n = min(self.num_envs, self.render_num_envs)
        q = self.sim.q[self.xp.asarray(np.arange(n))]
        return tuple(render_frames(self.body, q, width=self.render_width, height=self.render_height))


class PBADEnv(gymnasium.Env):
    """Single-environment form: the vector environment ``vector_cls`` with one sub-environment, no autoreset and
    no time limit of its own (``gymnasium.make`` adds the registered TimeLimit). Same keyword arguments. It
    steps through the vector env's public :meth:`PBADVectorEnv.advance`."""

    vector_cls = PBADVectorEnv

    # metadata is an instance attribute behind a property: ``gymnasium.make`` reads a class-level dict before
    # constructing and, for render_mode="human", would wrap the env in its pygame HumanRendering wrapper (which
    # fails without pygame, or opens a window of a mode the env does not support) instead of letting the env
    # refuse the mode. With the property it passes render_mode through, and the env raises its own ValueError
    # naming render_mode and the accepted modes (as ``gymnasium.make_vec`` does).
    @property
    def metadata(self):
        return self._metadata

    @metadata.setter
    def metadata(self, value):
        self._metadata = value

    def __init__(self, **kwargs):
        for name in ("num_envs", "autoreset_mode"):
            if name in kwargs:
                raise ValueError(f"{name} is a vector-env argument; use gymnasium.make_vec for batches")
        kwargs.setdefault("max_episode_steps", None)
        self.vec = self.vector_cls(num_envs=1, **kwargs)
        self.render_mode = self.vec.render_mode
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1.0 / self.vec.dt))}
        self.action_space = self.vec.single_action_space
        self.observation_space = self.vec.single_observation_space
        self._done = False

    @property
    def dt(self):
        return self.vec.dt

    @property
    def sim(self):
        return self.vec.sim

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; the single env accepts none")
        obs, info = self.vec.reset(seed=seed)
        return obs[0], {k: v[0].item() for k, v in info.items()}

    def step(self, action):
        obs, reward, terminated, diverged, info = self.vec.advance(action, batched=False)
        return (self.vec.array_export.obs(obs[0]), float(reward[0]), bool(terminated[0]), bool(diverged[0]),
                {k: v[0].item() for k, v in info.items()})

    def render(self):
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode")
            return None
        return self.vec.render()[0]
