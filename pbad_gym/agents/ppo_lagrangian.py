"""PPO-Lagrangian (``ppo.cost_limit`` set; off by default): PPO on a constrained objective.

The constraint is on the share of episodes that end by termination (the Spider falling: unhealthy) — maximise the
return subject to P(terminated) ≤ cost_limit, keeping the environment's reward (what metrics.csv reports)
unchanged. The step that terminates an episode costs 1 (truncations, time limits and ``info["diverged"]`` cost 0),
so an episode's cost is 1 when it falls and 0 otherwise and its expectation is the fall rate. A cost critic V_c
learns the discounted cost (its own GAE, bootstrapped like the reward's), and the policy ascends
(A_r − λ·A_c)/(1 + λ) (Ray, Achiam & Amodei 2019, "Benchmarking Safe Exploration in Deep RL"). With ``norm_adv``
A_r is normalised per minibatch as usual and A_c over the whole rollout (a minibatch may hold no step near a fall),
so λ weighs the two in like units: λ = 1 is an even trade. (With A_c only centred, as first tried, λ rising to 18
still let the Spider's fall rate grow with its speed, see BENCHMARKS.md.)

After each rollout, before the update, the multiplier follows dual ascent on the rollout's measured fall rate
(terminated / ended among the training episodes that ended in it): λ ← max(0, λ + lagrangian_lr·(fall rate −
cost_limit)); no episode ended, no step. λ (``state["lagrange_multiplier"]``) and the cost critic travel in the
checkpoint (resume stays exact); metrics.csv gains ``fall_rate``, ``lagrange_multiplier`` (the λ of that
iteration's update) and ``cost_value_loss``, and the learning curve a second panel with them.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from .ppo_core import RewardObjective, Rollout, compute_gae, csv_value, value_loss
from .runio import _png_bytes, atomic_write_bytes

METRICS = ["fall_rate", "lagrange_multiplier", "cost_value_loss"]


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
    import matplotlib  # a second or so to import: only when a curve is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


class Lagrangian(RewardObjective):
    """PPO-Lagrangian's hooks into the PPO trainer (see the module docstring and :class:`RewardObjective`).

    ``state`` is the run's resumable dict: a fresh run's gets ``lagrange_multiplier`` = ``p.lagrangian_init``."""

    metrics = METRICS
    cost_critic = True
    plot = staticmethod(plot_constrained_curve)

    def __init__(self, p, state: dict, T: int, N: int):
        super().__init__(p, state, T, N)
        state.setdefault("lagrange_multiplier", p.lagrangian_init)
        self.cost, self.cval = np.zeros((T, N)), np.zeros((T, N))  # per step: cost, V_c(o_t)
        self.fall_rate = self.lam = self.cost_loss = None

    def record(self, model, o_t, t, term, valid, info):
        self.cval[t] = model.cost_value(o_t).cpu().numpy()
        self.cost[t] = episode_cost(term, valid, info.get("diverged", np.zeros(len(term), bool)))

    def finish(self, model, o_next, rollout: Rollout, episodes, state):
        next_cval = model.cost_value(o_next).cpu().numpy()
        self.adv, self.ret = compute_gae(self.cost, self.cval, next_cval, rollout.term, rollout.ended,
                                         self.p.gamma, self.p.gae_lambda)
        self.fall_rate = sum(e.terminated for e in episodes) / len(episodes) if episodes else None
        self.lam = state["lagrange_multiplier"] = lagrangian_step(state["lagrange_multiplier"], self.fall_rate,
                                                                  self.p.cost_limit, self.p.lagrangian_lr)

    def take_batch(self, take):
        self.b_adv, self.b_ret, self.b_cval = take(self.adv), take(self.ret), take(self.cval)
        if self.p.norm_adv:  # over the whole batch: a minibatch may hold no step near a fall
            self.b_adv = (self.b_adv - self.b_adv.mean()) / (self.b_adv.std() + 1e-8)

    def advantage(self, mb_adv, mb):
        return (mb_adv - self.lam * self.b_adv[mb]) / (1.0 + self.lam)

    def loss(self, loss, model, b_obs, mb):
        new_cval = model.cost_value(b_obs[mb])
        self.cost_loss = value_loss(new_cval, self.b_cval[mb], self.b_ret[mb], self.p.clip_coef, self.p.clip_vloss)
        return loss + self.p.vf_coef * self.cost_loss

    def metrics_row(self):
        return {"fall_rate": csv_value(self.fall_rate), "lagrange_multiplier": self.lam,
                "cost_value_loss": self.cost_loss.item()}

    def postfix(self, row):
        return {"fall": row["fall_rate"], "lam": round(self.lam, 4)}
