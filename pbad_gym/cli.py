"""Command-line entry points: ``pbad-bench NAME [options]``, ``pbad-train CONFIG.yaml [key=value ...]``,
``pbad-eval RUN_DIR``."""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
from pathlib import Path

from .bench import BENCHMARKS


def bench_main(argv=None) -> int:
    """``pbad-bench NAME``: run one reproduced-figure benchmark (CSV + PNG under --out, table on stdout).

    Only the chosen benchmark's module is imported, so one benchmark's optional dependencies never break another.
    Without a NAME it prints the usage and exits with status 2.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    top = argparse.ArgumentParser(prog="pbad-bench", description="Reproduce the papers' benchmark figures.")
    top.add_argument("name", choices=sorted(BENCHMARKS), metavar="NAME", help=", ".join(sorted(BENCHMARKS)))
    if not argv:
        top.error(f"a benchmark NAME is required: one of {', '.join(sorted(BENCHMARKS))}")
    if argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        top.parse_args(argv[:1])
    mod = importlib.import_module(BENCHMARKS[argv[0]])
    parser = argparse.ArgumentParser(prog=f"pbad-bench {argv[0]}", description=(mod.__doc__ or "").strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results", help="results folder (default: results)")
    mod.add_arguments(parser)
    return int(mod.run(parser.parse_args(argv[1:])) or 0)


def _new_run_dir(out_dir, name) -> Path:
    """out_dir/name, or out_dir/name-2, -3, … when it exists (a finished run is never overwritten)."""
    base = Path(out_dir) / name
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{name}-{k}")
    return path


def _trainer(algo):
    try:
        return importlib.import_module(f"pbad_gym.agents.{algo}")
    except ModuleNotFoundError as exc:
        if exc.name == "torch":
            raise SystemExit(f"pbad-train: algo {algo!r} needs PyTorch: pip install -e \".[rl]\"") from None
        raise


def train_main(argv=None) -> int:
    """``pbad-train CONFIG.yaml [key=value ...] [--resume RUN_DIR]``: train a controller into a run folder."""
    from .agents.config import dump_config, load_config
    from .agents.runio import atomic_write_bytes

    parser = argparse.ArgumentParser(
        prog="pbad-train", description="Train a controller (CMA-ES or PPO) from a YAML config. Writes OUT_DIR/NAME/:"
        " config.yaml (resolved), metrics.csv, checkpoint.pkl, best_policy.pkl, learning_curve.png.")
    parser.add_argument("items", nargs="*", metavar="CONFIG.yaml | key=value",
                        help="the config file, then dotted overrides such as cmaes.popsize=10 env.kwargs={gear: 40}")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint "
                        "(its config.yaml; overrides still apply, e.g. more iterations)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    paths = [x for x in args.items if "=" not in x]
    overrides = [x for x in args.items if "=" in x]
    if args.resume:
        if paths:
            parser.error(f"with --resume the config is {args.resume}/config.yaml; drop {paths}")
        run_dir = Path(args.resume)
        config_path = run_dir / "config.yaml"
        if not config_path.exists():
            parser.error(f"--resume: {config_path} does not exist")
    else:
        if len(paths) != 1:
            parser.error(f"expected one CONFIG.yaml (then key=value overrides), got {paths or 'none'}")
        config_path = Path(paths[0])
        if not config_path.exists():
            parser.error(f"config file {config_path} does not exist")
    try:
        cfg = load_config(config_path, overrides)
        _check_env_id(cfg.env.id)
    except ValueError as exc:
        parser.error(str(exc))
    trainer = _trainer(cfg.algo)
    if not args.resume:
        run_dir = _new_run_dir(cfg.out_dir, cfg.name)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(run_dir / "config.yaml", dump_config(cfg).encode())
    print(f"pbad-train: {cfg.algo} on {cfg.env.id}, run folder {run_dir}", flush=True)

    def stop(signum, frame):  # a clean exit: the last checkpoint stays the last complete one
        raise SystemExit(f"pbad-train: stopped by signal {signum}; continue with pbad-train --resume {run_dir}")

    signal.signal(signal.SIGTERM, stop)
    final = trainer.train(cfg, run_dir, resume=bool(args.resume), progress=not args.no_progress)
    shown = ", ".join(f"{k} {final[k]}" for k in ("iteration", "env_steps", "wall_time", "return_mean",
                                                  "return_best", "distance_best") if final.get(k) is not None)
    print(f"pbad-train: done: {shown}\n  run folder {run_dir} (metrics.csv, learning_curve.png, best_policy.pkl)"
          f"\n  replay: pbad-eval {run_dir} --gif {run_dir / 'best.gif'}")
    return 0


def _check_env_id(env_id):
    import gymnasium

    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error:
        ids = sorted(k for k in gymnasium.registry if k.startswith("pbad_gym/"))
        raise ValueError(f"env.id {env_id!r} is not registered; pbad_gym ids: {ids} (or any Gymnasium id)") from None


def eval_main(argv=None) -> int:
    """``pbad-eval RUN_DIR [--episodes N] [--gif PATH]``: replay a run's best policy."""
    import numpy as np

    from .agents.config import load_config
    from .agents.policies import load_policy
    from .agents.cmaes import with_episode_steps
    from .agents.rollout import evaluate
    from .agents.vecenv import make_vec_env

    parser = argparse.ArgumentParser(prog="pbad-eval", description="Replay the best policy of a pbad-train run: "
                                     "mean return and forward distance over N episodes, optionally a GIF.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--episodes", type=int, default=10, help="episodes, run as one vector env (default 10)")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per episode (default: the run's cmaes.episode_steps, or 1000)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed of the first episode (default 0)")
    parser.add_argument("--gif", metavar="PATH", help="also write a GIF of one episode")
    parser.add_argument("--gif-every", type=int, default=2, help="render every this many steps (default 2)")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").exists():
        parser.error(f"{run_dir} is not a run folder (no config.yaml)")
    if args.episodes < 1 or (args.steps is not None and args.steps < 1) or args.gif_every < 1:
        parser.error("--episodes, --steps and --gif-every must be positive")
    cfg = load_config(run_dir / "config.yaml")
    steps = args.steps or (cfg.cmaes.episode_steps if cfg.algo == "cmaes" else 1000)
    try:
        policy = load_policy(run_dir)
    except FileNotFoundError as exc:
        parser.error(str(exc))
    env_cfg = with_episode_steps(cfg.env, steps)
    envs = make_vec_env(env_cfg, args.episodes)
    try:
        res = evaluate(envs, policy, 1, steps, args.seed)
    finally:
        envs.close()
    r, d = res.row_returns, res.row_distances
    print(f"pbad-eval: {args.episodes} episode(s) of up to {steps} steps on {cfg.env.id}: "
          f"return {r.mean():.2f} ± {r.std():.2f}, forward distance {np.mean(d):.2f} ± {np.std(d):.2f} m, "
          f"diverged {int(res.diverged.sum())}")
    if args.gif:
        import gymnasium

        from .envs.render import record_rollout

        env = gymnasium.make(cfg.env.id, render_mode="rgb_array", **env_cfg.kwargs)
        policy.reset(1)
        record_rollout(env, args.gif, steps=steps, policy=lambda obs: policy.act(np.asarray(obs)[None])[0],
                       seed=args.seed, every=args.gif_every)
        env.close()
        print(f"pbad-eval: wrote {args.gif}")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main())
