"""Spider: a four-legged walker on penalty ground contact (the PBAD paper's spider, proportioned as Ant-v5)."""
from __future__ import annotations

import numpy as np

from ..arrays import real_number
from ..energies import cone_excess, sphere_centres
from ..energies.penalty import check_springs
from ..kinematics import forward_kinematics, integrate
from ..model.robots import spider
from .base import PBADEnv, PBADVectorEnv, row_norm
from .render import with_render_fps


class SpiderVectorEnv(PBADVectorEnv):
    """## Description
    A spherical torso (radius 0.25 m) on a free joint with four legs along the diagonals; each leg is a thigh on a
    2-DOF hip (universal joint: yaw, then pitch) and a shin on a 1-DOF knee: 6 + 12 = 18 DOF, 12 actuators,
    182 kg, proportions of Gymnasium's Ant-v5. Gravity; ground contact is a penalty energy on 13 contact
    spheres (torso, hips, knees, feet) with viscous friction (paper eq. 16). Joint ranges are enforced by a
    penalty, so the unactuated spider stands on its feet (like the Ant on its joint limits). The goal is to
    walk along +x. Physics: PBAD order 2, Δt = 0.02 s.

    ## Action space
    Box(-1, 1, (12,), float32): per leg (front-left, back-left, back-right, front-right) hip yaw, hip pitch and
    knee torques, scaled by ``gear`` [N m] (clipped).

    ## Observation space
    Box(-f32max, f32max, (35,), float32) — torso height z (1), torso orientation quaternion (w, x, y, z) (4), joint
    angles (12), torso linear velocity (3, world), torso angular velocity (3, body frame), joint velocities (12).
    ``exclude_current_positions_from_observation=False`` prepends torso x, y (37);
    ``include_contact_forces_in_observation=True`` appends each contact sphere's ground force (13 x 3, world
    frame, clipped to ``contact_force_range``).

    ## Rewards
    reward = healthy_reward + forward_reward − ctrl_cost − contact_cost with forward_reward =
    forward_reward_weight · ẋ_torso, ctrl_cost = ctrl_cost_weight · ‖a‖², contact_cost = contact_cost_weight ·
    ‖clip(contact forces, contact_force_range)‖², healthy_reward paid while healthy (as Ant-v5).
    info: reward_survive, reward_forward, reward_ctrl, reward_contact (the terms, signed as they enter the sum).

    ## Starting state
    Torso ``init_height`` above the ground (default: 0.1 m above the height of the straight legs' feet), joints at
    0, every coordinate perturbed by U(−s, s) (rotations as a rotation vector), velocities by s·N(0, 1),
    s = ``reset_noise_scale``; the spider drops and settles on its feet at z ≈ 0.385 m.

    ## Episode end
    Termination when unhealthy (if ``terminate_when_unhealthy``): torso height outside ``healthy_z_range`` or the
    torso flipped (its up axis' z component below ``healthy_up_min``). Truncation after ``max_episode_steps``
    (1000) or with ``info["diverged"]``.

    ## Arguments
    num_envs=1, max_episode_steps=1000, forward_reward_weight=1.0, ctrl_cost_weight=0.5, contact_cost_weight=5e-4,
    healthy_reward=1.0, terminate_when_unhealthy=True, healthy_z_range=(0.2, 1.0), healthy_up_min=0.0,
    contact_force_range=(-1.0, 1.0), reset_noise_scale=0.1, exclude_current_positions_from_observation=True,
    include_contact_forces_in_observation=False, gear=150.0 [N m], contact_stiffness=5e4 [N/m],
    friction="viscous" | "coulomb", friction_damping=1000.0 [N s/m], mu=1.0 (Coulomb and impulse friction),
    slip_velocity=0.01 [m/s] (Coulomb smoothing: sticking below it), limit_stiffness=1e4 [N m/rad],
    joint_damping=1.0 [N m s/rad], init_height=None, dt=0.02 [s], order=2, optimizer="lm", max_iter=None (the
    optimiser's default: 50 for LM, 500 for L-BFGS),
    tol=None (1e-7 rad in float64, 1e-5 in float32), contact_model="penalty" | "impulse" (velocity-level LCP),
    lcp_method="block_pgs" | "pgs" | "psor" | "amgs", lcp_omega=1.0, lcp_iterations=50, lcp_tol=1e-6 [N s]
    (impulse only), device="cpu", dtype=np.float64, backend=None (the Simulator's: numba on CPU when it imports),
    render_mode=None | "rgb_array", nonfinite_action="raise" | "zero", max_unconverged_steps=10,
    render_width=320, render_height=240, render_num_envs=4.

    ## Version history
    v0: first version (universal hips, hinge knees, penalty contact, viscous friction).
    """

    # measured (8 rows, 60 steps of random actions, LM): max_iter=2 truncates 39 rows as diverged, 3 none
    min_max_iter = 3
    # v0-v2 cap Coulomb friction by the spring force at the start of the step (energies/contact.py), kept for
    # reproducibility; v3 caps it by the normal force the step applies
    friction_cap = "lagged_spring"
    # the robot's leg count; ``pbad-bench scaling-n`` subclasses with more legs to time larger bodies of this kind
    n_legs = 4

    def __init__(self, num_envs=1, max_episode_steps=1000, *, forward_reward_weight=1.0, ctrl_cost_weight=0.5,
                 contact_cost_weight=5e-4, healthy_reward=1.0, terminate_when_unhealthy=True,
                 healthy_z_range=(0.2, 1.0), healthy_up_min=0.0, contact_force_range=(-1.0, 1.0),
                 reset_noise_scale=0.1, exclude_current_positions_from_observation=True,
                 include_contact_forces_in_observation=False, gear=150.0, contact_stiffness=5e4,
                 friction="viscous", friction_damping=1000.0, mu=1.0, slip_velocity=0.01, limit_stiffness=1e4,
                 joint_damping=1.0, init_height=None, dt=0.02, **kwargs):
        self.forward_reward_weight = real_number(forward_reward_weight, "forward_reward_weight")
        self.ctrl_cost_weight = real_number(ctrl_cost_weight, "ctrl_cost_weight", nonnegative=True)
        self.contact_cost_weight = real_number(contact_cost_weight, "contact_cost_weight", nonnegative=True)
        self.healthy_reward = real_number(healthy_reward, "healthy_reward")
        self.terminate_when_unhealthy = bool(terminate_when_unhealthy)
        lo, hi = (real_number(x, "healthy_z_range") for x in healthy_z_range)
        if not lo < hi:
            raise ValueError(f"healthy_z_range must be (low, high) with low < high, got {healthy_z_range!r}")
        self.healthy_z_range = (lo, hi)
        self.healthy_up_min = real_number(healthy_up_min, "healthy_up_min")
        clo, chi = (real_number(x, "contact_force_range") for x in contact_force_range)
        if not clo < chi:
            raise ValueError(f"contact_force_range must be (low, high) with low < high, got {contact_force_range!r}")
        self.contact_force_range = (clo, chi)
        from .base import check_reset_noise_scale  # in [0, 1]: base.py explains the bound

        self.reset_noise_scale = check_reset_noise_scale(reset_noise_scale)
        self.exclude_positions = bool(exclude_current_positions_from_observation)
        self.include_contact = bool(include_contact_forces_in_observation)
        self.gear_value = gear
        self.contact = dict(stiffness=float(contact_stiffness), friction=friction,
                            damping=real_number(friction_damping, "friction_damping", nonnegative=True),
                            mu=real_number(mu, "mu", nonnegative=True), slip_velocity=float(slip_velocity),
                            friction_cap=self.friction_cap)
        self.limit_stiffness = float(limit_stiffness)
        self.joint_damping = real_number(joint_damping, "joint_damping", nonnegative=True)
        self.init_height = init_height
        self.n_spheres = 1 + 3 * self.n_legs
        super().__init__(num_envs, max_episode_steps, dt=dt, **kwargs)
        if len(self.body.contact_points()[0]) != self.n_spheres:
            raise RuntimeError("spider model and environment disagree on the contact spheres")
        if self.init_height is None:
            self.init_height = self.body.meta["stand_height"] + 0.1

    def _build_body(self):
        return self._with_obs_dim(spider(n_legs=self.n_legs))

    def _with_obs_dim(self, body):
        """``body``, after setting obs_dim from it: z, quaternion and joint angles (nq − 2), velocities (nv), the
        torso's x, y unless excluded, and 3 force components per contact sphere when included."""
        self.obs_dim = (body.nq - 2 + body.nv + (0 if self.exclude_positions else 2)
                        + (3 * self.n_spheres if self.include_contact else 0))
        return body

    def _sim_options(self):
        damping = np.zeros(self.body.nv)
        damping[6:] = self.joint_damping
        contact = self.contact if self.contact_model == "penalty" else {"mu": self.contact["mu"]}
        return {"contact": contact, "limit_stiffness": self.limit_stiffness, "damping": damping}

    def reset_model(self, rng):
        s, body = self.reset_noise_scale, self.body
        q0 = body.q0()
        q0[2] = self.init_height
        q = integrate(body, q0[None], rng.uniform(-s, s, body.nv)[None])[0]
        qd = s * rng.standard_normal(body.nv)
        return q, qd

    # --- contact forces -------------------------------------------------------------------------------------
    def _summary(self, q, qd, kin):
        return {"com": self.centre_of_mass(kin), "torso": q[:, :3].copy(), "quat": q[:, 3:7].copy()}

    def contact_forces(self):
        """Ground force on each contact sphere (B, S, 3) [N, world frame] in the last step, as the engine applied
        it (:attr:`pbad_gym.Simulator.contact_forces`): with penalty contact −∂E/∂P of the contact energy at the
        step's solution — the normal force D1·d and the viscous friction −D2·Δp∥/Δt, or the smoothed Coulomb
        friction of the step's stick anchors (bounded by μN); with contact_model="impulse" the LCP's impulses
        divided by Δt. After a reset (no step yet): the normal forces of the reset pose, no friction.

        The environment used to recompute these forces from the poses before and after the step; for Coulomb
        friction that copy of the force law differed from the force the step applied (by up to 5 % of the largest
        force on Spider-v1 under random actions). It now reports the engine's force, the exact one; the normal,
        viscous and impulse forces are unchanged bit for bit (docs/environments.md)."""
        return self._views()[1].force

    def _clipped_contact_forces(self):
        """The contact forces clipped to ``contact_force_range`` (the ndarray method: np.clip's own ufunc without
        its dispatch wrappers, a step-rate cost at small batches)."""
        return self.contact_forces().clip(*self.contact_force_range)

    def _get_obs(self, q, qd, kin):
        parts = [q[:, 2:] if self.exclude_positions else q, qd]
        if self.include_contact:
            parts.append(self._clipped_contact_forces().reshape(len(q), -1))
        return np.concatenate(parts, axis=1)

    def healthy(self, q):
        """(B,) bool: finite state, torso height in healthy_z_range, torso up axis z ≥ healthy_up_min."""
        z = q[:, 2]
        x, y = q[:, 4], q[:, 5]
        up_z = 1.0 - 2.0 * (x * x + y * y)
        finite = np.logical_and.reduce(np.isfinite(q), axis=1)  # np.all's own reduction
        with np.errstate(invalid="ignore"):
            return finite & (z >= self.healthy_z_range[0]) & (z <= self.healthy_z_range[1]) & (
                up_z >= self.healthy_up_min)

    def _get_rew(self, before, after, action):
        vel = (after["torso"] - before["torso"]) / self.dt
        q = after["torso"]
        healthy = self.healthy(np.concatenate([after["torso"], after["quat"]], axis=1))
        forward = self.forward_reward_weight * vel[:, 0]
        ctrl = -self.ctrl_cost_weight * np.add.reduce(action * action, axis=1)  # np.sum's own reductions
        F = self._clipped_contact_forces()
        contact = -self.contact_cost_weight * np.add.reduce(F * F, axis=(1, 2))
        survive = self.healthy_reward * healthy
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros(len(q), dtype=bool)
        info = {"reward_survive": survive, "reward_forward": forward, "reward_ctrl": ctrl, "reward_contact": contact,
                "x_position": q[:, 0].copy(), "y_position": q[:, 1].copy(), "z_position": q[:, 2].copy(),
                "distance_from_origin": row_norm(q[:, :2]), "x_velocity": vel[:, 0],
                "y_velocity": vel[:, 1]}
        return survive + forward + ctrl + contact, terminated, info

    def _get_reset_info(self, summary):
        torso = summary["torso"]
        return {"x_position": torso[:, 0].copy(), "y_position": torso[:, 1].copy(), "z_position": torso[:, 2].copy()}


class SpiderEnv(PBADEnv):
    __doc__ = "Single-environment form of :class:`SpiderVectorEnv` (same arguments, no num_envs).\n\n" + (
        SpiderVectorEnv.__doc__ or "")
    vector_cls = SpiderVectorEnv


LM_MAX_ITER = 100  # Spider-v1's LM iteration cap: random actions on the light, strong body need up to ~75


class SpiderV1VectorEnv(SpiderVectorEnv):
    """## Description
    Spider-v1: the Spider of v0 (same geometry: spherical torso of radius 0.25 m on a free joint, four legs of a
    thigh on a 2-DOF hip and a shin on a 1-DOF knee, 18 DOF, 12 actuators, 13 contact spheres) with Ant-v5's
    dynamics: density 5 kg/m³ (0.91 kg in all, as Ant-v5), 150 N m gears, joint armature 1 kg m² and joint
    damping 1 N m s/rad on every hip and knee DOF, smoothed Coulomb friction (μ = 1) on the feet, and the stiffest
    contact that keeps LM cheap while the feet stay within 25 % of their radius under random actions. The goal is
    to walk along +x. Physics: PBAD order 2 at ``dt``.

    ## Action space
    Box(-1, 1, (12,), float32): per leg (front-left, back-left, back-right, front-right) hip yaw, hip pitch and
    knee torques, scaled by ``gear`` [N m] (clipped).

    ## Observation space
    Box(-f32max, f32max, (74,), float32) — torso height z (1), torso orientation quaternion (w, x, y, z) (4),
    joint angles (12) [rad], torso linear velocity (3, world) [m/s], torso angular velocity (3, body frame)
    [rad/s], joint velocities (12) [rad/s], then (as Ant-v5's cfrc_ext, on by default) the ground force on each
    of the 13 contact spheres (13 x 3, world frame [N], clipped to ``contact_force_range``).
    ``exclude_current_positions_from_observation=False`` prepends torso x, y (76);
    ``include_contact_forces_in_observation=False`` drops the forces (35).

    ## Rewards
    As Ant-v5: reward = healthy_reward + forward_reward − ctrl_cost − contact_cost with forward_reward =
    forward_reward_weight · ẋ_torso, ctrl_cost = ctrl_cost_weight · ‖a‖², contact_cost = contact_cost_weight ·
    ‖clip(contact forces, contact_force_range)‖², healthy_reward paid while healthy.
    info: reward_survive, reward_forward, reward_ctrl, reward_contact (signed as they enter the sum),
    x_position, y_position, z_position, distance_from_origin, x_velocity, y_velocity (torso), iterations,
    converged, diverged, action_sanitised.

    ## Starting state
    Torso ``init_height`` above the ground (default: 0.1 m above the straight-leg standing height), joints at 0,
    every coordinate perturbed by U(−s, s) (rotations as a rotation vector), velocities by s·N(0, 1),
    s = ``reset_noise_scale``; the spider drops and settles on its feet.

    ## Episode end
    Termination when unhealthy (if ``terminate_when_unhealthy``): torso height outside ``healthy_z_range``
    (Ant-v5's (0.2, 1.0) m: the Spider stands at the Ant's resting height, 0.38 m) or the torso flipped (up axis'
    z component below ``healthy_up_min``). Truncation after ``max_episode_steps`` (1000) or with
    ``info["diverged"]``.

    ## Arguments
    num_envs=1, max_episode_steps=1000, density=5.0 [kg/m³], armature=1.0 [kg m²], joint_damping=1.0
    [N m s/rad], gear=150.0 [N m], friction="coulomb" | "viscous" | "none", mu=1.0, slip_velocity=0.01 [m/s],
    friction_damping=1000.0 [N s/m] (viscous only), contact_stiffness=5e3 [N/m], limit_stiffness=1e3 [N m/rad],
    forward_reward_weight=1.0, ctrl_cost_weight=0.5, contact_cost_weight=5e-4, healthy_reward=1.0,
    terminate_when_unhealthy=True, healthy_z_range=(0.2, 1.0) [m], healthy_up_min=0.0,
    contact_force_range=(-1.0, 1.0) [N], reset_noise_scale=0.1, exclude_current_positions_from_observation=True,
    include_contact_forces_in_observation=True, init_height=None [m], dt=0.05 [s], order=2, optimizer="lm",
    max_iter=None (100 for LM: random actions on this light, strong body need up to ~75 LM iterations; the
    engine's default for the other optimisers: 500 for L-BFGS), tol=None [rad]
    (per dtype: 1e-7 in float64, 1e-5 in float32), contact_model="penalty" | "impulse",
    lcp_method="block_pgs" | "pgs" | "psor" | "amgs", lcp_omega=1.0, lcp_iterations=50, lcp_tol=1e-6 [N s],
    device="cpu", dtype=np.float64, backend=None ("numba" on CPU when it imports, else "numpy"),
    render_mode=None | "rgb_array", nonfinite_action="raise" | "zero",
    max_unconverged_steps=10, divergence_safety=3, render_width=320, render_height=240, render_num_envs=4.

    ## Version history
    v1: Ant-v5's dynamics, not only its geometry — density 1000 -> 5 kg/m³ (182 kg -> 0.91 kg), joint armature
    1 kg m² (new), smoothed Coulomb friction instead of viscous by default, contact stiffness 5e4 -> 5e3 N/m and
    limit stiffness 1e4 -> 1e3 N m/rad (scaled to the lighter body), Δt 0.02 -> 0.05 s (Ant-v5's), max_iter
    50 -> 100, contact forces in the observation by default (Ant-v5's cfrc_ext). Revised: the contact forces
    (observation, contact cost) are the engine's, the force each step applied; the environment's own Coulomb
    formula differed from it by up to 5 % of the largest force (trajectories unchanged).
    v0: first version (universal hips, hinge knees, penalty contact, viscous friction).
    """

    # measured (8 rows, 60 steps of random actions, LM): max_iter=15 truncates 3 rows as diverged, 20 none
    min_max_iter = 20

    def __init__(self, num_envs=1, max_episode_steps=1000, *, density=5.0, armature=1.0, joint_damping=1.0,
                 gear=150.0, friction="coulomb", mu=1.0, slip_velocity=0.01, contact_stiffness=5e3,
                 limit_stiffness=1e3, include_contact_forces_in_observation=True, dt=0.05, max_iter=None,
                 **kwargs):
        if not (np.isfinite(density) and density > 0):
            raise ValueError(f"density must be a positive number of kg/m³, got {density!r}")
        if not (np.isfinite(armature) and armature >= 0):
            raise ValueError(f"armature must be a non-negative number of kg m², got {armature!r}")
        self.density, self.armature = float(density), float(armature)
        if max_iter is None and kwargs.get("optimizer", "lm") == "lm":
            max_iter = LM_MAX_ITER
        super().__init__(num_envs, max_episode_steps, joint_damping=joint_damping, gear=gear, friction=friction,
                         mu=mu, slip_velocity=slip_velocity, contact_stiffness=contact_stiffness,
                         limit_stiffness=limit_stiffness,
                         include_contact_forces_in_observation=include_contact_forces_in_observation, dt=dt,
                         max_iter=max_iter, **kwargs)
        self.metadata = with_render_fps(self.metadata, self.dt)

    def _build_body(self):
        return self._with_obs_dim(spider(density=self.density, armature=self.armature, n_legs=self.n_legs))


class SpiderV1Env(PBADEnv):
    __doc__ = "Single-environment form of :class:`SpiderV1VectorEnv` (same arguments, no num_envs).\n\n" + (
        SpiderV1VectorEnv.__doc__ or "")
    vector_cls = SpiderV1VectorEnv


class SpiderV2VectorEnv(SpiderV1VectorEnv):
    """## Description
    Spider-v2: Gymnasium's Ant-v5 in this engine — its legs and its dynamics, with contact and joint limits that
    give the same gait at the env's step and at a tenth of it. A spherical torso (radius 0.25 m) on a free joint and
    four legs along the diagonals, each a thigh on a hinge hip (yaw about the vertical axis, ±30°) and a shin on a
    hinge knee (30° to 70° below the horizontal, Ant-v5's ankle range; in the neutral pose the knees rest on their
    30° limit, as Ant-v5's do): 6 + 8 = 14 DOF, 8 actuators. Density 5 kg/m³ (0.91 kg, as Ant-v5), 150 N m gears,
    joint armature 1 kg m² and damping 1 N m s/rad, smoothed Coulomb friction (μ = 1). Ground contact on 13 spheres
    (torso, hips, knees, feet) and the joint limits are stiff penalties with clamped Kelvin-Voigt damping (the
    ground never pulls, a limit never holds a joint back), near critical: they dissipate impacts as MuJoCo's soft
    constraints do, where an undamped penalty hands the energy back (a limit bounce launches the light robot metres
    high when the step resolves it). Physics: PBAD order 2 at ``dt`` = 0.01 s, ``frame_skip`` = 5 steps per action,
    so the agent acts every 0.05 s as on Ant-v5 (timestep 0.01 s, frame_skip 5).

    ## Action space
    Box(-1, 1, (8,), float32): per leg (front-left, back-left, back-right, front-right) hip and knee torques,
    scaled by ``gear`` [N m] (clipped).

    ## Observation space
    Box(-f32max, f32max, (66,), float32) — torso height z (1), torso orientation quaternion (w, x, y, z) (4),
    joint angles (8) [rad], torso linear velocity (3, world) [m/s], torso angular velocity (3, body frame)
    [rad/s], joint velocities (8) [rad/s], then the ground force on each of the 13 contact spheres (13 x 3,
    world frame [N], clipped to ``contact_force_range``; Ant-v5's cfrc_ext). ``exclude_current_positions_from_
    observation=False`` prepends torso x, y (68); ``include_contact_forces_in_observation=False`` drops the
    forces (27, Ant-v5's size without cfrc_ext).

    ## Rewards
    As Ant-v5 (and Spider-v1): healthy_reward + forward_reward_weight · ẋ_torso − ctrl_cost_weight · ‖a‖² −
    contact_cost_weight · ‖clip(contact forces)‖², ẋ_torso over the env step (frame_skip · dt).
    info: reward_survive, reward_forward, reward_ctrl, reward_contact, x_position, y_position, z_position,
    distance_from_origin, x_velocity, y_velocity (torso), iterations (LM iterations summed over the substeps),
    converged (every substep), diverged, action_sanitised.

    ## Starting state
    Torso ``init_height`` above the ground (default: 0.1 m above the standing height of the neutral pose, 0.36 m),
    joints at 0 (knees on their 30° limit), every coordinate perturbed by U(−s, s), velocities by s·N(0, 1),
    s = ``reset_noise_scale``; the limp robot lands and stands still within a few seconds.

    ## Episode end
    As Spider-v1: unhealthy (torso z outside ``healthy_z_range`` = Ant-v5's (0.2, 1.0) m, or flipped) terminates;
    ``max_episode_steps`` (1000 env steps = 50 s, as Ant-v5) or ``info["diverged"]`` truncates.

    ## Arguments
    Spider-v1's, with these defaults: contact_stiffness=2e4 [N/m], limit_stiffness=1e3 [N m/rad], dt=0.01 [s],
    frame_skip=5; and contact_damping=135.0 [N s/m] (Kelvin-Voigt damping of the normal force: critical for a
    quarter of the body on one foot, 2·√(D1·m/4)), limit_damping=60.0 [N m s/rad] (critical for the armature on
    the limit penalty, 2·√(k·1 kg m²)), hip="hinge" | "universal" ("universal": Spider-v1's 2-DOF hips with this
    version's stance, 12 actuators), hip_range=30.0 [deg], knee_range=(30.0, 70.0) [deg below the horizontal].

    ## Version history
    v2: Ant-v5's legs (hinge hips ±30°, knees 30–70°: 8 actuators instead of 12), clamped Kelvin-Voigt damping on
    the ground contact (135 N s/m) and the joint limits (60 N m s/rad), contact stiffness 5e3 -> 2e4 N/m, physics
    step 0.05 -> 0.01 s with frame_skip 5 (control interval unchanged, 0.05 s). Measured in BENCHMARKS.md
    ("Spider-v2"): the searched gaits keep their speed at Δt/10, which no Spider-v1 gait did.
    v1: Ant-v5's masses, gears, armature and friction on the v0 geometry. v0: first version.
    """

    # measured (8 rows, 60 steps of random actions, LM): max_iter=5 truncates 22 rows as diverged, 8 none
    min_max_iter = 8

    def __init__(self, num_envs=1, max_episode_steps=1000, *, hip="hinge", hip_range=30.0, knee_range=(30.0, 70.0),
                 contact_stiffness=2e4, contact_damping=135.0, limit_damping=60.0, dt=0.01, frame_skip=5, **kwargs):
        if hip not in ("hinge", "universal"):
            raise ValueError(f"hip must be 'hinge' (Ant-v5's legs) or 'universal' (2-DOF hips), got {hip!r}")
        self.hip = hip
        self.hip_range = real_number(hip_range, "hip_range")
        lo, hi = (real_number(x, "knee_range") for x in knee_range)
        if not (0 <= lo < hi <= 90 and self.hip_range > 0):
            raise ValueError(f"knee_range must be (low, high) degrees below the horizontal with 0 <= low < high <= 90 "
                             f"and hip_range positive, got {knee_range!r}, {hip_range!r}")
        self.knee_range = (lo, hi)
        self.contact_damping = real_number(contact_damping, "contact_damping")
        self.limit_damping = real_number(limit_damping, "limit_damping")
        if not (self.contact_damping >= 0 and self.limit_damping >= 0):
            raise ValueError("contact_damping and limit_damping must be non-negative (N s/m, N m s/rad), got "
                             f"{contact_damping!r}, {limit_damping!r}")
        super().__init__(num_envs, max_episode_steps, contact_stiffness=contact_stiffness, dt=dt,
                         frame_skip=frame_skip, **kwargs)

    def _build_body(self):
        # the neutral pose (q = 0) has the knees on their flattest limit, where Ant-v5's legs come to rest: a limp
        # robot then stands on knees pressed onto their limits and stays put; with mid-range knees the four feet
        # held by friction leave a torso twist that lowers it, and gravity drove that twist for 15-35 s
        lo, hi = np.deg2rad(self.knee_range)
        return self._with_obs_dim(spider(density=self.density, armature=self.armature, hip=self.hip,
                                         n_legs=self.n_legs, knee_bend=lo, knee_range=(0.0, hi - lo),
                                         hip_yaw_range=np.deg2rad(self.hip_range)))

    def _sim_options(self):
        options = super()._sim_options()
        if self.contact_model == "penalty":
            options["contact"] = dict(options["contact"], normal_damping=self.contact_damping)
        return options | {"limit_damping": self.limit_damping}


class SpiderV2Env(PBADEnv):
    __doc__ = "Single-environment form of :class:`SpiderV2VectorEnv` (same arguments, no num_envs).\n\n" + (
        SpiderV2VectorEnv.__doc__ or "")
    vector_cls = SpiderV2VectorEnv


CONTROL_INTERVAL = 0.05  # [s] Ant-v5's: Spider-v3 derives frame_skip from dt so that the agent acts this often
RESET_CLEARANCE = 0.02  # [m] Spider-v3's lowest contact sphere after a reset: no force on the first physics step


def lowest_clearance(body, q):
    """Smallest gap [m] (B,) between a contact sphere and the ground plane z = 0 at configurations q (B, nq)
    (negative: the sphere starts inside the ground)."""
    kin = forward_kinematics(body, q)
    P = sphere_centres(body, kin)
    r = body.arrays(np, P.dtype).contact_r
    return (P[..., 2] - r).min(axis=-1)


class SpiderV3VectorEnv(SpiderV2VectorEnv):
    """## Description
    Spider-v3: Spider-v2's robot (Gymnasium's Ant-v5 in this engine: spherical torso on a free joint, four legs of a
    hinge hip ±30° and a hinge knee 30°–70°, 14 DOF, 8 actuators, 0.91 kg, 150 N m gears, armature 1 kg m², joint
    damping 1 N m s/rad, 13 contact spheres with clamped Kelvin-Voigt penalty contact and μ = 1 smoothed Coulomb
    friction) with contact physics a roboticist can check against the analytic cases (docs/physics.md §2.3,
    BENCHMARKS.md "Contact physics"):

    - friction inside its cone: Coulomb friction is capped by the normal force the step itself applies (damping
      included, clamped at zero) — a fixed point of re-solves, at most ``cone_passes`` (default 4), stopping when
      every sphere's normal force moved by at most ``cone_tol`` (1e-3) of itself; ``info["cone_excess"]`` reports
      the friction beyond μ·F_n of each env step [N] (0 expected);
    - a converged step: physics Δt = ``dt`` = 0.001 s with ``frame_skip`` = 50, so the agent still acts every
      0.05 s (Ant-v5's control interval); the implicit step's own dissipation is ~5 % of the actuators' work under
      random actions (20-38 % at Spider-v2's 0.01 s; ``pbad-bench energy``, BENCHMARKS.md);
    - clean resets: after the reset noise the body is lifted until its lowest contact sphere is at least 2 cm above
      the ground, so no sphere starts inside it.

    ## Action space
    Box(-1, 1, (8,), float32): per leg (front-left, back-left, back-right, front-right) hip and knee torques,
    scaled by ``gear`` [N m] (clipped).

    ## Observation space
    As Spider-v2: Box(-f32max, f32max, (66,), float32) — torso height z (1), torso orientation quaternion
    (w, x, y, z) (4), joint angles (8) [rad], torso linear velocity (3, world) [m/s], torso angular velocity (3,
    body frame) [rad/s], joint velocities (8) [rad/s], then the ground force on each of the 13 contact spheres
    (13 x 3, world frame [N], clipped to ``contact_force_range``). ``exclude_current_positions_from_observation=
    False`` prepends torso x, y (68); ``include_contact_forces_in_observation=False`` drops the forces (27).

    ## Rewards
    As Ant-v5 (and Spider-v2): healthy_reward + forward_reward_weight · ẋ_torso − ctrl_cost_weight · ‖a‖² −
    contact_cost_weight · ‖clip(contact forces)‖², ẋ_torso over the env step (frame_skip · dt).
    info: reward_survive, reward_forward, reward_ctrl, reward_contact, x_position, y_position, z_position,
    distance_from_origin, x_velocity, y_velocity (torso), cone_excess (Σ over the spheres of
    max(0, ‖F_t‖ − μF_n) on the env step's last physics step [N]), iterations (LM iterations summed over the
    substeps), converged, diverged, action_sanitised.

    ## Starting state
    Torso ``init_height`` above the ground (default: 0.1 m above the standing height of the neutral pose, 0.36 m),
    joints at 0 (knees on their 30° limit), every coordinate perturbed by U(−s, s), velocities by s·N(0, 1)
    (as Ant-v5), s = ``reset_noise_scale``; then lifted so that every contact sphere clears the ground by at least
    ``reset_clearance`` [m].

    ## Episode end
    As Spider-v2: unhealthy (torso z outside ``healthy_z_range`` = Ant-v5's (0.2, 1.0) m, or flipped) terminates;
    ``max_episode_steps`` (1000 env steps = 50 s, as Ant-v5) or ``info["diverged"]`` truncates.

    ## Arguments
    Spider-v2's, with these defaults: dt=0.001 [s], frame_skip=None (0.05 s / dt; a dt that does not divide 0.05 s
    is refused unless frame_skip is given); and reset_clearance=0.02 [m], cone_passes=4, cone_tol=1e-3,
    penalty_springs=None (the version's own: "implicit" for v3, "trapezoidal" for v4 and v5; where the limits' and
    the ground's penalty springs sit in time within a physics step, docs/physics.md §2.4), friction_onset=None (the
    version's own: "lagged" for v3 and v4, "step" for v5; which spheres take friction in a physics step,
    docs/physics.md §2.3).

    ## Version history
    v3: Coulomb friction capped by the step's applied normal force (v2: by the spring force at the start of the
    step, which let 40-57 % of the feet's friction impulse leave the cone); physics step 0.01 -> 0.001 s with
    frame_skip 5 -> 50 (the same 0.05 s control interval); resets lifted clear of the ground (v2: 40 % of noisy
    resets started a sphere inside it).
    v2: Ant-v5's legs, damped contact and limits. v1: Ant-v5's masses, gears, armature and friction on the v0
    geometry. v0: first version.
    """

    friction_cap = "applied"
    penalty_springs = "implicit"  # v4: "trapezoidal"
    friction_onset = "lagged"  # v5: "step"

    def __init__(self, num_envs=1, max_episode_steps=1000, *, dt=0.001, frame_skip=None,
                 reset_clearance=RESET_CLEARANCE, cone_passes=4, cone_tol=1e-3, penalty_springs=None,
                 friction_onset=None, **kwargs):
        dt = real_number(dt, "dt", positive=True)
        if frame_skip is None:  # the physics step must divide Ant-v5's control interval
            frame_skip = CONTROL_INTERVAL / dt
            if abs(frame_skip - round(frame_skip)) > 1e-9 * frame_skip:
                raise ValueError(f"dt must divide the control interval {CONTROL_INTERVAL} s (or pass frame_skip), "
                                 f"got dt={dt!r}")
            frame_skip = int(round(frame_skip))
        self.reset_clearance = real_number(reset_clearance, "reset_clearance", nonnegative=True)
        self.cone = dict(cone_passes=cone_passes, cone_tol=cone_tol)  # checked by GroundContact, the one place
        if penalty_springs is not None:
            self.penalty_springs = check_springs(penalty_springs, "penalty_springs")
        if friction_onset is not None:  # (checked by GroundContact)
            self.friction_onset = friction_onset
        super().__init__(num_envs, max_episode_steps, dt=dt, frame_skip=frame_skip, **kwargs)

    def _sim_options(self):
        options = super()._sim_options()
        if self.contact_model == "penalty":
            options["contact"] = dict(options["contact"], springs=self.penalty_springs,
                                      friction_onset=self.friction_onset, **self.cone)
        return options | {"limit_springs": self.penalty_springs}

    def reset_model(self, rng):
        q, qd = super().reset_model(rng)
        gap = lowest_clearance(self.body, q[None])[0]
        q[2] += max(0.0, self.reset_clearance - gap)
        return q, qd

    def _get_rew(self, before, after, action):
        reward, terminated, info = super()._get_rew(before, after, action)
        info["cone_excess"] = cone_excess(self.contact_forces(), self.contact["mu"]).sum(axis=1)
        return reward, terminated, info


class SpiderV3Env(PBADEnv):
    __doc__ = "Single-environment form of :class:`SpiderV3VectorEnv` (same arguments, no num_envs).\n\n" + (
        SpiderV3VectorEnv.__doc__ or "")
    vector_cls = SpiderV3VectorEnv


class SpiderV4VectorEnv(SpiderV3VectorEnv):
    penalty_springs = "trapezoidal"


def _later_doc(v3, description, history):
    """The docstring of a version after Spider-v3: its ``description`` and ``history`` (docstring text, indented)
    around Spider-v3's spaces, rewards, starting state, episode end and arguments (the same for every version from
    v3)."""
    shared = v3[v3.index("## Action space"):v3.index("## Version history")]
    return "## Description\n" + description + "\n    " + shared + "## Version history\n" + history + "    "


_V4_DESCRIPTION = """\
    Spider-v4: Spider-v3 (its robot, contact model, friction inside its cone, 0.001 s physics step under the 0.05 s
    control interval and clean resets) with trapezoidal penalty springs. The joint limits' and the ground's spring
    forces are averaged over the physics step as Newmark's average acceleration, k·(p/4 + p_k/2 + p_{k−1}/4),
    instead of taken at its end (energies/penalty.py, docs/physics.md §2.4). The implicit spring removed energy
    from every bounce of a penalty, a numerical damping of k·Δt beside the physical damper; the trapezoidal one
    keeps it, so the penalties lose energy through their dampers alone. Under random actions the step's numerical
    dissipation falls from 5.5 % to 3.8 % of the actuators' work at the same cost per step (BENCHMARKS.md,
    "Contact physics"). Gradients through the step (pbad_gym.diff) need ``penalty_springs="implicit"`` (v3's).
"""
_V4_HISTORY = """\
    v4: trapezoidal penalty springs (v3: implicit). v3: Coulomb friction capped by the step's applied normal force,
    physics step 0.01 -> 0.001 s with frame_skip 5 -> 50, resets lifted clear of the ground. v2: Ant-v5's legs,
    damped contact and limits. v1: Ant-v5's masses, gears, armature and friction on the v0 geometry. v0: first
    version.
"""


SpiderV4VectorEnv.__doc__ = _later_doc(SpiderV3VectorEnv.__doc__ or "", _V4_DESCRIPTION, _V4_HISTORY)


class SpiderV4Env(PBADEnv):
    __doc__ = "Single-environment form of :class:`SpiderV4VectorEnv` (same arguments, no num_envs).\n\n" + (
        SpiderV4VectorEnv.__doc__ or "")
    vector_cls = SpiderV4VectorEnv


class SpiderV5VectorEnv(SpiderV4VectorEnv):
    friction_onset = "step"


_V5_DESCRIPTION = """\
    Spider-v5: Spider-v4 (its robot, friction capped by the step's applied normal force, trapezoidal penalty
    springs, 0.001 s physics step under the 0.05 s control interval and clean resets) with friction from the first
    physics step of every contact. Up to v4 a physics step gave friction only to the contact spheres already in
    contact at its start, so a foot landing within a step slid free of friction for that step while the ground
    pushed on it: at 0.001 s, an oblique landing lost a fifth of its Coulomb friction impulse, and open-loop gaits
    ran up to a third faster than under ten times finer physics. Here the cap's fixed point also joins every
    sphere the step's normal force pushes, anchored where it crossed into contact (``friction_onset="step"``,
    docs/physics.md §2.3), so a sliding landing takes exactly μ times its normal impulse at every Δt
    (``pbad-bench contact``, BENCHMARKS.md "Contact physics"), and the walker's trajectories converge at first
    order in Δt. Open-loop gaits searched at the default 0.001 s still move under finer physics; with ``dt=0.0005``
    (frame_skip follows) they keep their speed at Δt/10, at 1.6x the cost. Gradients through the step
    (pbad_gym.diff) need ``friction_onset="lagged"`` and ``penalty_springs="implicit"`` (v3's).
"""
_V5_HISTORY = """\
    v5: friction from a contact's first physics step (v4: from its second). v4: trapezoidal penalty springs (v3:
    implicit). v3: Coulomb friction capped by the step's applied normal force, physics step 0.01 -> 0.001 s with
    frame_skip 5 -> 50, resets lifted clear of the ground. v2: Ant-v5's legs, damped contact and limits. v1:
    Ant-v5's masses, gears, armature and friction on the v0 geometry. v0: first version.
"""


SpiderV5VectorEnv.__doc__ = _later_doc(SpiderV3VectorEnv.__doc__ or "", _V5_DESCRIPTION, _V5_HISTORY)


class SpiderV5Env(PBADEnv):
    __doc__ = "Single-environment form of :class:`SpiderV5VectorEnv` (same arguments, no num_envs).\n\n" + (
        SpiderV5VectorEnv.__doc__ or "")
    vector_cls = SpiderV5VectorEnv
