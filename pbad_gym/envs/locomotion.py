"""Gymnasium's MuJoCo locomotion robots in PBAD, each built from Gymnasium's own MJCF file by
:func:`pbad_gym.model.from_mjcf`, with Gymnasium v5's observations, rewards, terminations and resets:
``pbad_gym/Hopper-v0``, ``pbad_gym/Walker2d-v0``, ``pbad_gym/HalfCheetah-v0`` and ``pbad_gym/Ant-v0``
(docs/mjcf.md, docs/environments.md).

What differs from MuJoCo is the physics, by design: the PBAD step (order 2, Δt 0.001 s under the v5 control
interval), penalty ground contact with Coulomb friction inside its cone (Spider-v3's model) and penalty joint
limits, both with clamped Kelvin-Voigt damping, in place of MuJoCo's soft constraints. Their parameters follow
from the robot (:func:`contact_defaults`), so a user's modified XML (``xml_file=``) gets matching ones.
"""
from __future__ import annotations

import os

import gymnasium
import numpy as np

from ..arrays import real_number
from ..dynamics import centre_of_mass, crba
from ..energies import cone_excess, sphere_centres
from ..kinematics import cross, integrate
from ..model.mjcf import from_mjcf
from .base import PBADEnv, PBADVectorEnv, check_reset_noise_scale, row_norm
from .render import with_render_fps
from .spider import lowest_clearance

ASSETS = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets")


# [rad/s] the penalties' natural frequency: 1 / MuJoCo's default constraint time constant (solref 0.02 s)
PENALTY_OMEGA = 50.0


def contact_defaults(body):
    """Penalty parameters for a robot read from MJCF: critically damped springs at MuJoCo's default constraint
    time constant, ω = :data:`PENALTY_OMEGA` = 1/0.02 s. Ground: stiffness (m/4)·ω² [N/m] (a sphere carrying a
    quarter of the robot sinks g/ω² = 4 mm) and normal damping 2ω·m/4 [N s/m]. Limits: stiffness Ī·ω² [N m/rad]
    and damping 2ω·Ī [N m s/rad], Ī the geometric mean of the limited DOFs' joint-space inertia (the diagonal of
    M, armature included) at MuJoCo's reference pose. Stiffer penalties cost accuracy, not stability: the order-1
    step's numerical dissipation grows with ωΔt (BENCHMARKS.md, "Gymnasium's robots from MJCF"). Returns a dict
    of contact_stiffness, contact_damping, limit_stiffness, limit_damping."""
    quarter, w = body.total_mass / 4.0, PENALTY_OMEGA
    limited = [body.v_start[i] + d for i, lk in enumerate(body.links) if lk.joint.range is not None
               for d in range(lk.joint.nv)]
    inertia = float(np.exp(np.log(np.diag(crba(body, body.meta["qpos0"][None])[0])[limited]).mean())
                    ) if limited else 0.0
    return dict(contact_stiffness=quarter * w * w, contact_damping=2.0 * w * quarter,
                limit_stiffness=inertia * w * w, limit_damping=2.0 * w * inertia)


class MJCFVectorEnv(PBADVectorEnv):
    """Base of the robots read from MJCF (module docstring). Subclasses set ``xml_name`` (Gymnasium's asset),
    ``control_interval`` [s] (Gymnasium v5's frame_skip × timestep), ``height_coordinate`` (the q index lifted at
    reset) and implement the observation, reward and reset of their v5 peer.

    Common keyword arguments: xml_file (None: Gymnasium's file; a path to a modified one builds the same env on
    it), forward_reward_weight, ctrl_cost_weight, reset_noise_scale, exclude_current_positions_from_observation,
    contact_stiffness, contact_damping, limit_stiffness, limit_damping (None: :func:`contact_defaults`), mu (None:
    the largest sliding friction MuJoCo would use between a contact geom and the floor), slip_velocity (0.01 m/s),
    cone_passes (4), cone_tol (1e-3), friction_onset ("lagged": friction for the spheres in contact at a physics
    step's start; "step": also for those that land within it, Spider-v5's; docs/physics.md §2.3), reset_clearance
    (0: a noisy reset that puts a contact sphere into the ground is lifted until it touches), dt (0.001 s) and
    frame_skip (None: control_interval / dt), and those of :class:`~pbad_gym.envs.base.PBADVectorEnv`.
    """

    xml_name: str = ""
    control_interval: float = 0.0
    height_coordinate: int = 0
    # measured (16 rows, 300 steps of random actions, LM): every robot converges within 8 iterations a step
    min_max_iter = 8

    def __init__(self, num_envs=1, max_episode_steps=1000, *, xml_file=None, forward_reward_weight=1.0,
                 ctrl_cost_weight=1e-3, reset_noise_scale=5e-3, exclude_current_positions_from_observation=True,
                 contact_stiffness=None, contact_damping=None, limit_stiffness=None, limit_damping=None, mu=None,
                 slip_velocity=0.01, cone_passes=4, cone_tol=1e-3, friction_onset="lagged", reset_clearance=0.0,
                 dt=0.001, frame_skip=None, **kwargs):
        self.xml_file = os.path.join(ASSETS, self.xml_name) if xml_file is None else os.fspath(xml_file)
        self.forward_reward_weight = real_number(forward_reward_weight, "forward_reward_weight")
        self.ctrl_cost_weight = real_number(ctrl_cost_weight, "ctrl_cost_weight", nonnegative=True)
        self.reset_noise_scale = check_reset_noise_scale(reset_noise_scale)
        self.exclude_positions = bool(exclude_current_positions_from_observation)
        self.reset_clearance = real_number(reset_clearance, "reset_clearance", nonnegative=True)
        self._mjcf = from_mjcf(self.xml_file)
        ctrl = self._mjcf.meta["ctrlrange"]
        if not np.array_equal(ctrl, np.tile([-1.0, 1.0], (len(ctrl), 1))):
            raise ValueError(f"xml_file: every actuator's ctrlrange must be [-1, 1] (the action space), got "
                             f"{ctrl.tolist()} in {self.xml_file}")
        given = dict(contact_stiffness=contact_stiffness, contact_damping=contact_damping,
                     limit_stiffness=limit_stiffness, limit_damping=limit_damping)
        self.physics = {k: real_number(v, k, nonnegative=True) if v is not None else d
                        for (k, v), d in zip(given.items(), contact_defaults(self._mjcf).values())}
        ground = self._mjcf.meta["ground"]
        if ground is None:
            raise ValueError(f"xml_file: {self.xml_file} has no floor plane for the robot to walk on")
        mu = float(self._mjcf.meta["contact_mu"].max()) if mu is None else mu
        self.contact = dict(stiffness=self.physics["contact_stiffness"], friction="coulomb",
                            mu=real_number(mu, "mu", nonnegative=True),
                            slip_velocity=real_number(slip_velocity, "slip_velocity", positive=True),
                            normal_damping=self.physics["contact_damping"], height=ground.height,
                            friction_cap="applied", cone_passes=cone_passes, cone_tol=cone_tol,
                            friction_onset=friction_onset)
        self.gear_value = self._mjcf.meta["gear"]
        dt = real_number(dt, "dt", positive=True)
        if frame_skip is None:
            frame_skip = self.control_interval / dt
            if abs(frame_skip - round(frame_skip)) > 1e-9 * frame_skip:
                raise ValueError(f"dt must divide the control interval {self.control_interval} s (or pass "
                                 f"frame_skip), got dt={dt!r}")
            frame_skip = int(round(frame_skip))
        self.init_qpos = self._mjcf.meta["qpos0"].copy()
        super().__init__(num_envs, max_episode_steps, dt=dt, frame_skip=frame_skip, **kwargs)
        self.metadata = with_render_fps(self.metadata, self.dt)

    def _build_body(self):
        body = self._mjcf
        self.obs_dim = self._obs_dim(body)
        return body

    def _obs_dim(self, body):
        """Observation size of ``body`` (the subclass's v5 layout)."""
        raise NotImplementedError

    def _task_reward(self, before, after, action):
        """The v5 peer's (reward, terminated, info) (:meth:`PBADVectorEnv._get_rew`'s contract)."""
        raise NotImplementedError

    def _get_rew(self, before, after, action):
        """The task's reward, with ``info["cone_excess"]``: Σ over the spheres of max(0, ‖F_t‖ − μF_n) on the env
        step's last physics step [N] (0 expected), as Spider-v3 reports it."""
        reward, terminated, info = self._task_reward(before, after, action)
        info["cone_excess"] = cone_excess(self.contact_forces(), self.contact["mu"]).sum(axis=1)
        return reward, terminated, info

    def _sim_options(self):
        meta = self.body.meta
        contact = self.contact if self.contact_model == "penalty" else {"mu": self.contact["mu"]}
        options = {"gravity": tuple(meta["gravity"]), "contact": contact,
                   "limit_stiffness": self.physics["limit_stiffness"], "limit_damping": self.physics["limit_damping"]}
        if meta["spring"].any():
            options.update(spring=meta["spring"], spring_rest=meta["spring_rest"])
        return options

    def _lift(self, q):
        """q (nq,) raised along ``height_coordinate`` until every contact sphere clears the floor by
        ``reset_clearance`` (unchanged when it already does)."""
        gap = lowest_clearance(self.body, q[None])[0] - self.contact["height"]
        q[self.height_coordinate] += max(0.0, self.reset_clearance - gap)
        return q

    def contact_forces(self):
        """Ground force on each contact sphere (B, S, 3) [N, world frame] in the last physics step, as the engine
        applied it (:attr:`pbad_gym.Simulator.contact_forces`; S in :meth:`Body.contact_points` order)."""
        return self._views()[1].force

    def _summary(self, q, qd, kin):
        return {"q": q.copy()}

    def _forward(self, before, after):
        """x velocity (B,) of the root over the env step, and forward_reward_weight times it."""
        vel = (after["q"][:, 0] - before["q"][:, 0]) / self.dt
        return vel, self.forward_reward_weight * vel

    def _ctrl_cost(self, action):
        return self.ctrl_cost_weight * np.add.reduce(action * action, axis=1)


class PlanarVectorEnv(MJCFVectorEnv):
    """Hopper and Walker2d: planar robots on a slide x, slide z and hinge y root; v5's observation (positions
    but x, velocities clipped to ±10) and healthy-reward form."""

    height_coordinate = 1
    healthy_z_default = (0.0, np.inf)
    healthy_angle_default = (-np.inf, np.inf)
    healthy_state_default = (-np.inf, np.inf)

    def __init__(self, num_envs=1, max_episode_steps=1000, *, healthy_reward=1.0, terminate_when_unhealthy=True,
                 healthy_state_range=None, healthy_z_range=None, healthy_angle_range=None, **kwargs):
        self.healthy_reward = real_number(healthy_reward, "healthy_reward")
        self.terminate_when_unhealthy = bool(terminate_when_unhealthy)
        self.healthy_state_range = _range(healthy_state_range, self.healthy_state_default, "healthy_state_range")
        self.healthy_z_range = _range(healthy_z_range, self.healthy_z_default, "healthy_z_range")
        self.healthy_angle_range = _range(healthy_angle_range, self.healthy_angle_default, "healthy_angle_range")
        super().__init__(num_envs, max_episode_steps, **kwargs)

    def _obs_dim(self, body):
        return body.nq + body.nv - (1 if self.exclude_positions else 0)

    def reset_model(self, rng):
        s, body = self.reset_noise_scale, self.body
        q = self.init_qpos + rng.uniform(-s, s, body.nq)
        return self._lift(q), rng.uniform(-s, s, body.nv)

    def _get_obs(self, q, qd, kin):
        return np.concatenate([q[:, 1:] if self.exclude_positions else q, np.clip(qd, -10.0, 10.0)], axis=1)

    def healthy(self, q, qd):
        """(B,) bool: v5's is_healthy — qpos[2:] and qvel inside healthy_state_range, z = qpos[1] inside
        healthy_z_range, the torso angle qpos[2] inside healthy_angle_range (open intervals, as v5's)."""
        state = np.concatenate([q[:, 2:], qd], axis=1)
        lo, hi = self.healthy_state_range
        (zlo, zhi), (alo, ahi) = self.healthy_z_range, self.healthy_angle_range
        with np.errstate(invalid="ignore"):
            ok = ((state > lo) & (state < hi)).all(axis=1)
            return ok & (q[:, 1] > zlo) & (q[:, 1] < zhi) & (q[:, 2] > alo) & (q[:, 2] < ahi)

    def _summary(self, q, qd, kin):
        return {"q": q.copy(), "qd": qd.copy()}

    def _task_reward(self, before, after, action):
        vel, forward = self._forward(before, after)
        healthy = self.healthy(after["q"], after["qd"])
        survive = self.healthy_reward * healthy
        ctrl = -self._ctrl_cost(action)
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros(len(vel), dtype=bool)
        info = {"reward_forward": forward, "reward_ctrl": ctrl, "reward_survive": survive,
                **self._get_reset_info(after), "x_velocity": vel}
        return forward + survive + ctrl, terminated, info

    def _get_reset_info(self, summary):
        q = summary["q"]
        return {"x_position": q[:, 0].copy(), "z_distance_from_origin": q[:, 1] - self.init_qpos[1]}


def _range(value, default, name):
    if value is None:
        return default
    lo, hi = (real_number(x, name) for x in value)
    if not lo < hi:
        raise ValueError(f"{name} must be (low, high) with low < high, got {value!r}")
    return lo, hi


class HopperVectorEnv(PlanarVectorEnv):
    """## Description
    Gymnasium's Hopper (hopper.xml: torso, thigh, leg and foot in the x-z plane, 3 actuators with 200 N m gears)
    in PBAD, read from Gymnasium's own file by :func:`pbad_gym.model.from_mjcf`, with Hopper-v5's observation,
    reward, termination and reset. Physics: PBAD order 2 at ``dt`` = 0.001 s, ``frame_skip`` = 8 (Hopper-v5's
    0.008 s control interval); penalty ground contact with Coulomb friction capped by the step's own normal force
    (μ = 2, the foot's), penalty joint limits; the XML's armature and joint damping.

    ## Action space
    Box(-1, 1, (3,), float32): thigh, leg and foot torques, times 200 N m.

    ## Observation space
    Box(-f32max, f32max, (11,), float32): qpos[1:] (z, torso angle, three joint angles) and qvel clipped to ±10
    (x, z velocity, torso and joint angular velocities); ``exclude_current_positions_from_observation=False``
    prepends x (12). q = MuJoCo's qpos, joint for joint.

    ## Rewards
    As Hopper-v5: healthy_reward · is_healthy + forward_reward_weight · ẋ − ctrl_cost_weight · ‖a‖², ẋ of qpos[0]
    over the env step. info: reward_forward, reward_ctrl, reward_survive, x_position, z_distance_from_origin,
    x_velocity, cone_excess, iterations, converged, diverged, action_sanitised.

    ## Starting state
    MuJoCo's qpos0 (standing, foot 4 cm up) plus U(−s, s) on every coordinate and velocity,
    s = ``reset_noise_scale`` (5e-3); lifted if a contact sphere would start inside the floor.

    ## Episode end
    As Hopper-v5: unhealthy terminates (qpos[2:] or qvel outside healthy_state_range (−100, 100), z = qpos[1] not
    above 0.7 m, or the torso angle outside (−0.2, 0.2) rad); ``max_episode_steps`` (1000) or
    ``info["diverged"]`` truncates.

    ## Arguments
    :class:`MJCFVectorEnv`'s, and healthy_reward=1.0, terminate_when_unhealthy=True, healthy_state_range,
    healthy_z_range, healthy_angle_range (None: v5's).

    ## Version history
    v0: first version.
    """

    xml_name, control_interval = "hopper.xml", 0.008
    healthy_z_default, healthy_angle_default, healthy_state_default = (0.7, np.inf), (-0.2, 0.2), (-100.0, 100.0)


class Walker2dVectorEnv(PlanarVectorEnv):
    """## Description
    Gymnasium's Walker2d (walker2d_v5.xml: torso and two legs of thigh, leg and foot in the x-z plane, 6 actuators
    with 100 N m gears) in PBAD, read from Gymnasium's own file, with Walker2d-v5's observation, reward,
    termination and reset. Physics as :class:`HopperVectorEnv`'s (Δt 0.001 s, ``frame_skip`` 8: Walker2d-v5's
    0.008 s control interval; μ = 1.9, the left foot's).

    ## Action space
    Box(-1, 1, (6,), float32): right thigh, leg, foot, then left thigh, leg, foot torques, times 100 N m.

    ## Observation space
    Box(-f32max, f32max, (17,), float32): qpos[1:] and qvel clipped to ±10; with
    ``exclude_current_positions_from_observation=False`` x first (18).

    ## Rewards
    As Walker2d-v5: healthy_reward · is_healthy + forward_reward_weight · ẋ − ctrl_cost_weight · ‖a‖². info as
    :class:`HopperVectorEnv`'s.

    ## Starting state
    qpos0 plus U(−s, s) on every coordinate and velocity, s = 5e-3; lifted if a sphere would start in the floor.

    ## Episode end
    As Walker2d-v5: unhealthy (z = qpos[1] outside (0.8, 2.0) m or the torso angle outside (−1, 1) rad)
    terminates; ``max_episode_steps`` (1000) or ``info["diverged"]`` truncates.

    ## Arguments
    As :class:`HopperVectorEnv`.

    ## Version history
    v0: first version.
    """

    xml_name, control_interval = "walker2d_v5.xml", 0.008
    healthy_z_default, healthy_angle_default = (0.8, 2.0), (-1.0, 1.0)


class HalfCheetahVectorEnv(MJCFVectorEnv):
    """## Description
    Gymnasium's HalfCheetah (half_cheetah.xml: a torso and two legs of three links in the x-z plane, joint springs
    and damping, 6 actuators with 120/90/60 N m gears) in PBAD, read from Gymnasium's own file, with
    HalfCheetah-v5's observation, reward and reset. Physics: PBAD order 2 at ``dt`` = 0.001 s, ``frame_skip`` 50
    (HalfCheetah-v5's 0.05 s control interval); the XML's springs, armature and damping; contact as
    :class:`HopperVectorEnv`'s (μ = 0.4, the floor's and the geoms').

    ## Action space
    Box(-1, 1, (6,), float32): back thigh, shin, foot, front thigh, shin, foot torques, times the XML's gears.

    ## Observation space
    Box(-f32max, f32max, (17,), float32): qpos[1:] and qvel; with ``exclude_current_positions_from_observation=
    False`` x first (18).

    ## Rewards
    As HalfCheetah-v5: forward_reward_weight · ẋ − ctrl_cost_weight · ‖a‖² (ctrl_cost_weight 0.1). info:
    reward_forward, reward_ctrl, x_position, x_velocity, cone_excess, iterations, converged, diverged,
    action_sanitised.

    ## Starting state
    qpos0 plus U(−s, s), velocities s·N(0, 1), s = ``reset_noise_scale`` (0.1); lifted if a sphere would start in
    the floor.

    ## Episode end
    No termination (as HalfCheetah-v5); ``max_episode_steps`` (1000) or ``info["diverged"]`` truncates.

    ## Arguments
    :class:`MJCFVectorEnv`'s, with ctrl_cost_weight=0.1 and reset_noise_scale=0.1.

    ## Version history
    v0: first version.
    """

    xml_name, control_interval, height_coordinate = "half_cheetah.xml", 0.05, 1

    def __init__(self, num_envs=1, max_episode_steps=1000, *, ctrl_cost_weight=0.1, reset_noise_scale=0.1,
                 **kwargs):
        super().__init__(num_envs, max_episode_steps, ctrl_cost_weight=ctrl_cost_weight,
                         reset_noise_scale=reset_noise_scale, **kwargs)

    def _obs_dim(self, body):
        return body.nq + body.nv - (1 if self.exclude_positions else 0)

    def reset_model(self, rng):
        s, body = self.reset_noise_scale, self.body
        q = self.init_qpos + rng.uniform(-s, s, body.nq)
        return self._lift(q), s * rng.standard_normal(body.nv)

    def _get_obs(self, q, qd, kin):
        return np.concatenate([q[:, 1:] if self.exclude_positions else q, qd], axis=1)

    def _task_reward(self, before, after, action):
        vel, forward = self._forward(before, after)
        ctrl = -self._ctrl_cost(action)
        info = {"reward_forward": forward, "reward_ctrl": ctrl, "x_position": after["q"][:, 0].copy(),
                "x_velocity": vel}
        return forward + ctrl, np.zeros(len(vel), dtype=bool), info

    def _get_reset_info(self, summary):
        return {"x_position": summary["q"][:, 0].copy()}


class AntVectorEnv(MJCFVectorEnv):
    """## Description
    Gymnasium's Ant (ant.xml: a spherical torso on a free joint, four legs of hip and ankle hinges, 8 actuators
    with 150 N m gears) in PBAD, read from Gymnasium's own file, with Ant-v5's observation, reward, termination and
    reset. Spider-v3 is the same robot written in Python (equal mass matrix, tests/test_locomotion.py); this env
    takes its geometry from the XML: 25 contact spheres, the ends of every capsule and the torso. Physics: PBAD
    order 2 at ``dt`` = 0.001 s, ``frame_skip`` 50 (Ant-v5's 0.05 s control interval), contact as
    :class:`HopperVectorEnv`'s (μ = 1).

    ## Action space
    Box(-1, 1, (8,), float32): in ant.xml's actuator order (hip_4, ankle_4, hip_1, ankle_1, hip_2, ankle_2, hip_3,
    ankle_3), times 150 N m.

    ## Observation space
    Box(-f32max, f32max, (105,), float32): qpos[2:] (13), qvel (14) and the contact wrench on each of the 13
    bodies, clipped to ``contact_force_range`` (13 × 6: MuJoCo's cfrc_ext[1:], torque then force about the
    robot's centre of mass, world axes, from the engine's contact forces at the spheres' lowest points);
    ``include_cfrc_ext_in_observation=False`` drops them (27); ``exclude_current_positions_from_observation=
    False`` prepends x, y.

    ## Rewards
    As Ant-v5: healthy_reward · is_healthy + forward_reward_weight · ẋ − ctrl_cost_weight · ‖a‖² −
    contact_cost_weight · ‖clipped cfrc_ext‖², ẋ of the torso. info: reward_forward, reward_ctrl, reward_contact,
    reward_survive, x_position, y_position, distance_from_origin, x_velocity, y_velocity, cone_excess, iterations,
    converged, diverged, action_sanitised.

    ## Starting state
    qpos0 (torso 0.75 m up) plus U(−s, s) on every coordinate (the rotation as a rotation vector), velocities
    s·N(0, 1), s = 0.1; lifted if a sphere would start in the floor.

    ## Episode end
    As Ant-v5: a non-finite state or torso z outside ``healthy_z_range`` (0.2, 1.0) m terminates;
    ``max_episode_steps`` (1000) or ``info["diverged"]`` truncates.

    ## Arguments
    :class:`MJCFVectorEnv`'s with ctrl_cost_weight=0.5, reset_noise_scale=0.1; and healthy_reward=1.0,
    terminate_when_unhealthy=True, healthy_z_range=(0.2, 1.0), contact_cost_weight=5e-4,
    contact_force_range=(-1.0, 1.0), include_cfrc_ext_in_observation=True.

    ## Version history
    v0: first version.
    """

    xml_name, control_interval, height_coordinate = "ant.xml", 0.05, 2

    def __init__(self, num_envs=1, max_episode_steps=1000, *, ctrl_cost_weight=0.5, reset_noise_scale=0.1,
                 healthy_reward=1.0, terminate_when_unhealthy=True, healthy_z_range=(0.2, 1.0),
                 contact_cost_weight=5e-4, contact_force_range=(-1.0, 1.0), include_cfrc_ext_in_observation=True,
                 **kwargs):
        self.healthy_reward = real_number(healthy_reward, "healthy_reward")
        self.terminate_when_unhealthy = bool(terminate_when_unhealthy)
        self.healthy_z_range = _range(healthy_z_range, None, "healthy_z_range")
        self.contact_cost_weight = real_number(contact_cost_weight, "contact_cost_weight", nonnegative=True)
        self.contact_force_range = _range(contact_force_range, None, "contact_force_range")
        self.include_cfrc_ext = bool(include_cfrc_ext_in_observation)
        super().__init__(num_envs, max_episode_steps, ctrl_cost_weight=ctrl_cost_weight,
                         reset_noise_scale=reset_noise_scale, **kwargs)

    def _obs_dim(self, body):
        n_bodies = body.meta["n_mjcf_bodies"] - 1
        return body.nq + body.nv - (2 if self.exclude_positions else 0) + (6 * n_bodies if self.include_cfrc_ext
                                                                           else 0)

    def reset_model(self, rng):
        s, body = self.reset_noise_scale, self.body
        q = integrate(body, self.init_qpos[None], rng.uniform(-s, s, body.nv)[None])[0]
        return self._lift(q), s * rng.standard_normal(body.nv)

    def cfrc_ext(self):
        """Contact wrench on each MJCF body but the world (B, nbody − 1, 6): torque [N m] about the robot's
        centre of mass, then force [N], world axes (MuJoCo's cfrc_ext[1:]), from the ground forces the last
        step applied at the contact spheres' lowest points."""
        view = self._views()[1]
        meta = self.body.meta
        F = self.contact_forces()
        P = sphere_centres(self.body, view.kin).copy()
        P[..., 2] -= self.body.arrays(np, P.dtype).contact_r
        c = centre_of_mass(self.body, kin=view.kin)
        wrench = np.concatenate([cross(P - c[:, None], F), F], axis=-1)
        out = np.zeros((len(F), meta["n_mjcf_bodies"], 6))
        np.add.at(out, (slice(None), meta["contact_body"]), wrench)
        return out[:, 1:]

    def _clipped_cfrc_ext(self):
        return self.cfrc_ext().clip(*self.contact_force_range)

    def _get_obs(self, q, qd, kin):
        parts = [q[:, 2:] if self.exclude_positions else q, qd]
        if self.include_cfrc_ext:
            parts.append(self._clipped_cfrc_ext().reshape(len(q), -1))
        return np.concatenate(parts, axis=1)

    def healthy(self, q):
        """(B,) bool: finite state and torso z = qpos[2] inside healthy_z_range (closed, as Ant-v5's)."""
        lo, hi = self.healthy_z_range
        with np.errstate(invalid="ignore"):
            return np.isfinite(q).all(axis=1) & (q[:, 2] >= lo) & (q[:, 2] <= hi)

    def _task_reward(self, before, after, action):
        q = after["q"]
        vel = (q[:, :2] - before["q"][:, :2]) / self.dt
        forward = self.forward_reward_weight * vel[:, 0]
        healthy = self.healthy(q)
        survive = self.healthy_reward * healthy
        ctrl = -self._ctrl_cost(action)
        W = self._clipped_cfrc_ext()
        contact = -self.contact_cost_weight * np.add.reduce(W * W, axis=(1, 2))
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros(len(q), dtype=bool)
        info = {"reward_forward": forward, "reward_ctrl": ctrl, "reward_contact": contact,
                "reward_survive": survive, **self._get_reset_info(after), "x_velocity": vel[:, 0],
                "y_velocity": vel[:, 1]}
        return forward + survive + ctrl + contact, terminated, info

    def _get_reset_info(self, summary):
        q = summary["q"]
        return {"x_position": q[:, 0].copy(), "y_position": q[:, 1].copy(), "distance_from_origin": row_norm(q[:, :2])}


class HopperEnv(PBADEnv):
    __doc__ = "Single-environment form of :class:`HopperVectorEnv` (same arguments, no num_envs).\n\n" + (
        HopperVectorEnv.__doc__ or "")
    vector_cls = HopperVectorEnv


class Walker2dEnv(PBADEnv):
    __doc__ = "Single-environment form of :class:`Walker2dVectorEnv` (same arguments, no num_envs).\n\n" + (
        Walker2dVectorEnv.__doc__ or "")
    vector_cls = Walker2dVectorEnv


class HalfCheetahEnv(PBADEnv):
    __doc__ = "Single-environment form of :class:`HalfCheetahVectorEnv` (same arguments, no num_envs).\n\n" + (
        HalfCheetahVectorEnv.__doc__ or "")
    vector_cls = HalfCheetahVectorEnv


class AntEnv(PBADEnv):
    __doc__ = "Single-environment form of :class:`AntVectorEnv` (same arguments, no num_envs).\n\n" + (
        AntVectorEnv.__doc__ or "")
    vector_cls = AntVectorEnv
