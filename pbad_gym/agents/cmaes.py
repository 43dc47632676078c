"""CMA-ES trainer on pycma's ask/tell interface (the searcher) over :func:`rollout.evaluate` (the evaluator).

Each iteration asks pycma for ``popsize`` parameter vectors, evaluates them as the rows of one vector env (all
candidates of an iteration share the same ``episodes_per_candidate`` reset seeds, drawn from the run seed and the
iteration number), tells pycma the negated returns (pycma minimises) with an explicit worst fitness for diverged
candidates (pycma would substitute the median for NaN), and then merges the observations seen into the running
normalisation statistics (as OpenAI-ES / ARS do: fixed statistics within an iteration).

Run folder: metrics.csv (one row per iteration, numbered from 1 as PPO's: a row's ``iteration`` counts the
iterations complete), checkpoint.pkl (``es.pickle_dumps()``, NumPy's global RNG state —
pycma samples from it —, the reset-seed base, the observation statistics, iteration, best so far, counters;
written atomically), best_policy.pkl (the best candidate so far with the statistics it was evaluated with),
learning_curve.png. pycma writes no files: ``verb_log=0`` and no signals file.

With ``workers > 0`` the candidates are evaluated in slices on Ray actors (``agents/distributed.py``); the reset
seeds are per row as above and the slices merge in one fixed order, so metrics.csv is the same as with 0 workers.
"""
from __future__ import annotations

import dataclasses
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import TrainConfig
from .policies import FlatPolicy, PolicySpec
from .rollout import action_bounds, env_dt, evaluate
from .runio import MetricsLog, plot_learning_curve, read_run_pickle, save_pickle
from .stats import RunningStats
from .trainenv import make_train_envs

PLOT_EVERY = 10  # iterations between learning-curve redraws (a redraw costs about as much as a short iteration)
FIELDS = ["iteration", "env_steps", "wall_time", "return_best", "return_mean", "distance_best", "distance_mean",
          "return_best_so_far", "sigma", "diverged", "sps"]


def penalised_fitness(returns, diverged) -> np.ndarray:
    """pycma fitness (to minimise) of candidates with ``returns`` (C,) and ``diverged`` (C,) bool: −return, and
    for diverged candidates an explicit worst value, 1 + the fitness spread above the worst non-diverged one
    (0 when every candidate diverged), so a diverged candidate ranks below every other."""
    fitness = -np.asarray(returns, dtype=np.float64)
    diverged = np.asarray(diverged, dtype=bool) | ~np.isfinite(fitness)
    ok = fitness[~diverged]
    worst = float(ok.max() + 1.0 + (ok.max() - ok.min())) if ok.size else 0.0
    return np.where(diverged, worst, fitness)


def _new_es(n_params, cfg: TrainConfig):
    import cma

    opts = {"popsize": cfg.cmaes.popsize, "seed": cfg.seed + 1,  # pycma treats seed 0 as "seed from the clock"
            "verb_log": 0, "verb_disp": 0, "verbose": -9, "signals_filename": "",
            "maxiter": np.inf, "tolfun": 0, "tolx": 0, "tolflatfitness": np.inf, "tolfunhist": 0,
            "tolstagnation": np.inf}
    return cma.CMAEvolutionStrategy(np.zeros(n_params), cfg.cmaes.sigma0, opts)


def with_episode_steps(env_cfg, steps):
    """``env_cfg`` whose environment's time limit is ``steps`` (unless its kwargs set max_episode_steps)."""
    return dataclasses.replace(env_cfg, kwargs={"max_episode_steps": steps, **env_cfg.kwargs})


def _seed_base(seed: int) -> int:
    return int(np.random.SeedSequence(seed).generate_state(1)[0] >> 1)


@dataclass
class Search:
    """What a CMA-ES checkpoint restores besides NumPy's generator: pycma's strategy ``es``, the observation
    statistics, the reset-seed base, the best candidate so far (``{"return", "iteration", "policy"}``) and the
    counters (env steps, wall-clock seconds)."""

    es: object
    stats: RunningStats
    seed_base: int
    best: dict
    env_steps: int = 0
    wall: float = 0.0

    def state_dict(self, it: int) -> dict:
        """The checkpoint after iteration ``it`` (0-based)."""
        # pickle.dumps, not pycma's es.pickle_dumps(): its bare ``except:`` turns a Ctrl-C arriving mid-pickle into an
        # AttributeError (it retries without an objective_function that ask/tell never sets), so the run would exit
        # 1 instead of 130 with its resume command
        return {"es": pickle.dumps(self.es), "np_random": np.random.get_state(), "seed_base": self.seed_base,
                "obs_stats": self.stats.state_dict(), "iteration": it, "best": self.best,
                "env_steps": self.env_steps, "wall_time": self.wall}


def _open_search(cfg: TrainConfig, spec: PolicySpec, run_dir: Path, resume: bool) -> tuple[Search, MetricsLog, int]:
    """A fresh search or the checkpoint's, the metrics log truncated to match, and the first iteration to run."""
    # never a silent fresh start over the run's files: a missing checkpoint is an error, raised before any write
    ck = read_run_pickle(run_dir / "checkpoint.pkl", "nothing to resume from: start a fresh run") if resume else None
    log = MetricsLog(run_dir / "metrics.csv", FIELDS)
    if resume:
        es = pickle.loads(ck["es"])
        np.random.set_state(ck["np_random"])
        search = Search(es, RunningStats.from_state_dict(ck["obs_stats"]), ck["seed_base"], ck["best"],
                        ck["env_steps"], ck["wall_time"])
        log.truncate_after(ck["iteration"] + 1)  # the checkpoint counts from 0, the rows from 1
        return search, log, ck["iteration"] + 1
    log.truncate_after(0)
    np.random.seed(cfg.seed)
    es = _new_es(spec.n_params, cfg)
    return Search(es, RunningStats(spec.obs_dim), _seed_base(cfg.seed), {"return": -np.inf}), log, 0


def _iteration(cfg: TrainConfig, envs, spec: PolicySpec, bounds, search: Search, it: int, run_dir: Path) -> dict:
    """One CMA-ES iteration: ask, evaluate the population, tell, merge the observation statistics, keep the best
    candidate (best_policy.pkl). ``bounds``: the action bounds (low, high). Returns the iteration's metrics row."""
    t0 = time.perf_counter()
    c, s, (low, high) = cfg.cmaes, search, bounds
    P, E = c.popsize, c.episodes_per_candidate
    X = np.asarray(s.es.ask())
    used_stats = s.stats.copy() if c.norm_obs else None

    def policy(params):
        return FlatPolicy(spec, params, used_stats, c.clip_obs, low, high, envs.single_action_space.dtype)

    res = evaluate(envs, policy(np.repeat(X, E, axis=0)), E, c.episode_steps,
                   [s.seed_base + it * E + e for _ in range(P) for e in range(E)])
    s.es.tell(list(X), penalised_fitness(res.returns, res.diverged).tolist())
    s.stats.merge(res.obs_stats)
    ok = np.nonzero(~res.diverged)[0]
    i_best = ok[np.argmax(res.returns[ok])] if ok.size else None
    if i_best is not None and res.returns[i_best] > s.best["return"]:
        s.best = {"return": float(res.returns[i_best]), "iteration": it + 1, "policy": policy(X[i_best]).to_dict()}
        save_pickle(run_dir / "best_policy.pkl", {**s.best["policy"], "return": s.best["return"],
                                                 "iteration": it + 1})
    dt_it = time.perf_counter() - t0
    s.env_steps += res.env_steps
    s.wall += dt_it
    return {"iteration": it + 1, "env_steps": s.env_steps, "wall_time": round(s.wall, 3),
            "return_best": _num(res.returns[i_best]) if i_best is not None else "",
            "return_mean": _num(np.mean(res.returns)),
            "distance_best": _num(res.distances[i_best]) if i_best is not None else "",
            "distance_mean": _num(np.mean(res.distances)), "return_best_so_far": _num(s.best["return"]),
            "sigma": _num(s.es.sigma), "diverged": int(res.diverged.sum()),
            "sps": round(res.env_steps / max(dt_it, 1e-9), 1)}


def train(cfg: TrainConfig, run_dir, resume: bool = False, progress: bool = True) -> dict:
    """Run CMA-ES for ``cfg.cmaes.iterations`` iterations into ``run_dir`` (resuming from its checkpoint.pkl when
    ``resume``: a missing or unreadable one raises ``runio.RunFileError`` before any file is touched); returns the
    last metrics row (dict). Same config and seed → identical metrics.csv apart from the
    wall_time and sps columns, whether or not the run was interrupted and resumed."""
    from tqdm.auto import tqdm  # looked up at each call: the tests watch the progress bar through tqdm.auto

    c = cfg.cmaes
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    envs = make_train_envs(cfg, with_episode_steps(cfg.env, c.episode_steps),
                           c.popsize * c.episodes_per_candidate)  # workers: Ray actors
    bar = None
    try:
        low, high = action_bounds(envs)
        spec = PolicySpec(kind=c.policy, obs_dim=int(np.prod(envs.single_observation_space.shape)),
                          act_dim=len(low), hidden=tuple(c.hidden) if c.policy == "mlp" else (),
                          frequency=c.frequency, dt=env_dt(envs) if c.policy == "oscillator" else 1.0)
        search, log, start = _open_search(cfg, spec, run_dir, resume)
        for it in range(start, c.iterations):
            row = _iteration(cfg, envs, spec, (low, high), search, it, run_dir)
            log.append(row)
            if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == c.iterations:
                save_pickle(run_dir / "checkpoint.pkl", search.state_dict(it))
            if (it + 1) % PLOT_EVERY == 0 or it + 1 == c.iterations:
                plot_learning_curve(run_dir / "metrics.csv", run_dir / "learning_curve.png")
            if bar is None:  # opened after the first iteration, so its rate and ETA never count a kernel compile
                bar = tqdm(total=c.iterations, initial=it + 1, disable=not progress, desc=cfg.name, unit="it")
            else:
                bar.update(1)
            bar.set_postfix({"return": row["return_best"], "distance": row["distance_best"], "sps": row["sps"]})
    finally:
        if bar is not None:
            bar.close()
        envs.close()
    rows = log.rows()
    return {k: _parse(v) for k, v in rows[-1].items()} if rows else {}


def _parse(text):
    try:
        return int(text)
    except ValueError:
        return float(text) if text else None


def _num(x) -> float:
    """A float rounded to 10 significant digits for the CSV (NaN stays NaN)."""
    return float(f"{float(x):.10g}")
