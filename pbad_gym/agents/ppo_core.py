"""What PPO (``agents.ppo``) and PPO-Lagrangian (``agents.ppo_lagrangian``) share: generalised advantage
estimation, the rollout buffers, the clipped value loss, and :class:`RewardObjective` — plain PPO's objective,
whose hooks are where PPO-Lagrangian adds its cost critic and multiplier (the trainer calls them unconditionally,
so the training loop has no branch per objective).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .runio import plot_learning_curve


def compute_gae(rewards, values, next_value, terminated, ended, gamma, gae_lambda):
    """Generalised advantage estimates and value targets of a rollout, with bootstrapping at truncation.

    rewards, values, terminated, ended: (T, N) — step t's reward, V(o_t), whether step t terminated the episode,
    whether it ended it (terminated or truncated); next_value: (N,) V(o_T). The observation after step t is
    o_{t+1} (under NEXT_STEP autoreset also when step t ended the episode: o_{t+1} is then its final observation),
    so δ_t = r_t + γ·V(o_{t+1})·(1 − terminated_t) − V(o_t): a truncated step keeps γ·V(final observation), and
    A_t = δ_t + γλ·(1 − ended_t)·A_{t+1} stops at every episode end. Returns (advantages, returns), (T, N)
    float64.
    """
    rewards, values = np.asarray(rewards, np.float64), np.asarray(values, np.float64)
    not_term = 1.0 - np.asarray(terminated, np.float64)
    not_ended = 1.0 - np.asarray(ended, np.float64)
    T = len(rewards)
    adv = np.zeros_like(values)
    last = np.zeros_like(values[0])
    for t in reversed(range(T)):
        next_v = np.asarray(next_value, np.float64) if t == T - 1 else values[t + 1]
        delta = rewards[t] + gamma * next_v * not_term[t] - values[t]
        last = delta + gamma * gae_lambda * not_ended[t] * last
        adv[t] = last
    return adv, adv + values


def csv_value(x):
    """A metrics.csv cell of a number that may be missing: blank for None / NaN / ±inf, else the float."""
    return "" if x is None or not np.isfinite(x) else float(x)


def value_loss(new, old, target, clip_coef: float, clip: bool):
    """0.5·mean squared error of a critic's ``new`` values (n,) against ``target`` (n,); with ``clip`` the
    pessimistic maximum with the error of ``old`` + (new − old) clipped to ±clip_coef, as in the PPO paper."""
    if clip:
        clipped = old + torch.clamp(new - old, -clip_coef, clip_coef)
        return 0.5 * torch.max((new - target) ** 2, (clipped - target) ** 2).mean()
    return 0.5 * ((new - target) ** 2).mean()


@dataclass
class Rollout:
    """The buffers of one rollout of T steps on N rows: obs (T, N, obs_dim) float32 (normalised, as the policy saw
    them), act (T, N, act_dim) float32 (unclipped samples), logp / val / rew (T, N) float64 (log-probability,
    V(o_t), the reward after scaling), term / ended / valid (T, N) bool (terminated, terminated or truncated, a
    step of an episode rather than a NEXT_STEP reset step)."""

    obs: np.ndarray
    act: np.ndarray
    logp: np.ndarray
    val: np.ndarray
    rew: np.ndarray
    term: np.ndarray
    ended: np.ndarray
    valid: np.ndarray

    @classmethod
    def zeros(cls, T: int, N: int, obs_dim: int, act_dim: int) -> "Rollout":
        f, b = (np.zeros((T, N)) for _ in range(3)), (np.zeros((T, N), bool) for _ in range(3))
        return cls(np.zeros((T, N, obs_dim), np.float32), np.zeros((T, N, act_dim), np.float32), *f, *b)


class RewardObjective:
    """Plain PPO: the environment's reward is the whole objective, and every hook below does nothing.

    The hooks, in the order the trainer calls them each iteration: :meth:`record` after every environment step,
    :meth:`finish` after the rollout, :meth:`take_batch` when the training batch is cut, :meth:`advantage` and
    :meth:`loss` for every minibatch, :meth:`metrics_row` and :meth:`postfix` when the iteration is logged."""

    metrics: list[str] = []  # metrics.csv columns after the common ones
    cost_critic = False  # whether the ActorCritic needs a cost critic
    plot = staticmethod(plot_learning_curve)

    def __init__(self, p, state: dict, T: int, N: int):
        self.p = p

    def record(self, model, o_t, t: int, term, valid, info) -> None:
        """Step t of the rollout: the policy saw ``o_t`` (tensor (N, obs_dim)); term / valid (N,) bool."""

    def finish(self, model, o_next, rollout: Rollout, episodes, state: dict) -> None:
        """The rollout is complete: ``o_next`` (tensor (N, obs_dim)) bootstraps its last step; ``episodes`` the
        training episodes that ended in it; ``state`` the run's resumable counters."""

    def take_batch(self, take) -> None:
        """Cut this objective's (T, N) arrays into the training batch with ``take`` ((T, N, …) → tensor)."""

    def advantage(self, mb_adv, mb):
        """The advantage (tensor) the policy ascends on minibatch ``mb`` (indices into the batch)."""
        return mb_adv

    def loss(self, loss, model, b_obs, mb):
        """The minibatch's total loss (tensor), given PPO's own (policy, entropy and value terms)."""
        return loss

    def metrics_row(self) -> dict:
        """This objective's columns of the iteration's metrics row."""
        return {}

    def postfix(self, row: dict) -> dict:
        """This objective's entries in the progress bar."""
        return {}
