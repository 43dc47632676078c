"""Independent controller search: is each task learnable, next to its MuJoCo counterpart, by the same search?

pycma's CMA-ES is used directly (not the project's trainers), population ``--popsize`` (20), seeded, writing no
files; each generation is evaluated as the rows of ONE vector env (``gymnasium.make_vec(id, num_envs=popsize)``).

- Walkers, open loop: action_j(t) = A_j·sin(2π f t + φ_j) with per-actuator amplitude A_j ∈ [0, 1], one
  frequency f ∈ [``--fmin``, ``--fmax``] Hz and per-actuator phase φ_j; episodes of equal simulated time
  (``--seconds``) on pbad_gym/Spider-v5, Spider-v4, Spider-v3, Spider-v2 and Gymnasium's Ant-v5 (when mujoco is
  installed).
  Fitness: forward (x) displacement of the torso until the episode ends (a fall ends it early) over the whole
  episode time: a speed in m/s. Compare the engines at a converged step in both: Spider-v5 (0.001 s) beside Ant-v5 with
  ``--ant-timestep 0.002`` (frame_skip 25); at their default steps (Spider-v2 and Ant-v5 at 0.01 s) neither is
  converged and the ratio measures the steps' numerical damping as much as the robots.
- Swimmers, closed loop: a linear policy a = tanh(W·obs + b) on raw observations, episodes of ``--swim-steps``
  (1000) steps, on pbad_gym/Swimmer-v1 and Swimmer-v5. Fitness: forward displacement of ``info["x_position"]``
  (the centre of mass for pbad_gym, the head for Swimmer-v5) in m.

The best candidate is then re-evaluated on fresh reset seeds (one vector env of ``--reeval-rows`` rows, by default
``--popsize``); the table gives the best generation score and that re-evaluation's mean, and for the pbad_gym
walker the same gait's mean speed at Δt/10 (the step's gait-level accuracy: the same actions at the same control
times, the physics step divided by 10 and frame_skip multiplied by 10), with the number of re-evaluation rows that
fell at either step and, for the walkers, each mean's standard error over its resets (an open-loop gait has no
feedback on its heading, so its resets part within seconds: on 20 resets two means differ by up to about twice that
from the sampling alone; ``--reeval-rows 100`` halves that). Targets printed: the Spider moves at least half as
fast as Ant-v5; the linear policy swims at least 10 m in 1000 Swimmer-v1 steps.
"""
from __future__ import annotations

import time

import numpy as np

from .common import (add_set_argument, env_settings, machine, mujoco_available, out_dir, print_table, sem, stamp,
                     write_csv)

WALKERS = (("Spider-v5", "pbad_gym/Spider-v5"), ("Spider-v4", "pbad_gym/Spider-v4"),
           ("Spider-v3", "pbad_gym/Spider-v3"), ("Spider-v2", "pbad_gym/Spider-v2"), ("Ant-v5", "Ant-v5"))
SWIMMERS = (("Swimmer-v1", "pbad_gym/Swimmer-v1"), ("Swimmer-v5", "Swimmer-v5"))


def add_arguments(p):
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 2 generations of 4, 0.5 s walker episodes, 20-step swimmer episodes")
    p.add_argument("--iterations", type=int, default=30, help="CMA-ES generations (default 30)")
    p.add_argument("--popsize", type=int, default=20, help="CMA-ES population = vector env rows (default 20)")
    p.add_argument("--seconds", type=float, default=10.0, help="simulated seconds per walker episode (default 10)")
    p.add_argument("--swim-steps", type=int, default=1000, help="steps per swimmer episode (default 1000)")
    p.add_argument("--fmin", type=float, default=0.25, help="lowest gait frequency [Hz] (default 0.25)")
    p.add_argument("--fmax", type=float, default=3.0, help="highest gait frequency [Hz] (default 3)")
    p.add_argument("--sigma", type=float, default=0.3, help="initial CMA-ES step size (default 0.3)")
    p.add_argument("--reeval-rows", type=int, default=None,
                   help="fresh resets the best walker gait is re-evaluated on, at Δt and Δt/10 (default: --popsize; "
                        "100 tells apart means 2x closer than 20 do)")
    p.add_argument("--seed", type=int, default=0, help="seed of CMA-ES and of the env resets (default 0)")
    p.add_argument("--tasks", nargs="+", choices=("walk", "swim"), default=["walk", "swim"],
                   help="which searches to run (default both)")
    p.add_argument("--envs", nargs="+", choices=[n for n, _ in WALKERS + SWIMMERS], default=None,
                   help="only these envs of the chosen tasks (default all)")
    p.add_argument("--no-mujoco", action="store_true", help="skip Gymnasium's MuJoCo envs even if installed")
    add_set_argument(p)  # (the walkers'; Δt/10 keeps them)
    p.add_argument("--ant-timestep", type=float, default=None,
                   help="MuJoCo timestep [s] of Ant-v5 (frame_skip = 0.05 s / timestep, the control interval "
                        "kept); default: Ant-v5's own 0.01 s, which is not converged either (compare at 0.002)")


def oscillator(x, n_act, fmin, fmax):
    """Decode a search vector x (2·n_act + 1,) into (amplitudes (n_act,) in [0, 1], frequency [Hz], phases
    (n_act,) [rad])."""
    x = np.asarray(x, dtype=float)
    amp = np.clip(x[:n_act], 0.0, 1.0)
    freq = fmin + (fmax - fmin) * float(np.clip(x[n_act], 0.0, 1.0))
    return amp, freq, 2 * np.pi * x[n_act + 1:]


def linear_policy(x, obs_dim, n_act):
    """Decode x (n_act·obs_dim + n_act,) into W (n_act, obs_dim) and b (n_act,) of a = tanh(W·obs + b)."""
    x = np.asarray(x, dtype=float)
    return x[:n_act * obs_dim].reshape(n_act, obs_dim), x[n_act * obs_dim:]


def _x_positions(info, n):
    """info["x_position"] (n,) [m] of a vector env step or reset."""
    return np.asarray(info["x_position"], dtype=float).reshape(n)


def _planar_positions(info, n):
    """(info["x_position"], info["y_position"]) (n, 2) [m] of a vector env step or reset."""
    return np.stack([_x_positions(info, n), np.asarray(info["y_position"], dtype=float).reshape(n)], axis=-1)


def rollout(env, act, steps, seed, planar=False):
    """Run every row of vector env ``env`` for ``steps`` steps under ``act(k, obs) -> actions (n, n_act)``.
    Each row's displacement of ``info["x_position"]`` (with ``planar`` of (x_position, y_position): (n, 2)) is
    frozen when its episode ends (terminated or truncated). Returns (displacement (n,) [m], ended early (n,)
    bool)."""
    n = env.num_envs
    position = _planar_positions if planar else _x_positions
    obs, info = env.reset(seed=seed)
    x0 = position(info, n)
    x_last, live, early = x0.copy(), np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
    for k in range(steps):
        a = np.clip(act(k, obs), -1.0, 1.0).astype(env.action_space.dtype)
        obs, _, term, trunc, info = env.step(a)
        x_last = np.where(live[:, None] if planar else live, position(info, n), x_last)
        done = np.asarray(term) | np.asarray(trunc)
        early |= live & done & (k < steps - 1)
        live &= ~done
        if not live.any():
            break
    return x_last - x0, early


def cma_search(evaluate, x0, sigma0, popsize, iterations, seed, log=None):
    """Maximise ``evaluate(X (popsize, n)) -> scores (popsize,)`` with pycma (which minimises: it gets −score).
    Returns (best x, best score, per-generation [(best, mean)] list)."""
    import cma

    opts = {"popsize": popsize, "seed": seed + 1, "verb_log": 0, "verb_disp": 0, "verbose": -9}
    es = cma.CMAEvolutionStrategy(np.asarray(x0, dtype=float), sigma0, opts)
    best_x, best, history = None, -np.inf, []
    for it in range(iterations):
        X = np.array(es.ask())
        scores = np.asarray(evaluate(X, it), dtype=float)
        fit, bad = -scores, ~np.isfinite(scores)
        if bad.any():  # pycma would substitute the median for NaN: make them explicitly the worst
            fit = np.where(bad, (np.max(fit[~bad]) if (~bad).any() else 0.0) + 1e6, fit)
        es.tell(list(X), fit.tolist())
        k = int(np.argmax(np.where(np.isfinite(scores), scores, -np.inf)))
        if scores[k] > best:
            best_x, best = X[k].copy(), float(scores[k])
        history.append((float(np.nanmax(scores)), float(np.nanmean(scores))))
        if log:
            log(it, history[-1])
    return best_x, best, history


def _dt(env):
    """Step length [s] of a vector env (native pbad_gym env, or Gymnasium's SyncVectorEnv)."""
    u = env.unwrapped
    return float(u.dt if hasattr(u, "dt") else u.envs[0].unwrapped.dt)


def _make_vec(env_id, n, **kwargs):
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the ids)

    return gymnasium.make_vec(env_id, num_envs=n, **kwargs)


def finer_physics(env, factor=10):
    """Keyword arguments that rebuild pbad_gym vector env ``env`` with its physics step divided by ``factor`` and
    the same control interval (frame_skip multiplied by it): the same actions at the same times, finer physics."""
    u = env.unwrapped
    return {"dt": u.sim.dt / factor, "frame_skip": u.frame_skip * factor}


def gait_speed(env, X, seconds, seed, fmin, fmax, falls=False, planar=False):
    """Forward speed [m/s] (n,) of open-loop gaits X (n, 2·n_act + 1), one per row of vector env ``env``, over
    episodes of ``seconds`` simulated seconds (a fall ends the displacement early); with ``planar`` the (x, y)
    velocity (n, 2) instead; with ``falls`` also which rows ended early (n,) bool."""
    n_act = env.single_action_space.shape[0]
    dt = _dt(env)
    steps = int(round(seconds / dt))
    limit = getattr(env.unwrapped, "max_episode_steps", None)
    if limit is not None and limit < steps:  # a truncated episode would freeze the displacement early
        raise ValueError(f"episodes of {seconds} s need {steps} steps at Δt = {dt} s but the env truncates them at "
                         f"max_episode_steps={limit}: make it with max_episode_steps=None")
    params = [oscillator(x, n_act, fmin, fmax) for x in X]
    A = np.array([p[0] for p in params])
    f = np.array([p[1] for p in params])[:, None]
    phi = np.array([p[2] for p in params])

    def act(k, obs):
        return A * np.sin(2 * np.pi * f * (k + 0.5) * dt + phi)

    disp, early = rollout(env, act, steps, seed, planar)
    return (disp / (steps * dt), early) if falls else disp / (steps * dt)


def _make_walker(env_id, n, args):
    """Vector env of walker ``env_id`` (pbad_gym walkers with ``--set``'s keywords); Ant-v5 with MuJoCo timestep
    ``args.ant_timestep`` when given (frame_skip 0.05 s / timestep, so the agent still acts every 0.05 s)."""
    timestep = getattr(args, "ant_timestep", None)
    if env_id.startswith("pbad_gym/"):
        return _make_vec(env_id, n, **env_settings(args))
    if timestep is None:
        return _make_vec(env_id, n)
    env = _make_vec(env_id, n, vectorization_mode="sync", frame_skip=int(round(0.05 / timestep)))
    for sub in env.envs:
        sub.unwrapped.model.opt.timestep = timestep
    return env


def walk_search(env_id, args, iterations, popsize, seconds):
    """Open-loop oscillator search on walker ``env_id``: (best speed of a generation, re-evaluated mean speed
    [m/s], dt, steps, wall seconds, history, re-evaluated mean speed at Δt/10 (pbad_gym envs; None otherwise),
    falls, falls at Δt/10, and the standard errors [m/s] of the two re-evaluated means)."""
    env = _make_walker(env_id, popsize, args)
    n_act = env.single_action_space.shape[0]
    dt = _dt(env)
    steps = int(round(seconds / dt))
    rng = np.random.default_rng(args.seed)
    x0 = np.concatenate([np.full(n_act, 0.5), [0.3], rng.uniform(0, 1, n_act)])

    def evaluate(X, it):
        return gait_speed(env, X, steps * dt, args.seed + 1000 * it, args.fmin, args.fmax)

    t0 = time.perf_counter()
    best_x, best, history = cma_search(evaluate, x0, args.sigma, popsize, iterations, args.seed,
                                       log=lambda it, h: print(f"    {env_id} generation {it + 1}: best "
                                                               f"{h[0]:.3f} m/s, mean {h[1]:.3f} m/s", flush=True))
    wall = time.perf_counter() - t0
    n_again = getattr(args, "reeval_rows", None) or popsize
    if n_again != popsize:
        env.close()
        env = _make_walker(env_id, n_again, args)
    best_rows = np.tile(best_x, (n_again, 1))
    again, fell = gait_speed(env, best_rows, steps * dt, args.seed + 10 ** 6, args.fmin, args.fmax, falls=True)
    env.close()
    fine, fine_fell, fine_sem = None, None, None
    if env_id.startswith("pbad_gym/"):  # gait-level accuracy of the step: the same gait at Δt/10
        env = _make_vec(env_id, n_again, **{**env_settings(args), **finer_physics(env)})
        speeds, fine_fell = gait_speed(env, best_rows, steps * dt, args.seed + 10 ** 6, args.fmin, args.fmax,
                                       falls=True)
        fine, fine_fell, fine_sem = float(np.mean(speeds)), int(fine_fell.sum()), sem(speeds)
        env.close()
    print(f"    {env_id}: best gait {np.array2string(best_x, precision=17, max_line_width=10 ** 4)}", flush=True)
    return (best, float(np.mean(again)), dt, steps, wall, history, fine, int(fell.sum()), fine_fell,
            (sem(again), fine_sem))


def swim_search(env_id, args, iterations, popsize, steps):
    """Linear tanh policy search on swimmer ``env_id``: (best displacement of a generation, re-evaluated mean
    displacement [m], dt, steps, wall seconds)."""
    env = _make_vec(env_id, popsize)
    n_act = env.single_action_space.shape[0]
    obs_dim = env.single_observation_space.shape[0]
    dt = _dt(env)
    x0 = np.zeros(n_act * obs_dim + n_act)

    def evaluate(X, it, seed=None):
        Wb = [linear_policy(x, obs_dim, n_act) for x in X]
        W = np.stack([w for w, _ in Wb])
        b = np.stack([c for _, c in Wb])

        def act(k, obs):
            return np.tanh(np.einsum("nij,nj->ni", W, np.asarray(obs, dtype=float)) + b)

        disp, _ = rollout(env, act, steps, args.seed + 1000 * it if seed is None else seed)
        return disp

    t0 = time.perf_counter()
    best_x, best, history = cma_search(evaluate, x0, args.sigma, popsize, iterations, args.seed,
                                       log=lambda it, h: print(f"    {env_id} generation {it + 1}: best "
                                                               f"{h[0]:.2f} m, mean {h[1]:.2f} m", flush=True))
    wall = time.perf_counter() - t0
    again = evaluate(np.tile(best_x, (popsize, 1)), 0, seed=args.seed + 10 ** 6)
    env.close()
    return best, float(np.mean(again)), dt, steps, wall, history


def run(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if args.iterations < 1 or args.popsize < 2 or args.seconds <= 0 or args.swim_steps < 1:
        raise SystemExit("pbad-bench search: --iterations >= 1, --popsize >= 2, --seconds > 0, --swim-steps >= 1")
    if args.reeval_rows is not None and args.reeval_rows < 2:
        raise SystemExit(f"pbad-bench search: --reeval-rows must be at least 2, got {args.reeval_rows}")
    iterations, popsize = (2, 4) if args.quick else (args.iterations, args.popsize)
    seconds, swim_steps = (0.5, 20) if args.quick else (args.seconds, args.swim_steps)
    out = out_dir(args.out, "search")
    have_mj = not args.no_mujoco and mujoco_available()
    print(f"pbad-bench search on {machine()}, {stamp()}: CMA-ES population {popsize}, {iterations} generations, "
          f"seed {args.seed}")
    rows, curves = [], {}
    if "walk" in args.tasks:
        for name, env_id in WALKERS:
            if (env_id.startswith("pbad_gym/") or have_mj) and (args.envs is None or name in args.envs):
                best, mean, dt, steps, wall, hist, fine, fell, fine_fell, (se, fine_se) = walk_search(
                    env_id, args, iterations, popsize, seconds)
                rows.append(("walk open-loop", name, dt, steps, steps * dt, best, mean, se, "m/s", wall,
                             "" if fine is None else fine, "" if fine is None else fine_se, fell,
                             "" if fine_fell is None else fine_fell))
                curves[name] = hist
    if "swim" in args.tasks:
        for name, env_id in SWIMMERS:
            if (env_id.startswith("pbad_gym/") or have_mj) and (args.envs is None or name in args.envs):
                best, mean, dt, steps, wall, hist = swim_search(env_id, args, iterations, popsize, swim_steps)
                rows.append(("swim linear tanh", name, dt, steps, steps * dt, best, mean, "", "m", wall, "", "", "",
                             ""))
                curves[name] = hist
    header = ["task", "env", "dt_s", "steps", "sim_seconds", "best_of_generations", "reevaluated_mean",
              "reevaluated_sem", "unit", "wall_s", "reevaluated_mean_at_dt_over_10", "sem_at_dt_over_10", "falls",
              "falls_at_dt_over_10"]
    write_csv(out / "search.csv", rows, header)
    print_table(rows, ["task", "env", "dt [s]", "steps", "sim s", "best", "re-evaluated", "± SE", "unit", "wall [s]",
                       "at dt/10", "± SE", "falls", "falls dt/10"], "Independent CMA-ES search")
    print("± SE: the standard error of a re-evaluated mean over its resets (open-loop gaits wander; two means closer "
          "than about twice it are not told apart)")
    score = {r[1]: r[6] for r in rows}
    for spider in ("Spider-v5", "Spider-v4", "Spider-v3", "Spider-v2"):
        if spider in score and "Ant-v5" in score:
            ok = score[spider] >= 0.5 * score["Ant-v5"]
            print(f"target: {spider} >= 0.5 x Ant-v5 forward speed: {score[spider]:.3f} vs {score['Ant-v5']:.3f} m/s "
                  f"(ratio {score[spider] / score['Ant-v5']:.2f}, {'met' if ok else 'NOT met'}; Ant-v5 timestep "
                  f"{args.ant_timestep or 0.01} s)")
    if "Swimmer-v1" in score:
        target = 10.0 * swim_steps / 1000
        print(f"target: linear policy >= {target:g} m in {swim_steps} Swimmer-v1 steps: {score['Swimmer-v1']:.2f} m "
              f"({'met' if score['Swimmer-v1'] >= target else 'NOT met'})"
              + (f"; Swimmer-v5: {score['Swimmer-v5']:.2f} m" if "Swimmer-v5" in score else ""))
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, hist in curves.items():
            unit = "m/s" if name in dict(WALKERS) else "m"
            ax.plot(np.arange(1, len(hist) + 1), [h[0] for h in hist], label=f"{name} best ({unit})")
        ax.set(xlabel="generation", ylabel="score", title="Independent CMA-ES search")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "search.png", dpi=120)
        plt.close(fig)
    print(f"wrote {out}/search.csv and search.png")
    return 0
