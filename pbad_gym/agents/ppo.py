"""Proximal policy optimisation (PPO) on a Gymnasium vector env, in PyTorch.

CleanRL's ``ppo_continuous_action.py`` is the reference (one loop, named batch quantities, its diagnostics), with
three differences:

- **Bootstrapping at truncation.** An episode cut by a time limit or by ``info["diverged"]`` did not end in the
  task, so its last step's target is r + γ·V(final observation) (only ``terminated`` zeroes the bootstrap); see
  :func:`compute_gae`.
- **NEXT_STEP autoreset** (Gymnasium 1.x): the step after an episode ended only resets that sub-environment
  (reward 0, action ignored). The observation it starts from is the episode's final observation, so its value is
  the bootstrap of the truncated step, and the transition itself is masked out of the training batch.
- **Resumable bit for bit.** A checkpoint holds the networks, Adam, the observation and return statistics, the
  torch and NumPy RNG states, the counters and — when the vector env pickles, as PBAD's native ones do — the
  environments with the episodes in progress, so a run killed between checkpoints and resumed writes the same
  metrics as an uninterrupted one. The environments are reset (seed drawn from (run seed, iteration)) at the
  first iteration and, for an env that does not pickle (Gymnasium's SyncVectorEnv), at every checkpoint boundary
  (iterations that are multiples of ``checkpoint_every``): an episode still running there is cut, its
  transitions train (bootstrapped like any rollout end) but it is not counted as an episode in the metrics, so
  then num_steps × checkpoint_every should cover an episode.

Observations are normalised by running statistics and rewards scaled by the running std of the discounted return
(as Gymnasium's NormalizeObservation / NormalizeReward), both clipped. Actions are sampled from N(μ(o), σ),
clipped to the action space for the environment, and the unclipped sample is what the log-probability scores.

metrics.csv, one row per iteration, numbered from 1 (a row's ``iteration`` counts the iterations complete, as
CMA-ES's): ``return_*`` / ``distance_*`` are over the episodes that ended during that
iteration's rollout (return: the sum of the environment's raw rewards; distance: ``info["x_position"]`` at the
episode's last step minus after its first step, blank when the env reports no x_position); when none ended, the
previous iteration's values are carried. ``episodes`` counts the episodes that ended, ``terminated`` /
``diverged`` how many of them ended so. The CleanRL diagnostics follow (value_loss, policy_loss, entropy,
approx_kl, clipfrac, explained_variance) and ``sps`` (environment steps per second of the iteration).

**PPO-Lagrangian** (``ppo.cost_limit`` set; off by default) is the same loop with another objective: see
``agents.ppo_lagrangian``. The loop calls the objective's hooks (``ppo_core.RewardObjective``) at fixed points,
and plain PPO's do nothing.

The trainer is three functions of one screen each — :func:`collect_rollout`, :func:`update`, :func:`log_iteration`
— called by :func:`train` through :func:`_iteration`; :class:`Learner` holds what a checkpoint restores.
"""
from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from .episodes import EpisodeTracker, episode_summary, evaluate_policy
from .policies import PPOPolicy
from .ppo_core import RewardObjective, Rollout, compute_gae, csv_value, value_loss
from .ppo_lagrangian import Lagrangian
from .ppo_net import ActorCritic, actor_arrays
from .runio import MetricsLog, read_run_pickle, save_pickle
from .stats import RunningStats
from .trainenv import make_train_envs

METRICS = ["iteration", "env_steps", "wall_time", "return_best", "return_mean", "distance_best", "distance_mean",
           "episodes", "terminated", "diverged", "eval_return", "eval_distance", "eval_speed", "eval_terminated",
           "learning_rate",
           "value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "sps"]
EPISODE_METRICS = ("return_best", "return_mean", "distance_best", "distance_mean")
PLOT_EVERY = 20  # iterations between learning-curve redraws (a redraw costs about a second)


def selection_key(eval_return: float, terminated: float, max_terminated: float) -> tuple:
    """Rank of a deterministic evaluation for choosing the best policy (larger is better): evaluations whose
    share of episodes ended by termination (the Spider falling: unhealthy) is at most ``max_terminated`` rank
    above all others, and among them the higher return wins; the others rank by the lower terminated share, then
    the higher return. With ``max_terminated`` 1 this is the evaluation return alone."""
    if terminated <= max_terminated:
        return (1, 0.0, eval_return)
    return (0, -terminated, eval_return)


def _pickles(envs) -> bool:
    """Whether the vector env pickles (PBAD's native ones do; a SyncVectorEnv holds closures and does not)."""
    try:
        pickle.dumps(envs)
    except (pickle.PicklingError, TypeError, AttributeError):
        return False
    return True


def _iteration_seed(seed: int, iteration: int, stream: int = 0) -> int:
    return int(np.random.SeedSequence([seed, iteration, stream]).generate_state(1)[0] & 0x7FFFFFFF)


@dataclass
class Learner:
    """What learns and what a checkpoint restores besides the counters: the actor-critic, Adam, the observation
    statistics (obs_dim,) and the discounted-return statistics (scalar), on ``device``; ``p`` is the PPOConfig,
    ``low`` / ``high`` (act_dim,) the action bounds."""

    model: ActorCritic
    optimizer: torch.optim.Optimizer
    obs_rms: RunningStats
    ret_rms: RunningStats
    device: torch.device
    p: object
    low: np.ndarray
    high: np.ndarray

    def observe(self, o, update: bool) -> np.ndarray:
        """Observations (n, obs_dim) as the networks see them, float32: normalised (and the statistics updated
        first when ``update``) and clipped, or as they are without ``norm_obs``."""
        if not self.p.norm_obs:
            return np.asarray(o, np.float32)
        if update:
            self.obs_rms.update(o)
        return self.obs_rms.normalize(np.asarray(o, np.float32), self.p.clip_obs)

    def tensor(self, x, dtype=torch.float32):
        """``x`` as a tensor on the learner's device (float32: what the networks take)."""
        return torch.as_tensor(x, dtype=dtype, device=self.device)

    def policy(self) -> PPOPolicy:
        """The deterministic policy (the actor's mean) as it is now, torch-free, with a copy of the statistics."""
        p = self.p
        return PPOPolicy(actor_arrays(self.model), self.obs_rms.copy() if p.norm_obs else None, p.clip_obs,
                         self.low, self.high)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "obs_rms": self.obs_rms.state_dict(), "ret_rms": self.ret_rms.state_dict(),
                "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state()}

    def load_state_dict(self, ckpt: dict) -> None:
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.obs_rms = RunningStats.from_state_dict(ckpt["obs_rms"])
        self.ret_rms = RunningStats.from_state_dict(ckpt["ret_rms"])
        torch.set_rng_state(ckpt["torch_rng"])
        np.random.set_state(ckpt["numpy_rng"])


@dataclass
class Run:
    """One training run: its config, folder, vector env, learner, objective, resumable ``state`` (counters, the
    carried episode metrics, the best score; plus λ under PPO-Lagrangian), metrics log, the rollout buffers, and
    the rollout in progress (``obs`` (N, obs_dim), the episode ``tracker``, the discounted returns ``disc_return``
    (N,) and ``pending`` (N,) bool: the next step of that row is a NEXT_STEP reset step)."""

    cfg: object
    run_dir: Path
    envs: object
    learner: Learner
    objective: RewardObjective
    state: dict
    log: MetricsLog
    buffers: Rollout
    num_iterations: int
    persistent: bool  # the vector env pickles: the rollout in progress travels in the checkpoint
    obs: np.ndarray | None = None
    tracker: EpisodeTracker | None = None
    disc_return: np.ndarray | None = None
    pending: np.ndarray | None = None

    def carried(self) -> tuple:
        return self.envs, self.obs, self.tracker, self.disc_return, self.pending


def _open_run(cfg, run_dir: Path, resume: bool) -> tuple[Run, tuple | None]:
    """A fresh run, or one restored from ``run_dir/checkpoint.pkl``; with it the rollout in progress the
    checkpoint holds (None: none, start from a reset)."""
    p = cfg.ppo
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(p.torch_threads)
    N, T = cfg.env.num_envs, p.num_steps
    num_iterations = p.total_timesteps // (N * T)
    if num_iterations < 1:
        raise ValueError(f"ppo.total_timesteps ({p.total_timesteps}) must be at least env.num_envs × ppo.num_steps "
                         f"({N * T})")
    envs = make_train_envs(cfg, cfg.env, N)  # workers > 0: the rows stepped in lock step by Ray actors
    space, obs_space = envs.single_action_space, envs.single_observation_space
    if len(space.shape) != 1 or len(obs_space.shape) != 1 or space.dtype.kind != "f":
        raise ValueError(f"PPO needs flat Box observation and action spaces; {cfg.env.id} has {obs_space} and {space}")
    obs_dim, act_dim = obs_space.shape[0], space.shape[0]
    objective_cls = RewardObjective if p.cost_limit is None else Lagrangian
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    device = torch.device(cfg.device)
    model = ActorCritic(obs_dim, act_dim, p.hidden, p.init_log_std, cost_critic=objective_cls.cost_critic)
    model = model.to(device)
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=p.learning_rate, eps=1e-5),
                      RunningStats(obs_dim), RunningStats(()), device, p, space.low.astype(np.float64),
                      space.high.astype(np.float64))
    state = {"iteration": 0, "env_steps": 0, "wall_time": 0.0, "best_return": -np.inf,
             "carried": dict.fromkeys(EPISODE_METRICS)}
    # a missing or corrupt checkpoint is an error naming it (raised before any write), never a fresh start
    ckpt = read_run_pickle(run_dir / "checkpoint.pkl", "nothing to resume from: start a fresh run") if resume else None
    log = MetricsLog(run_dir / "metrics.csv", METRICS + objective_cls.metrics)
    if resume:
        learner.load_state_dict(ckpt)
        state = ckpt["state"]
    log.truncate_after(state["iteration"])
    run = Run(cfg, run_dir, envs, learner, objective_cls(p, state, T, N), state, log,
              Rollout.zeros(T, N, obs_dim, act_dim), num_iterations, _pickles(envs))
    carried = pickle.loads(ckpt["rollout"]) if resume and ckpt.get("rollout") is not None else None
    return run, carried


def _start_rollout(run: Run, it: int, first: bool, carried) -> None:
    """Continue the rollout in progress, take the one a checkpoint carried, or reset the environments (at the
    first iteration, and at checkpoint boundaries for an env that does not pickle)."""
    if carried is not None:
        run.envs.close()
        run.envs, run.obs, run.tracker, run.disc_return, run.pending = carried
    elif first or (not run.persistent and it % run.cfg.checkpoint_every == 0):
        n = run.cfg.env.num_envs
        run.obs, _ = run.envs.reset(seed=_iteration_seed(run.cfg.seed, it))
        run.tracker, run.disc_return, run.pending = EpisodeTracker(n), np.zeros(n), np.zeros(n, bool)


def collect_rollout(run: Run) -> list:
    """Step the environments ``num_steps`` times from the rollout in progress under the stochastic policy,
    filling ``run.buffers`` (and the objective's own), with the rewards scaled by the running std of the
    discounted return. Returns the training episodes that ended (``episodes.Episode``)."""
    L, p, buf, objective = run.learner, run.cfg.ppo, run.buffers, run.objective
    space = run.envs.single_action_space
    for t in range(p.num_steps):
        o = L.observe(run.obs, update=True)
        o_t = L.tensor(o)
        with torch.no_grad():
            action, logp, _, value = L.model.action_and_value(o_t)
        a = action.cpu().numpy()
        run.obs, reward, term, trunc, info = run.envs.step(np.clip(a, L.low, L.high).astype(space.dtype))
        reward, term = np.asarray(reward, np.float64), np.asarray(term, bool)
        ended, valid = term | np.asarray(trunc, bool), ~run.pending
        run.tracker.step(reward, term, ended, valid, info)
        with torch.no_grad():
            objective.record(L.model, o_t, t, term, valid, info)
        if p.norm_reward:
            run.disc_return = np.where(valid, p.gamma * run.disc_return + reward, run.disc_return)
            L.ret_rms.update(run.disc_return[valid])
            reward = np.clip(reward / L.ret_rms.std, -p.clip_reward, p.clip_reward)
        run.disc_return[ended] = 0.0
        buf.obs[t], buf.act[t], buf.logp[t], buf.val[t] = o, a, logp.cpu().numpy(), value.cpu().numpy()
        buf.rew[t], buf.term[t], buf.ended[t], buf.valid[t] = reward, term, ended, valid
        run.pending = ended
    return run.tracker.pop()


def _training_batch(run: Run, episodes) -> dict:
    """GAE over the rollout (the objective's too) and the batch of valid steps as flat tensors (n_batch, …)."""
    L, p, buf = run.learner, run.cfg.ppo, run.buffers
    with torch.no_grad():
        o_next = L.tensor(L.observe(run.obs, update=False))
        next_value = L.model.value(o_next).cpu().numpy()
        adv, ret = compute_gae(buf.rew, buf.val, next_value, buf.term, buf.ended, p.gamma, p.gae_lambda)
        run.objective.finish(L.model, o_next, buf, episodes, run.state)
    keep = buf.valid.reshape(-1)

    def take(x):
        return L.tensor(x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])[keep])

    run.objective.take_batch(take)
    return {"obs": take(buf.obs), "act": take(buf.act), "logp": take(buf.logp), "adv": take(adv),
            "ret": take(ret), "val": take(buf.val)}


def _minibatch_loss(L: Learner, objective, b: dict, mb) -> tuple:
    """PPO's clipped surrogate, entropy bonus and value loss on minibatch ``mb`` (the objective's terms added);
    returns (loss, its parts and diagnostics)."""
    p = L.p
    _, newlogp, entropy, newvalue = L.model.action_and_value(b["obs"][mb], b["act"][mb])
    logratio = newlogp - b["logp"][mb]
    ratio = logratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > p.clip_coef).float().mean().item()
    mb_adv = b["adv"][mb]
    if p.norm_adv:
        mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
    mb_adv = objective.advantage(mb_adv, mb)
    pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - p.clip_coef, 1 + p.clip_coef)).mean()
    v_loss = value_loss(newvalue, b["val"][mb], b["ret"][mb], p.clip_coef, p.clip_vloss)
    entropy_loss = entropy.mean()
    loss = pg_loss - p.ent_coef * entropy_loss + p.vf_coef * v_loss
    loss = objective.loss(loss, L.model, b["obs"], mb)
    return loss, {"value_loss": v_loss, "policy_loss": pg_loss, "entropy": entropy_loss, "approx_kl": approx_kl,
                  "clipfrac": clipfrac}


def update(run: Run, b: dict) -> dict:
    """``update_epochs`` epochs of Adam over shuffled minibatches of batch ``b`` (stopped early past
    ``target_kl``). Returns the last minibatch's losses and diagnostics, the mean clip fraction and the explained
    variance of the rollout's values."""
    L, p = run.learner, run.cfg.ppo
    clipfracs = []
    for _epoch in range(p.update_epochs):
        for mb in torch.tensor_split(torch.randperm(len(b["obs"])), p.num_minibatches):
            if len(mb) < 2:
                continue
            loss, stats = _minibatch_loss(L, run.objective, b, mb)
            clipfracs.append(stats["clipfrac"])
            L.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(L.model.parameters(), p.max_grad_norm)
            L.optimizer.step()
        if p.target_kl is not None and stats["approx_kl"] > p.target_kl:
            break
    y_pred, y_true = b["val"].cpu().numpy(), b["ret"].cpu().numpy()
    var_y = np.var(y_true)
    stats = {k: v.item() for k, v in stats.items() if k != "clipfrac"}
    return {**stats, "clipfrac": float(np.mean(clipfracs)),
            "explained_variance": np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y}


def log_iteration(run: Run, it: int, episodes, losses: dict, ev: dict, lr: float, dt: float) -> dict:
    """Advance the counters by iteration ``it`` (0-based) of ``dt`` seconds and append its metrics row (the
    carried episode metrics when no episode ended). Returns the row."""
    state, steps = run.state, run.cfg.env.num_envs * run.cfg.ppo.num_steps
    if episodes:
        state["carried"] = episode_summary(episodes)
    state["iteration"], state["env_steps"] = it + 1, state["env_steps"] + steps
    state["wall_time"] += dt
    row = {"iteration": it + 1, "env_steps": state["env_steps"], "wall_time": round(state["wall_time"], 3),
           **{k: csv_value(v) for k, v in state["carried"].items()},
           "episodes": len(episodes), "terminated": sum(e.terminated for e in episodes),
           "diverged": sum(e.diverged for e in episodes),
           **{f"eval_{k}": csv_value(ev[k]) for k in ("return", "distance", "speed", "terminated")},
           "learning_rate": lr, **{k: losses[k] for k in ("value_loss", "policy_loss", "entropy", "approx_kl")},
           "clipfrac": losses["clipfrac"], "explained_variance": csv_value(losses["explained_variance"]),
           "sps": round(steps / dt, 1), **run.objective.metrics_row()}
    run.log.append(row)
    return row


def _keep_best(run: Run, it: int, episodes, ev: dict, evaluated: bool) -> None:
    """Write best_policy.pkl when this iteration's score beats the best so far: the evaluation's
    (:func:`selection_key`) when the run evaluates, else the training return_mean."""
    p, state = run.cfg.ppo, run.state
    if p.eval_episodes > 0:
        score = ev["return"] if evaluated else None
        key = None if score is None else selection_key(score, ev["terminated"], p.select_max_terminated)
    else:
        score = state["carried"]["return_mean"] if episodes else None
        key = None if score is None else (score,)
    if key is not None and key > state.get("best_key", (state["best_return"],)):
        state["best_return"], state["best_key"] = score, key
        extra = {"eval_terminated": ev["terminated"], "eval_speed": ev["speed"]} if evaluated else {}
        save_pickle(run.run_dir / "best_policy.pkl", {**run.learner.policy().to_dict(), "env_id": run.cfg.env.id,
                                                      "iteration": it + 1, "score": score, **extra})


def _iteration(run: Run, it: int, first: bool, carried) -> dict:
    """One PPO iteration: rollout, update, evaluation, metrics row, best policy, checkpoint, curve."""
    t0 = time.perf_counter()
    p, last = run.cfg.ppo, it + 1 == run.num_iterations
    _start_rollout(run, it, first, carried)
    lr = p.learning_rate * (1.0 - it / run.num_iterations) if p.anneal_lr else p.learning_rate
    for group in run.learner.optimizer.param_groups:
        group["lr"] = lr
    episodes = collect_rollout(run)
    losses = update(run, _training_batch(run, episodes))
    ev = dict.fromkeys(("return", "distance", "speed", "terminated"))
    evaluated = p.eval_episodes > 0 and ((it + 1) % p.eval_every == 0 or last)
    if evaluated:
        ev = evaluate_policy(run.learner.policy(), run.cfg.env, p.eval_episodes,
                             _iteration_seed(run.cfg.seed, it, 1))
    row = log_iteration(run, it, episodes, losses, ev, lr, time.perf_counter() - t0)
    _keep_best(run, it, episodes, ev, evaluated)
    if (it + 1) % run.cfg.checkpoint_every == 0 or last:
        save_pickle(run.run_dir / "checkpoint.pkl", {
            **run.learner.state_dict(), "state": run.state,
            "rollout": pickle.dumps(run.carried()) if run.persistent else None})
    if (it + 1) % PLOT_EVERY == 0 or last:
        run.objective.plot(run.run_dir / "metrics.csv", run.run_dir / "learning_curve.png")
    return row


def train(cfg, run_dir, resume: bool = False, progress: bool = True) -> dict:
    """Train a PPO policy on ``cfg.env`` with ``cfg.ppo``; writes metrics.csv, checkpoint.pkl, best_policy.pkl
    (the deterministic policy of the iteration with the highest return_mean so far) and learning_curve.png into
    ``run_dir``. ``resume``: continue from ``run_dir/checkpoint.pkl`` (a missing or unreadable one raises
    ``runio.RunFileError`` before any file is touched). Returns the last metrics row (dict)."""
    run, carried = _open_run(cfg, Path(run_dir), resume)
    row = {}
    bar = None  # opened after the first iteration, so its rate and ETA never count a kernel compile
    first = run.state["iteration"]
    try:
        for it in range(first, run.num_iterations):
            row = _iteration(run, it, it == first, carried)
            carried = None
            if bar is None:
                bar = tqdm(total=run.num_iterations, initial=it + 1, disable=not progress, desc="ppo", unit="it")
            else:
                bar.update(1)
            bar.set_postfix(ret=row["return_mean"], **run.objective.postfix(row), sps=row["sps"])
    finally:
        if bar is not None:
            bar.close()
        run.envs.close()
    return row
