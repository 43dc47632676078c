"""The differentiable form of a native vector env: torch observations and rewards as functions of the simulated
state, so that a policy's loss over a short horizon back-propagates through the physics into its parameters
(first-order policy learning, e.g. SHAC)."""
from __future__ import annotations

import numpy as np

from ..arrays import tree_map
from ..energies.contact import contact_state
from ..envs.spider import SpiderVectorEnv
from ..envs.swimmer import SwimmerVectorEnv
from ..kinematics import forward_kinematics
from .functions import StepSpec, functions, torch_module
from .rollout import check_simulator


def _swimmer_terms(env, fns, q_prev, q, q_next, action, contact, spec):
    """Swimmer (v0, v1): observation (q without x, y, z unless kept) ⊕ velocity; reward forward_reward_weight·ẋ_com
    − ctrl_cost_weight·‖a‖² (the env's own definitions, :class:`~pbad_gym.envs.swimmer.SwimmerVectorEnv`);
    terminated never; the centre of mass' x after the step (NumPy)."""
    torch = torch_module()
    body, dt = env.body, env.dt
    pos = q_next[:, 3:] if env.exclude_positions else q_next
    obs = torch.cat([pos, fns.velocity(q, q_next, body, env.sim.dt)], 1)
    x = fns.centre_of_mass(q_next, body)[:, 0]
    vel = (x - fns.centre_of_mass(q_prev, body)[:, 0]) / dt
    reward = env.forward_reward_weight * vel - env.ctrl_cost_weight * (action * action).sum(1)
    return obs, reward, torch.zeros_like(reward, dtype=torch.bool), x.detach().cpu().numpy()


def _spider_terms(env, fns, q_prev, q, q_next, action, contact, spec):
    """Spider (v1–v3): observation (q without x, y unless kept) ⊕ velocity ⊕ the clipped ground forces (when
    observed); reward healthy_reward·healthy + forward_reward_weight·ẋ_torso − ctrl_cost_weight·‖a‖² −
    contact_cost_weight·‖clip(F)‖²; terminated when unhealthy (and ``terminate_when_unhealthy``); the torso's x
    (NumPy). Health is a switch: no gradient. ``contact``: (q_k, its anchors or None) of the step that arrived at
    q_next (q_next itself and None right after a reset)."""
    torch = torch_module()
    pos = q_next[:, 2:] if env.exclude_positions else q_next
    parts = [pos, fns.velocity(q, q_next, env.body, env.sim.dt)]
    cost = 0.0
    if env.include_contact or env.contact_cost_weight != 0:
        F = torch.clamp(fns.contact_forces(q_next, contact[0], contact[1], spec), *env.contact_force_range)
        if env.include_contact:
            parts.append(F.reshape(len(q_next), -1))
        cost = env.contact_cost_weight * (F * F).sum((1, 2))
    obs = torch.cat(parts, 1)
    healthy = torch.as_tensor(env.healthy(q_next.detach().cpu().numpy()))
    vel = (q_next[:, 0] - q_prev[:, 0]) / env.dt
    reward = (env.healthy_reward * healthy.to(q_next.dtype) + env.forward_reward_weight * vel
              - env.ctrl_cost_weight * (action * action).sum(1) - cost)
    terminated = ~healthy if env.terminate_when_unhealthy else torch.zeros_like(healthy)
    return obs, reward, terminated, q_next[:, 0].detach().cpu().numpy()


TERMS = {SwimmerVectorEnv: _swimmer_terms, SpiderVectorEnv: _spider_terms}


class DiffVecEnv:
    """A native pbad_gym vector env (``gymnasium.make_vec(env_id, num_envs, vectorization_mode=
    "vector_entry_point", **kwargs)``) stepped in torch: :meth:`step` takes actions (B, n_act) and returns
    observations (B, obs_dim) and rewards (B,) that are differentiable functions of the actions and of the state
    carried since the last :meth:`detach` (float64 unless ``dtype``). Resets use the env's own reset
    distribution and seeding; episodes are truncated at the env's ``max_episode_steps``; ``info["final_obs"]``
    holds the last observation of the rows that ended (differentiable), as Gymnasium's autoreset does. A row
    whose physics fails (a solver that does not converge, a non-finite state) is truncated with
    ``info["diverged"]``, keeps its last observation, earns 0 and passes no gradient, as the native env's guard.
    Environments covered: the Swimmer (v0, v1) and the Spider (v1–v3 with penalty contact; its observed and costed
    ground forces are differentiated too); the contact memory's stick anchors are carried and differentiated
    along the rollout.
    """

    def __init__(self, env_id, num_envs=1, *, dtype=None, nonconverged="mask", **kwargs):
        import gymnasium

        torch = torch_module()
        try:
            self.env = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                                          **kwargs).unwrapped
        except gymnasium.error.Error as exc:
            raise ValueError(f"DiffVecEnv needs a native pbad_gym vector env ({[c.__name__ for c in TERMS]}); "
                             f"{env_id!r}: {exc}") from None
        covered = next((f for cls, f in TERMS.items() if isinstance(self.env, cls)), None)
        if covered is None:
            raise ValueError(f"DiffVecEnv covers {[c.__name__ for c in TERMS]}; {env_id!r} is a "
                             f"{type(self.env).__name__}")
        self.terms = covered
        check_simulator(self.env.sim)
        self.num_envs, self.dtype = num_envs, dtype or torch.float64
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space
        self.info = {"masked": 0}
        self.spec = StepSpec.of(self.env.sim, nonconverged, self.info)
        self.max_episode_steps = self.env.max_episode_steps
        self._fns = functions()
        self._gear = torch.as_tensor(self.env.gear, dtype=self.dtype)
        self._cols = torch.as_tensor(self.env.actuated)
        self.q = self.q_prev = self.anchor = None

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_fns"]  # autograd Functions of a closure: rebuilt on load
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._fns = functions()

    def _reset_rows(self, mask, seed=None):
        """Reset states (q, q_prev) (n, nq) numpy of the masked rows, drawn by the env."""
        self.env.reset(seed=seed, options=None if mask.all() else {"reset_mask": mask})
        st = self.env.sim.state
        return np.asarray(st.q)[mask], np.asarray(st.q_prev)[mask]

    def reset(self, seed=None):
        """Reset every row; returns observations (B, obs_dim)."""
        torch = torch_module()
        q, q_prev = self._reset_rows(np.ones(self.num_envs, dtype=bool), seed)
        self.q, self.q_prev = torch.as_tensor(q, dtype=self.dtype), torch.as_tensor(q_prev, dtype=self.dtype)
        self.anchor = None  # a fresh contact memory: every anchor at its sphere's centre
        self.spec.newton = None  # (as the native env's reset state)
        self.elapsed = np.zeros(self.num_envs, dtype=int)
        obs, _, _, x = self.terms(self.env, self._fns, self.q_prev, self.q_prev, self.q, self._zero_action(),
                                  (self.q, None), self.spec)
        self._last_obs, self._last_x = obs.detach(), x
        return obs

    def _zero_action(self):
        torch = torch_module()
        return torch.zeros((self.num_envs, len(self.env.actuated)), dtype=self.dtype)

    def detach(self):
        """Cut the graph: the carried state becomes a constant (SHAC's horizon boundary)."""
        self.q, self.q_prev = self.q.detach(), self.q_prev.detach()
        self.anchor = None if self.anchor is None else self.anchor.detach()

    def _fresh_memory(self, rows, q):
        """Replace the contact memory of ``rows`` (B,) bool by that of configurations q (n, nq) just reset."""
        env = self.env
        fresh = contact_state(env.body, forward_kinematics(env.body, q), env.sim.forces.contact, env.sim.dt)
        mem = self.spec.memory
        self.spec.memory = tree_map(lambda a, b: _set_rows(a, rows, b), mem, fresh)

    def step(self, action):
        """One env step (frame_skip physics steps) under actions (B, n_act) in [-1, 1] (clipped): (obs, reward,
        terminated, truncated, info) with obs and reward torch tensors carrying the graph."""
        torch = torch_module()
        a = torch.clamp(action.to(self.dtype), -1.0, 1.0)
        tau = torch.zeros((self.num_envs, self.env.body.nv), dtype=self.dtype)
        tau = tau.index_copy(1, self._cols, a * self._gear)
        q_start, q_prev, q = self.q, self.q_prev, self.q
        anchor, self.spec.failed = self.anchor, None
        for t in range(self.env.frame_skip):
            contact = (q, anchor)  # what the ground forces of the last step are a function of
            q_next, anchor = self._fns.step(q_prev, q, anchor, tau, self.spec, t)
            q_prev, q = q, q_next
        self.anchor = anchor
        obs, reward, terminated, x = self.terms(self.env, self._fns, q_start, q_prev, q, a, contact, self.spec)
        diverged = self._diverged(obs, reward)
        self.q_prev, self.q = q_prev, q
        self.elapsed += 1
        truncated = torch.as_tensor(self.elapsed >= self.max_episode_steps)
        if diverged.any():  # as the native env: the row keeps its last observation, earns 0 and is truncated
            dv = torch.as_tensor(diverged)
            obs = torch.where(dv[:, None], self._last_obs, obs)
            reward = torch.where(dv, torch.zeros_like(reward), reward)
            terminated, truncated = terminated & ~dv, truncated | dv
            x = np.where(diverged, self._last_x, x)
        info = {"x_position": x, "diverged": diverged}
        done = (terminated | truncated).numpy()
        if done.any():
            info["final_obs"], info["done"] = obs, done
            qr, qpr = self._reset_rows(done)
            rows = torch.as_tensor(np.nonzero(done)[0])
            self.q = self.q.index_copy(0, rows, torch.as_tensor(qr, dtype=self.dtype))
            self.q_prev = self.q_prev.index_copy(0, rows, torch.as_tensor(qpr, dtype=self.dtype))
            if self.anchor is not None:  # the reset rows start a fresh contact memory
                self._fresh_memory(done, qr)
                self.anchor = self.anchor.index_copy(0, rows, torch.as_tensor(self.spec.memory.anchor[done],
                                                                              dtype=self.dtype))
            if self.spec.newton is not None:
                self.spec.newton = self.spec.newton.forget(done)
            self.elapsed[done] = 0
            fresh = self.terms(self.env, self._fns, self.q_prev, self.q_prev, self.q, self._zero_action(),
                               (self.q, None), self.spec)[0]
            obs = torch.where(torch.as_tensor(done)[:, None], fresh, obs)
        self._last_obs, self._last_x = obs.detach(), x
        return obs, reward, terminated, truncated, info

    def _diverged(self, obs, reward):
        """(B,) bool: rows whose physics failed in this env step (a solver that did not converge, non-finite
        state, observation or reward)."""
        failed = np.zeros(self.num_envs, bool) if self.spec.failed is None else self.spec.failed
        return (failed | ~np.isfinite(obs.detach().cpu().numpy()).all(1)
                | ~np.isfinite(reward.detach().cpu().numpy()))


def _set_rows(a, rows, b):
    out = np.array(a, copy=True)
    out[rows] = b
    return out
