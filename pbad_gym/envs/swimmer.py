"""Swimmer: a four-link 3-D swimmer in a viscous fluid (the PBAD paper's swimmer benchmark)."""
from __future__ import annotations

import numpy as np

from ..arrays import real_number
from ..kinematics import integrate
from ..model.robots import swimmer
from .base import PBADEnv, PBADVectorEnv, check_reset_noise_scale, row_norm
from .render import with_render_fps


class SwimmerVectorEnv(PBADVectorEnv):
    """## Description
    A chain of four capsules (1 m long, radius 0.1 m, 35.6 kg each) floats without gravity in a fluid with
    anisotropic drag (the PBAD paper's swimmer: a free base and three hinges about the body's vertical axis,
    6 + 3 = 9 DOF). Undulating the hinges pushes the fluid sideways; the goal is to swim along +x, as fast as
    possible. The head (base link) leads, the chain trails along −x at rest. Physics: PBAD order 2, Δt = 0.05 s.

    ## Action space
    Box(-1, 1, (3,), float32): torques on the three hinges, head to tail, scaled by ``gear`` [N m] (clipped).

    ## Observation space
    Box(-f32max, f32max, (16,), float32) — base orientation quaternion (w, x, y, z) (4), hinge angles (3) [rad],
    base linear velocity (3, world) [m/s], base angular velocity (3, body frame) [rad/s], hinge velocities (3)
    [rad/s]. With ``exclude_current_positions_from_observation=False`` the base position (3) comes first (19).

    ## Rewards
    reward = reward_forward + reward_ctrl with reward_forward = forward_reward_weight · ẋ_com (x velocity of the
    centre of mass over the step) and reward_ctrl = −ctrl_cost_weight · ‖a‖².

    ## Starting state
    At rest in the straight pose with every coordinate perturbed by U(−s, s), s = ``reset_noise_scale``
    (positions, hinge angles, base rotation vector) and every velocity by U(−s, s); s is at most 1 (rad: up to
    57° on every joint already, no longer a perturbation of the pose beyond it).

    ## Episode end
    No termination. Truncation after ``max_episode_steps`` (1000) steps, or early with ``info["diverged"]``
    when the state becomes non-finite or the solver fails ``max_unconverged_steps`` consecutive steps.

    ## Arguments
    num_envs=1, max_episode_steps=1000, forward_reward_weight=1.0, ctrl_cost_weight=1e-4 (>= 0),
    reset_noise_scale=0.1 (in [0, 1]), exclude_current_positions_from_observation=True, gear=30.0 [N m],
    drag=(0.1, 10.0) (axial, normal) [1/s],
    dt=0.05 [s], order=2, optimizer="lm", max_iter=None (the optimiser's default: 50 for LM, 500 for L-BFGS),
    tol=1e-7 [rad], contact_model="penalty"
    (no contact here), lcp_method="pgs", device="cpu", dtype=np.float64, render_mode=None | "rgb_array",
    nonfinite_action="raise" | "zero", max_unconverged_steps=10, render_width=320, render_height=240,
    render_num_envs=4.

    info (per sub-environment): reward_forward, reward_ctrl, x_position, y_position, distance_from_origin,
    x_velocity, y_velocity (centre of mass), iterations, converged, diverged, action_sanitised.

    ## Version history
    v0: first version (4 links, 9 DOF, anisotropic drag, centre-of-mass forward reward).
    """

    # measured (8 rows, 60 steps of random actions, LM): max_iter=1 truncates 40 rows as diverged, 2 none
    min_max_iter = 2

    def __init__(self, num_envs=1, max_episode_steps=1000, *, forward_reward_weight=1.0, ctrl_cost_weight=1e-4,
                 reset_noise_scale=0.1, exclude_current_positions_from_observation=True, gear=30.0,
                 drag=(0.1, 10.0), dt=0.05, **kwargs):
        self.forward_reward_weight = real_number(forward_reward_weight, "forward_reward_weight")
        self.ctrl_cost_weight = real_number(ctrl_cost_weight, "ctrl_cost_weight", nonnegative=True)
        self.reset_noise_scale = check_reset_noise_scale(reset_noise_scale)
        self.exclude_positions = bool(exclude_current_positions_from_observation)
        self.gear_value, self.drag = gear, drag
        self.obs_dim = 16 if self.exclude_positions else 19
        if kwargs.get("contact_model", "penalty") != "penalty":
            raise ValueError("the Swimmer has no ground contact: contact_model must stay 'penalty' (unused)")
        super().__init__(num_envs, max_episode_steps, dt=dt, **kwargs)

    def _build_body(self):
        return swimmer()

    def _sim_options(self):
        return {"gravity": (0.0, 0.0, 0.0), "drag": self.drag}

    def reset_model(self, rng):
        s, body = self.reset_noise_scale, self.body
        dq = rng.uniform(-s, s, body.nv)
        q = integrate(body, body.q0()[None], dq[None])[0]
        qd = rng.uniform(-s, s, body.nv)
        return q, qd

    def _get_obs(self, q, qd, kin):
        parts = [q[:, 3:]] if self.exclude_positions else [q]
        return np.concatenate(parts + [qd], axis=1)

    def _get_rew(self, before, after, action):
        vel = (after["com"] - before["com"]) / self.dt
        forward = self.forward_reward_weight * vel[:, 0]
        ctrl = -self.ctrl_cost_weight * np.add.reduce(action * action, axis=1)  # np.sum's own reduction
        com = after["com"]
        info = {"reward_forward": forward, "reward_ctrl": ctrl, "x_position": com[:, 0].copy(),
                "y_position": com[:, 1].copy(), "distance_from_origin": row_norm(com[:, :2]),
                "x_velocity": vel[:, 0], "y_velocity": vel[:, 1]}
        return forward + ctrl, np.zeros(len(forward), dtype=bool), info


class SwimmerEnv(PBADEnv):
    __doc__ = "Single-environment form of :class:`SwimmerVectorEnv` (same arguments, no num_envs).\n\n" + (
        SwimmerVectorEnv.__doc__ or "")
    vector_cls = SwimmerVectorEnv


class SwimmerV1VectorEnv(SwimmerVectorEnv):
    """## Description
    Swimmer-v1: the Swimmer of v0 (four capsules 1 m long, radius 0.1 m, 35.6 kg each, free base + three hinges
    about the vertical axis, 9 DOF, no gravity, anisotropic drag) with Swimmer-v5's hinge ranges: ±100° enforced
    by a one-sided quadratic limit penalty, so a policy cannot wind the joints through full turns or pass the
    links through each other. The goal is to swim along +x. Physics: PBAD order 2, Δt = 0.05 s.

    ## Action space
    Box(-1, 1, (3,), float32): torques on the three hinges, head to tail, scaled by ``gear`` [N m] (clipped).

    ## Observation space
    Box(-f32max, f32max, (16,), float32) — base orientation quaternion (w, x, y, z) (4), hinge angles (3) [rad],
    base linear velocity (3, world) [m/s], base angular velocity (3, body frame) [rad/s], hinge velocities (3)
    [rad/s]. With ``exclude_current_positions_from_observation=False`` the base position (3) comes first (19).

    ## Rewards
    reward = reward_forward + reward_ctrl with reward_forward = forward_reward_weight · ẋ_com (x velocity of the
    centre of mass over the step) and reward_ctrl = −ctrl_cost_weight · ‖a‖².

    ## Starting state
    At rest in the straight pose with every coordinate perturbed by U(−s, s), s = ``reset_noise_scale``
    (positions, hinge angles, base rotation vector) and every velocity by U(−s, s); s is at most 1 (rad: up to
    57° on every joint already, no longer a perturbation of the pose beyond it).

    ## Episode end
    No termination. Truncation after ``max_episode_steps`` (1000) steps, or early with ``info["diverged"]``.

    ## Arguments
    num_envs=1, max_episode_steps=1000, joint_range=np.deg2rad(100) [rad] (symmetric hinge range; None: no
    range), limit_stiffness=3000.0 [N m/rad] (0: limits off), forward_reward_weight=1.0, ctrl_cost_weight=1e-4
    (>= 0), reset_noise_scale=0.1 (in [0, 1]), exclude_current_positions_from_observation=True, gear=30.0 [N m],
    drag=(0.1, 10.0) (axial, normal) [1/s], dt=0.05 [s], order=2, optimizer="lm", max_iter=None (the
    optimiser's default: 50 for LM, 500 for L-BFGS), tol=None [rad] (per dtype: 1e-7 in float64, 1e-5 in
    float32), device="cpu", dtype=np.float64, backend=None ("numba" on CPU when it imports, else "numpy"),
    render_mode=None | "rgb_array", nonfinite_action="raise" | "zero", max_unconverged_steps=10,
    divergence_safety=3, render_width=320, render_height=240, render_num_envs=4, autoreset_mode=NEXT_STEP
    (| SAME_STEP | DISABLED: :class:`~pbad_gym.envs.base.PBADVectorEnv`).

    info (per sub-environment): reward_forward, reward_ctrl, x_position and y_position (of the centre of mass:
    Swimmer-v5 reports the head's), distance_from_origin, x_velocity, y_velocity (centre of mass), iterations,
    converged, diverged, action_sanitised.

    ## Version history
    v1: hinge ranges ±100° (Swimmer-v5's) with a limit penalty of 3000 N m/rad by default.
    v0: first version (4 links, 9 DOF, anisotropic drag, centre-of-mass forward reward, no hinge ranges).
    """

    def __init__(self, num_envs=1, max_episode_steps=1000, *, joint_range=float(np.deg2rad(100.0)),
                 limit_stiffness=3000.0, **kwargs):
        if joint_range is not None and not (np.isfinite(joint_range) and 0 < joint_range <= np.pi):
            raise ValueError(f"joint_range must be None or a half-range in (0, pi] rad, got {joint_range!r}")
        if not (np.isfinite(limit_stiffness) and limit_stiffness >= 0):
            raise ValueError(f"limit_stiffness must be a non-negative number of N m/rad, got {limit_stiffness!r}")
        self.joint_range, self.limit_stiffness = joint_range, float(limit_stiffness)
        super().__init__(num_envs, max_episode_steps, **kwargs)
        self.metadata = with_render_fps(self.metadata, self.dt)

    def _build_body(self):
        return swimmer(joint_range=self.joint_range)

    def _sim_options(self):
        limits = self.limit_stiffness if self.joint_range is not None else 0.0
        return super()._sim_options() | {"limit_stiffness": limits}


class SwimmerV1Env(PBADEnv):
    __doc__ = "Single-environment form of :class:`SwimmerV1VectorEnv` (same arguments, no num_envs).\n\n" + (
        SwimmerV1VectorEnv.__doc__ or "")
    vector_cls = SwimmerV1VectorEnv
