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

**PPO-Lagrangian** (``ppo.cost_limit`` set; off by default): a constrained objective on the share of episodes that
end by termination (the Spider falling: unhealthy) — maximise the return subject to P(terminated) ≤ cost_limit,
keeping the environment's reward (what metrics.csv reports) unchanged. The step that terminates an episode costs
1 (truncations, time limits and ``info["diverged"]`` cost 0), so an episode's cost is 1 when it falls and 0
otherwise and its expectation is the fall rate. A cost critic V_c learns the discounted cost (its own GAE,
bootstrapped like the reward's), and the policy ascends (A_r − λ·A_c)/(1 + λ) (Ray, Achiam & Amodei 2019,
"Benchmarking Safe Exploration in Deep RL"). With ``norm_adv`` A_r is normalised per minibatch as usual and A_c
over the whole rollout (a minibatch may hold no step near a fall), so λ weighs the two in like units: λ = 1 is an
even trade. (With A_c only centred, as first tried, λ rising to 18 still let the Spider's fall rate grow with its speed,
see BENCHMARKS.md.)
After each rollout, before the update, the multiplier follows dual ascent on the rollout's measured fall rate
(terminated / ended among the training episodes that ended in it): λ ← max(0, λ + lagrangian_lr·(fall rate −
cost_limit)); no episode ended, no step. λ and the cost critic travel in the checkpoint (resume stays exact);
metrics.csv gains ``fall_rate``, ``lagrange_multiplier`` (the λ of that iteration's update) and
``cost_value_loss``, and the learning curve a second panel with them.
"""
from __future__ import annotations

import pickle
import time
from pathlib import Path

import numpy as np

from .episodes import EpisodeTracker, evaluate_policy
from .policies import PPOPolicy
from .runio import MetricsLog, plot_learning_curve, read_run_pickle, save_pickle
from .stats import RunningStats
from .trainenv import make_train_envs

METRICS = ["iteration", "env_steps", "wall_time", "return_best", "return_mean", "distance_best", "distance_mean",
           "episodes", "terminated", "diverged", "eval_return", "eval_distance", "eval_speed", "eval_terminated",
           "learning_rate",
           "value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "sps"]
LAGRANGIAN_METRICS = ["fall_rate", "lagrange_multiplier", "cost_value_loss"]
EPISODE_METRICS = ("return_best", "return_mean", "distance_best", "distance_mean")
PLOT_EVERY = 20  # iterations between learning-curve redraws (a redraw costs about a second)


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


def episode_cost(terminated, valid, diverged):
    """PPO-Lagrangian's cost of a step, (n,) float64: 1 where a valid step ended its episode by termination (the
    Spider falling: unhealthy), 0 elsewhere — truncations (time limit, ``info["diverged"]``) and the reset steps
    of NEXT_STEP autoreset (``valid`` False) cost nothing."""
    return (np.asarray(terminated, bool) & np.asarray(valid, bool) & ~np.asarray(diverged, bool)).astype(np.float64)


def lagrangian_step(lam: float, fall_rate, cost_limit: float, lr: float) -> float:
    """One dual-ascent step of the Lagrange multiplier: max(0, λ + lr·(fall_rate − cost_limit)); λ unchanged
    when ``fall_rate`` is None (no episode ended)."""
    if fall_rate is None:
        return float(lam)
    return max(0.0, float(lam) + lr * (float(fall_rate) - cost_limit))


def plot_constrained_curve(csv_path, png_path) -> Path:
    """The learning curve of a PPO-Lagrangian run: returns (training mean and deterministic evaluation) above,
    the training fall rate, the evaluation's unhealthy share and λ below, against env steps."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .runio import _png_bytes, atomic_write_bytes

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))

    def col(y):
        pts = [(float(r["env_steps"]), float(r[y])) for r in rows if r.get(y) not in (None, "")]
        return [q[0] for q in pts], [q[1] for q in pts]

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ax.plot(*col("return_mean"), label="training return (mean)")
    ax.plot(*col("eval_return"), "o-", ms=3, label="eval return (deterministic)")
    ax.set_ylabel("return")
    xs, fr = col("fall_rate")
    if fr:  # the per-iteration rate is noisy: a running mean over 10 iterations
        k = min(10, len(fr))
        bx.plot(xs[k - 1:], np.convolve(fr, np.ones(k) / k, "valid"), label="training fall rate (10-it. mean)")
    bx.plot(*col("eval_terminated"), "o-", ms=3, label="eval unhealthy share")
    bx.set_ylabel("share of episodes")
    bx.set_ylim(-0.03, 1.03)
    bx.set_xlabel("env_steps")
    cx = bx.twinx()
    cx.plot(*col("lagrange_multiplier"), color="k", lw=1, label="λ")
    cx.set_ylabel("λ")
    for a in (ax, bx):
        a.grid(alpha=0.3)
    ax.legend(fontsize=8)
    h1, l1 = bx.get_legend_handles_labels()
    h2, l2 = cx.get_legend_handles_labels()
    bx.legend(h1 + h2, l1 + l2, fontsize=8)
    fig.tight_layout()
    data = _png_bytes(fig)
    plt.close(fig)
    return atomic_write_bytes(png_path, data)


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


def _fmt(x):
    return "" if x is None or not np.isfinite(x) else float(x)


def train(cfg, run_dir, resume: bool = False, progress: bool = True) -> dict:
    """Train a PPO policy on ``cfg.env`` with ``cfg.ppo``; writes metrics.csv, checkpoint.pkl, best_policy.pkl
    (the deterministic policy of the iteration with the highest return_mean so far) and learning_curve.png into
    ``run_dir``. ``resume``: continue from ``run_dir/checkpoint.pkl`` (a missing or unreadable one raises
    ``runio.RunFileError`` before any file is touched). Returns the last metrics row (dict)."""
    import torch
    from tqdm import tqdm

    from .ppo_net import ActorCritic, actor_arrays

    p = cfg.ppo
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(p.torch_threads)
    device = torch.device(cfg.device)
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
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)

    constrained = p.cost_limit is not None  # PPO-Lagrangian
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    model = ActorCritic(obs_dim, act_dim, p.hidden, p.init_log_std, cost_critic=constrained).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=p.learning_rate, eps=1e-5)
    obs_rms, ret_rms = RunningStats(obs_dim), RunningStats(())
    state = {"iteration": 0, "env_steps": 0, "wall_time": 0.0, "best_return": -np.inf,
             "carried": dict.fromkeys(EPISODE_METRICS)}
    if constrained:
        state["lagrange_multiplier"] = p.lagrangian_init
    # a missing or corrupt checkpoint is an error naming it (raised before any write), never a fresh start
    ckpt = read_run_pickle(run_dir / "checkpoint.pkl", "nothing to resume from: start a fresh run") if resume else None
    log = MetricsLog(run_dir / "metrics.csv", METRICS + LAGRANGIAN_METRICS if constrained else METRICS)
    if resume:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        obs_rms = RunningStats.from_state_dict(ckpt["obs_rms"])
        ret_rms = RunningStats.from_state_dict(ckpt["ret_rms"])
        torch.set_rng_state(ckpt["torch_rng"])
        np.random.set_state(ckpt["numpy_rng"])
        state = ckpt["state"]
    log.truncate_after(state["iteration"])
    # the rollout in progress (env state included) when the env pickles, else None: reset at checkpoint boundaries
    carried_rollout = pickle.loads(ckpt["rollout"]) if resume and ckpt.get("rollout") is not None else None
    persistent = _pickles(envs)

    def policy_now():
        return PPOPolicy(actor_arrays(model), obs_rms.copy() if p.norm_obs else None, p.clip_obs, low, high)

    def observe(o, update):
        if not p.norm_obs:
            return np.asarray(o, np.float32)
        if update:
            obs_rms.update(o)
        return obs_rms.normalize(np.asarray(o, np.float32), p.clip_obs)

    buf_obs = np.zeros((T, N, obs_dim), np.float32)
    buf_act = np.zeros((T, N, act_dim), np.float32)
    buf_logp, buf_val, buf_rew, buf_cost, buf_cval = (np.zeros((T, N)) for _ in range(5))
    buf_term, buf_ended, buf_valid = (np.zeros((T, N), bool) for _ in range(3))
    row = {}
    bar = None  # opened after the first iteration, so its rate and ETA never count a kernel compile
    first = state["iteration"]
    try:
        for it in range(first, num_iterations):
            t0 = time.perf_counter()
            if carried_rollout is not None:
                envs.close()
                envs, obs, tracker, disc_return, pending = carried_rollout
                carried_rollout = None
            elif it == first or (not persistent and it % cfg.checkpoint_every == 0):
                obs, _ = envs.reset(seed=_iteration_seed(cfg.seed, it))
                tracker, disc_return, pending = EpisodeTracker(N), np.zeros(N), np.zeros(N, bool)
            lr = p.learning_rate * (1.0 - it / num_iterations) if p.anneal_lr else p.learning_rate
            for group in optimizer.param_groups:
                group["lr"] = lr

            for t in range(T):
                o = observe(obs, update=True)
                with torch.no_grad():
                    o_t = torch.as_tensor(o, device=device)
                    action, logp, _, value = model.action_and_value(o_t)
                    if constrained:
                        buf_cval[t] = model.cost_value(o_t).cpu().numpy()
                a = action.cpu().numpy()
                obs, reward, term, trunc, info = envs.step(np.clip(a, low, high).astype(space.dtype))
                reward, term = np.asarray(reward, np.float64), np.asarray(term, bool)
                ended, valid = term | np.asarray(trunc, bool), ~pending
                tracker.step(reward, term, ended, valid, info)
                if constrained:
                    buf_cost[t] = episode_cost(term, valid, info.get("diverged", np.zeros(N, bool)))
                if p.norm_reward:
                    disc_return = np.where(valid, p.gamma * disc_return + reward, disc_return)
                    ret_rms.update(disc_return[valid])
                    reward = np.clip(reward / ret_rms.std, -p.clip_reward, p.clip_reward)
                disc_return[ended] = 0.0
                buf_obs[t], buf_act[t], buf_logp[t], buf_val[t] = o, a, logp.cpu().numpy(), value.cpu().numpy()
                buf_rew[t], buf_term[t], buf_ended[t], buf_valid[t] = reward, term, ended, valid
                pending = ended
            with torch.no_grad():
                o_t = torch.as_tensor(observe(obs, update=False), device=device)
                next_value = model.value(o_t).cpu().numpy()
                next_cval = model.cost_value(o_t).cpu().numpy() if constrained else None
            adv, ret = compute_gae(buf_rew, buf_val, next_value, buf_term, buf_ended, p.gamma, p.gae_lambda)
            episodes = tracker.pop()
            fall_rate = lam = None
            if constrained:
                adv_c, ret_c = compute_gae(buf_cost, buf_cval, next_cval, buf_term, buf_ended, p.gamma,
                                           p.gae_lambda)
                fall_rate = sum(e.terminated for e in episodes) / len(episodes) if episodes else None
                lam = state["lagrange_multiplier"] = lagrangian_step(state["lagrange_multiplier"], fall_rate,
                                                                     p.cost_limit, p.lagrangian_lr)

            keep = buf_valid.reshape(-1)

            def batch(x, dtype=torch.float32):
                return torch.as_tensor(x.reshape((T * N,) + x.shape[2:])[keep], dtype=dtype, device=device)

            b_obs, b_act, b_logp, b_adv, b_ret, b_val = (batch(x) for x in (buf_obs, buf_act, buf_logp, adv, ret,
                                                                             buf_val))
            if constrained:
                b_adv_c, b_ret_c, b_cval = (batch(x) for x in (adv_c, ret_c, buf_cval))
                if p.norm_adv:  # over the whole batch: a minibatch may hold no step near a fall
                    b_adv_c = (b_adv_c - b_adv_c.mean()) / (b_adv_c.std() + 1e-8)
            n_batch = len(b_obs)
            clipfracs = []
            for _epoch in range(p.update_epochs):
                for mb in torch.tensor_split(torch.randperm(n_batch), p.num_minibatches):
                    if len(mb) < 2:
                        continue
                    _, newlogp, entropy, newvalue = model.action_and_value(b_obs[mb], b_act[mb])
                    logratio = newlogp - b_logp[mb]
                    ratio = logratio.exp()
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs.append(((ratio - 1.0).abs() > p.clip_coef).float().mean().item())
                    mb_adv = b_adv[mb]
                    if p.norm_adv:
                        mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                    if constrained:
                        mb_adv = (mb_adv - lam * b_adv_c[mb]) / (1.0 + lam)
                    pg_loss = torch.max(-mb_adv * ratio,
                                        -mb_adv * torch.clamp(ratio, 1 - p.clip_coef, 1 + p.clip_coef)).mean()
                    if p.clip_vloss:
                        v_clipped = b_val[mb] + torch.clamp(newvalue - b_val[mb], -p.clip_coef, p.clip_coef)
                        v_loss = 0.5 * torch.max((newvalue - b_ret[mb]) ** 2, (v_clipped - b_ret[mb]) ** 2).mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_ret[mb]) ** 2).mean()
                    entropy_loss = entropy.mean()
                    loss = pg_loss - p.ent_coef * entropy_loss + p.vf_coef * v_loss
                    if constrained:
                        new_cval = model.cost_value(b_obs[mb])
                        if p.clip_vloss:
                            c_clipped = b_cval[mb] + torch.clamp(new_cval - b_cval[mb], -p.clip_coef, p.clip_coef)
                            vc_loss = 0.5 * torch.max((new_cval - b_ret_c[mb]) ** 2,
                                                      (c_clipped - b_ret_c[mb]) ** 2).mean()
                        else:
                            vc_loss = 0.5 * ((new_cval - b_ret_c[mb]) ** 2).mean()
                        loss = loss + p.vf_coef * vc_loss
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), p.max_grad_norm)
                    optimizer.step()
                if p.target_kl is not None and approx_kl > p.target_kl:
                    break
            y_pred, y_true = b_val.cpu().numpy(), b_ret.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            if episodes:
                rets, dists = np.array([e.ret for e in episodes]), np.array([e.distance for e in episodes])
                carried = {"return_best": rets.max(), "return_mean": rets.mean(),
                           "distance_best": None if np.isnan(dists).all() else np.nanmax(dists),
                           "distance_mean": None if np.isnan(dists).all() else np.nanmean(dists)}
                state["carried"] = carried
            ev = dict.fromkeys(("return", "distance", "speed", "terminated"))
            evaluated = p.eval_episodes > 0 and ((it + 1) % p.eval_every == 0 or it + 1 == num_iterations)
            if evaluated:
                ev = evaluate_policy(policy_now(), cfg.env, p.eval_episodes, _iteration_seed(cfg.seed, it, 1))
            dt = time.perf_counter() - t0
            state["iteration"], state["env_steps"] = it + 1, state["env_steps"] + T * N
            state["wall_time"] += dt
            row = {"iteration": it + 1, "env_steps": state["env_steps"], "wall_time": round(state["wall_time"], 3),
                   **{k: _fmt(v) for k, v in state["carried"].items()},
                   "episodes": len(episodes), "terminated": sum(e.terminated for e in episodes),
                   "diverged": sum(e.diverged for e in episodes), "eval_return": _fmt(ev["return"]),
                   "eval_distance": _fmt(ev["distance"]), "eval_speed": _fmt(ev["speed"]),
                   "eval_terminated": _fmt(ev["terminated"]),
                   "learning_rate": lr, "value_loss": v_loss.item(),
                   "policy_loss": pg_loss.item(), "entropy": entropy_loss.item(), "approx_kl": approx_kl.item(),
                   "clipfrac": float(np.mean(clipfracs)), "explained_variance": _fmt(explained_var),
                   "sps": round(T * N / dt, 1)}
            if constrained:
                row.update(fall_rate=_fmt(fall_rate), lagrange_multiplier=lam, cost_value_loss=vc_loss.item())
            log.append(row)
            if p.eval_episodes > 0:
                score = ev["return"] if evaluated else None
                key = None if score is None else selection_key(score, ev["terminated"], p.select_max_terminated)
            else:
                score = carried["return_mean"] if episodes else None
                key = None if score is None else (score,)
            best_key = state.get("best_key", (state["best_return"],))
            if key is not None and key > best_key:
                state["best_return"], state["best_key"] = score, key
                extra = {"eval_terminated": ev["terminated"], "eval_speed": ev["speed"]} if evaluated else {}
                save_pickle(run_dir / "best_policy.pkl", {**policy_now().to_dict(), "env_id": cfg.env.id,
                                                          "iteration": it + 1, "score": score, **extra})
            if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == num_iterations:
                save_pickle(run_dir / "checkpoint.pkl", {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "obs_rms": obs_rms.state_dict(), "ret_rms": ret_rms.state_dict(),
                    "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state(), "state": state,
                    "rollout": pickle.dumps((envs, obs, tracker, disc_return, pending)) if persistent else None})
            if (it + 1) % PLOT_EVERY == 0 or it + 1 == num_iterations:
                plot = plot_constrained_curve if constrained else plot_learning_curve
                plot(run_dir / "metrics.csv", run_dir / "learning_curve.png")
            if bar is None:
                bar = tqdm(total=num_iterations, initial=it + 1, disable=not progress, desc="ppo", unit="it")
            else:
                bar.update(1)
            if constrained:
                bar.set_postfix(ret=row["return_mean"], fall=row["fall_rate"], lam=round(lam, 4), sps=row["sps"])
            else:
                bar.set_postfix(ret=row["return_mean"], sps=row["sps"])
    finally:
        if bar is not None:
            bar.close()
        envs.close()
    return row
