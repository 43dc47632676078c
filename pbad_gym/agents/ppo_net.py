"""PPO's networks in PyTorch: a Gaussian actor with a state-independent log-std and a separate critic.

Imported only by the PPO trainer (torch is the optional ``rl`` extra). Initialisation as CleanRL's continuous PPO:
orthogonal weights with gain √2, the actor's last layer gain 0.01 (actions start near 0 with the log-std's spread)
and the critic's 1.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions.normal import Normal


def _layer(n_in, n_out, gain):
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def mlp(n_in, hidden, n_out, out_gain):
    """tanh MLP n_in → hidden... → n_out (an nn.Sequential of Linear and Tanh)."""
    layers, width = [], n_in
    for h in hidden:
        layers += [_layer(width, h, np.sqrt(2.0)), nn.Tanh()]
        width = h
    layers.append(_layer(width, n_out, out_gain))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Actor mean μ(o) (n, act_dim), log-std (act_dim,), critic V(o) (n,), on normalised observations (n, obs_dim).

    ``cost_critic``: also a cost critic V_c(o) (n,) of the same shape (PPO-Lagrangian), built after the other
    networks so that the actor and critic start from the same weights with or without it."""

    def __init__(self, obs_dim: int, act_dim: int, hidden=(64, 64), init_log_std: float = 0.0,
                 cost_critic: bool = False):
        super().__init__()
        self.critic = mlp(obs_dim, hidden, 1, 1.0)
        self.actor_mean = mlp(obs_dim, hidden, act_dim, 0.01)
        self.actor_logstd = nn.Parameter(torch.full((act_dim,), float(init_log_std)))
        self.cost_critic = mlp(obs_dim, hidden, 1, 1.0) if cost_critic else None

    def value(self, obs):
        return self.critic(obs).squeeze(-1)

    def cost_value(self, obs):
        """V_c(o) (n,) of the cost critic (only when built with ``cost_critic=True``)."""
        return self.cost_critic(obs).squeeze(-1)

    def action_and_value(self, obs, action=None):
        """Sample an action (n, act_dim) when ``action`` is None; returns (action, log-prob (n,), entropy (n,),
        value (n,))."""
        mean = self.actor_mean(obs)
        dist = Normal(mean, torch.exp(self.actor_logstd).expand_as(mean))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(-1), dist.entropy().sum(-1), self.value(obs)


def actor_arrays(model: ActorCritic) -> list[tuple[np.ndarray, np.ndarray]]:
    """The actor-mean MLP as [(W (n_out, n_in), b (n_out,)), ...] float64 NumPy arrays (for a torch-free policy)."""
    return [(m.weight.detach().cpu().numpy().astype(np.float64), m.bias.detach().cpu().numpy().astype(np.float64))
            for m in model.actor_mean if isinstance(m, nn.Linear)]
