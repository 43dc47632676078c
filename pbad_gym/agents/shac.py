"""Short-horizon actor-critic (SHAC; Xu et al., ICLR 2022): first-order policy learning through the simulator.

Each iteration steps every row of a :class:`~pbad_gym.diff.DiffVecEnv` ``horizon`` times under the stochastic
actor a = tanh(μ(o) + σε) and back-propagates, through the physics (the step's adjoint), the loss

    −1/(N·h) Σ_rows [Σ_t γ^t r_t + γ^h V'(s_h)]

into the actor, with V' a target critic at the horizon's end (and at each episode's end inside it; zero after a
termination). The critic then fits TD(λ) targets of the horizon's states for ``critic_iterations`` epochs, and the
target follows it by Polyak averaging. Observations are normalised by running statistics; both learning rates
anneal linearly to 0. Rows whose step did not converge cut their gradient (counted in ``masked``).

metrics.csv, one row per iteration: return_* / distance_* over the training episodes that ended during it (carried
when none did), evaluation columns when ``shac.eval_episodes`` > 0, actor_loss, critic_loss, grad_norm (before
clipping), masked and sps. best_policy.pkl holds the deterministic actor tanh(μ(o)) (kind "shac", torch-free, read
by ``pbad-eval`` and ``agents.policies.load_policy``); checkpoint.pkl everything a resume needs (networks, Adam,
statistics, RNG states, the environments with their episodes in progress).
"""
from __future__ import annotations

import copy
import pickle
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..diff import DiffVecEnv
from .episodes import EpisodeTracker, episode_summary, evaluate_policy
from .policies import PPOPolicy
from .ppo import _iteration_seed, selection_key
from .ppo_core import csv_value
from .ppo_net import mlp
from .runio import MetricsLog, plot_learning_curve, read_run_pickle, save_pickle
from .stats import RunningStats

METRICS = ["iteration", "env_steps", "wall_time", "return_best", "return_mean", "distance_best", "distance_mean",
           "episodes", "eval_return", "eval_distance", "eval_speed", "eval_terminated", "actor_lr", "actor_loss",
           "critic_loss", "grad_norm", "masked", "sps"]
PLOT_EVERY = 10


class Learner:
    """Actor μ(o) with a state-independent log σ, critic V(o) and its target (float64, tanh MLPs), their Adam
    optimisers and the observation statistics."""

    def __init__(self, obs_dim, act_dim, p, low, high):
        self.p, self.low, self.high = p, low, high
        self.actor = mlp(obs_dim, p.hidden, act_dim, 0.01).double()
        self.log_std = torch.nn.Parameter(torch.full((act_dim,), p.init_log_std, dtype=torch.float64))
        self.critic = mlp(obs_dim, p.hidden, 1, 1.0).double()
        self.target = copy.deepcopy(self.critic)
        betas = (p.adam_beta1, p.adam_beta2)
        self.actor_opt = torch.optim.Adam(list(self.actor.parameters()) + [self.log_std], lr=p.actor_lr, betas=betas)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=p.critic_lr, betas=betas)
        self.obs_rms = RunningStats(obs_dim)

    def normalize(self, obs, update: bool):
        """Observations (n, obs_dim) as the networks see them: normalised (statistics updated first when
        ``update``) and clipped; differentiable in ``obs``."""
        if update:
            self.obs_rms.update(obs.detach().cpu().numpy())
        mean = torch.as_tensor(self.obs_rms.mean, dtype=obs.dtype)
        std = torch.as_tensor(self.obs_rms.std, dtype=obs.dtype)
        return torch.clamp((obs - mean) / std, -self.p.clip_obs, self.p.clip_obs)

    def sample(self, o):
        mu = self.actor(o)
        return torch.tanh(mu + self.log_std.exp() * torch.randn_like(mu))

    def value(self, o, target=True):
        return (self.target if target else self.critic)(o).squeeze(-1)

    def policy(self) -> PPOPolicy:
        layers = [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy())
                  for m in self.actor if isinstance(m, torch.nn.Linear)]
        return PPOPolicy(layers, self.obs_rms.copy(), self.p.clip_obs, self.low, self.high, squash=True)

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict(), "log_std": self.log_std.detach().clone(),
                "critic": self.critic.state_dict(), "target": self.target.state_dict(),
                "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "obs_rms": self.obs_rms.state_dict(), "torch_rng": torch.get_rng_state(),
                "numpy_rng": np.random.get_state()}

    def load_state_dict(self, d: dict) -> None:
        self.actor.load_state_dict(d["actor"])
        with torch.no_grad():
            self.log_std.copy_(d["log_std"])
        self.critic.load_state_dict(d["critic"])
        self.target.load_state_dict(d["target"])
        self.actor_opt.load_state_dict(d["actor_opt"])
        self.critic_opt.load_state_dict(d["critic_opt"])
        self.obs_rms = RunningStats.from_state_dict(d["obs_rms"])
        torch.set_rng_state(d["torch_rng"])
        np.random.set_state(d["numpy_rng"])


def horizon(L: Learner, env, obs, tracker, p):
    """Step ``p.horizon`` times from ``obs``; returns (the actor's loss (scalar tensor with the graph), the
    horizon's normalised observations (h, N, obs_dim), rewards (h, N), bootstrap values V'(s_{t+1}) (h, N) with
    each episode's own end, ended (h, N) bool, the last observation)."""
    N = obs.shape[0]
    acc, disc = torch.zeros(N, dtype=torch.float64), torch.ones(N, dtype=torch.float64)
    loss = torch.zeros((), dtype=torch.float64)
    O, R, V, E = [], [], [], []
    for _ in range(p.horizon):
        o = L.normalize(obs, update=True)
        obs, r, term, trunc, info = env.step(L.sample(o))
        acc, disc = acc + disc * r, disc * p.gamma
        ended = (term | trunc).numpy()
        tracker.step(r.detach().numpy(), term.numpy(), ended, np.ones(N, bool), info)
        v_next = L.value(L.normalize(obs, update=False))
        if ended.any():
            end = torch.as_tensor(ended)
            v_end = L.value(L.normalize(info["final_obs"], update=False)) * (~term).to(torch.float64)
            loss = loss + (acc + disc * v_end)[end].sum()
            acc, disc = torch.where(end, 0.0, acc), torch.where(end, 1.0, disc)
            v_next = torch.where(end, v_end, v_next)
        O.append(o.detach())
        R.append(r.detach())
        V.append(v_next.detach())
        E.append(torch.as_tensor(ended))
    loss = loss + (acc + disc * L.value(L.normalize(obs, update=False))).sum()
    return -loss / (N * p.horizon), torch.stack(O), torch.stack(R), torch.stack(V), torch.stack(E), obs.detach()


def td_lambda(R, V, E, gamma, lam):
    """TD(λ) targets (h, N) from rewards R, bootstrap values V = V'(s_{t+1}) and episode ends E (h, N); the
    recursion stops at each end and at the horizon."""
    out = torch.zeros_like(R)
    for t in reversed(range(len(R))):
        nxt = V[t] if t == len(R) - 1 else torch.where(E[t], V[t], (1 - lam) * V[t] + lam * out[t + 1])
        out[t] = R[t] + gamma * nxt
    return out


def fit_critic(L: Learner, O, targets, p) -> float:
    """``critic_iterations`` epochs of minibatch MSE on (O, targets); then the target critic's Polyak update.
    Returns the last epoch's mean loss."""
    O, y = O.reshape(-1, O.shape[-1]), targets.reshape(-1)
    for _ in range(p.critic_iterations):
        losses = []
        for mb in torch.tensor_split(torch.randperm(len(y)), p.critic_minibatches):
            loss = ((L.value(O[mb], target=False) - y[mb]) ** 2).mean()
            L.critic_opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(L.critic.parameters(), p.max_grad_norm)
            L.critic_opt.step()
            losses.append(loss.item())
    with torch.no_grad():
        for t, c in zip(L.target.parameters(), L.critic.parameters()):
            t.mul_(p.target_alpha).add_((1 - p.target_alpha) * c)
    return float(np.mean(losses))


def _open(cfg, run_dir: Path, resume: bool):
    p = cfg.shac
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(p.torch_threads)
    N = cfg.env.num_envs
    iterations = p.total_timesteps // (N * p.horizon)
    if iterations < 1:
        raise ValueError(f"shac.total_timesteps ({p.total_timesteps}) must be at least env.num_envs × shac.horizon "
                         f"({N * p.horizon})")
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    env = DiffVecEnv(cfg.env.id, N, **cfg.env.kwargs)
    space = env.single_action_space
    L = Learner(env.single_observation_space.shape[0], space.shape[0], p, space.low.astype(np.float64),
                space.high.astype(np.float64))
    state = {"iteration": 0, "env_steps": 0, "wall_time": 0.0, "best_key": None,
             "carried": dict.fromkeys(("return_best", "return_mean", "distance_best", "distance_mean"))}
    carried = None
    if resume:
        ckpt = read_run_pickle(run_dir / "checkpoint.pkl", "nothing to resume from: start a fresh run")
        L.load_state_dict(ckpt["learner"])
        state = ckpt["state"]
        carried = pickle.loads(ckpt["rollout"])
    else:
        carried = (env, env.reset(seed=_iteration_seed(cfg.seed, 0)), EpisodeTracker(N))
    log = MetricsLog(run_dir / "metrics.csv", METRICS)
    log.truncate_after(state["iteration"])
    return L, state, log, carried, iterations


def _log(state, log, it, episodes, ev, stats, steps, dt) -> dict:
    if episodes:
        state["carried"] = episode_summary(episodes)
    state["iteration"], state["env_steps"] = it + 1, state["env_steps"] + steps
    state["wall_time"] += dt
    row = {"iteration": it + 1, "env_steps": state["env_steps"], "wall_time": round(state["wall_time"], 3),
           **{k: csv_value(v) for k, v in state["carried"].items()}, "episodes": len(episodes),
           **{f"eval_{k}": csv_value(ev[k]) for k in ("return", "distance", "speed", "terminated")},
           **stats, "sps": round(steps / dt, 1)}
    log.append(row)
    return row


def _iteration(cfg, run_dir, L, state, log, carried, it, iterations) -> tuple[dict, tuple]:
    """One SHAC iteration: horizon, actor step, critic fit, evaluation, metrics row, best policy, checkpoint."""
    t0, p = time.perf_counter(), cfg.shac
    env, obs, tracker = carried
    frac = 1.0 - it / iterations if p.anneal_lr else 1.0
    for opt, lr in ((L.actor_opt, p.actor_lr), (L.critic_opt, p.critic_lr)):
        for group in opt.param_groups:
            group["lr"] = lr * frac
    env.detach()
    masked = env.info["masked"]
    loss, O, R, V, E, obs = horizon(L, env, obs, tracker, p)
    L.actor_opt.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(list(L.actor.parameters()) + [L.log_std], p.max_grad_norm)
    L.actor_opt.step()
    critic_loss = fit_critic(L, O, td_lambda(R, V, E, p.gamma, p.td_lambda), p)
    last = it + 1 == iterations
    ev = dict.fromkeys(("return", "distance", "speed", "terminated"))
    evaluated = p.eval_episodes > 0 and ((it + 1) % p.eval_every == 0 or last)
    if evaluated:
        ev = evaluate_policy(L.policy(), cfg.env, p.eval_episodes, _iteration_seed(cfg.seed, it, 1))
    stats = {"actor_lr": p.actor_lr * frac, "actor_loss": loss.item(), "critic_loss": critic_loss,
             "grad_norm": float(grad_norm), "masked": env.info["masked"] - masked}
    episodes = tracker.pop()
    row = _log(state, log, it, episodes, ev, stats, cfg.env.num_envs * p.horizon, time.perf_counter() - t0)
    score = ev["return"] if evaluated else (state["carried"]["return_mean"] if episodes else None)
    if p.eval_episodes > 0 and not evaluated:
        score = None
    key = None if score is None else selection_key(score, ev["terminated"] or 0.0, 1.0)
    # until a score exists (no evaluation yet, no training episode ended), the latest policy is the kept one
    if (key is not None and (state["best_key"] is None or key > state["best_key"])) or state["best_key"] is None:
        state["best_key"] = key
        save_pickle(run_dir / "best_policy.pkl", {**L.policy().to_dict(), "env_id": cfg.env.id,
                                                  "iteration": it + 1, "score": score})
    carried = (env, obs, tracker)
    if (it + 1) % cfg.checkpoint_every == 0 or last:
        save_pickle(run_dir / "checkpoint.pkl", {"learner": L.state_dict(), "state": state,
                                                 "rollout": pickle.dumps(carried)})
    if (it + 1) % PLOT_EVERY == 0 or last:
        plot_learning_curve(run_dir / "metrics.csv", run_dir / "learning_curve.png",
                            ys=("return_mean", "eval_return") if p.eval_episodes else ("return_mean",))
    return row, carried


def train(cfg, run_dir, resume: bool = False, progress: bool = True) -> dict:
    """Train a SHAC policy on ``cfg.env`` (an env :class:`~pbad_gym.diff.DiffVecEnv` covers) with ``cfg.shac``;
    writes metrics.csv, checkpoint.pkl, best_policy.pkl and learning_curve.png into ``run_dir``. Returns the last
    metrics row (dict)."""
    run_dir = Path(run_dir)
    L, state, log, carried, iterations = _open(cfg, run_dir, resume)
    row = {}
    first = state["iteration"]
    with tqdm(total=iterations, initial=first, disable=not progress, desc="shac", unit="it") as bar:
        for it in range(first, iterations):
            row, carried = _iteration(cfg, run_dir, L, state, log, carried, it, iterations)
            bar.update(1)
            bar.set_postfix(ret=row["return_mean"], sps=row["sps"])
    return row
