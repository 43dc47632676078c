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


class _Stopped(Exception):
    """SIGTERM, raised in the main thread so that it ends a run the way Ctrl-C does."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _fail(prog, message) -> None:
    """One line on stderr and exit status 2 (a usage or input error: nothing was started)."""
    from .agents.preflight import one_line

    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(2)


def _trainer(algo):
    try:
        return importlib.import_module(f"pbad_gym.agents.{algo}")
    except ModuleNotFoundError as exc:
        if exc.name == "torch":
            raise ValueError(f"algo {algo!r} needs PyTorch: pip install -e \".[rl]\"") from None
        raise


def _train_parser():
    parser = argparse.ArgumentParser(
        prog="pbad-train", description="Train a controller (CMA-ES or PPO) from a YAML config. Writes OUT_DIR/NAME/:"
        " config.yaml (resolved), metrics.csv (one row per iteration, numbered from 1), checkpoint.pkl, "
        "best_policy.pkl, learning_curve.png. Errors exit 2; Ctrl-C exits 130 with the command that resumes.")
    parser.add_argument("items", nargs="*", metavar="CONFIG.yaml | key=value",
                        help="the config file and dotted overrides such as cmaes.popsize=10 env.kwargs={gear: 40}, "
                        "anywhere on the command line")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint "
                        "(its config.yaml; overrides may change e.g. the iterations, not shapes or the task)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _fresh_config(paths, overrides):
    """The config of a new run: one CONFIG.yaml and the overrides."""
    from .agents.config import load_config

    if len(paths) != 1:
        raise ValueError(f"expected one CONFIG.yaml (then key=value overrides), got {paths or 'none'}")
    if not Path(paths[0]).is_file():
        raise ValueError(f"config file {paths[0]} does not exist")
    return load_config(paths[0], overrides)


def read_run_config(run_dir, overrides=()):
    """The config.yaml of a run folder with ``overrides``; a missing, empty or malformed file raises
    ``RunFileError`` naming it."""
    from .agents.config import load_config
    from .agents.runio import RunFileError

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise RunFileError(f"{run_dir} is not a run folder (no config.yaml)")
    if path.stat().st_size == 0:
        raise RunFileError(f"{path} is empty")
    try:
        return load_config(path, overrides)
    except ValueError as exc:  # YAML errors, missing keys, bytes that are not text (UnicodeDecodeError)
        raise RunFileError(f"{path}: {exc}") from None


def _resume_config(run_dir, paths, overrides):
    """The config of a resumed run, refused before anything is written when its overrides change a shape or the
    task, or when its checkpoint is missing or unreadable."""
    from .agents.preflight import check_resume_overrides
    from .agents.runio import RunFileError, read_run_pickle

    if paths:
        raise ValueError(f"with --resume the config is {run_dir}/config.yaml; drop {paths}")
    saved = read_run_config(run_dir)
    cfg = read_run_config(run_dir, overrides)
    check_resume_overrides(saved, cfg)
    _trainer(cfg.algo)  # the checkpoint of a PPO run needs torch to load
    checkpoint = Path(run_dir) / "checkpoint.pkl"
    if not checkpoint.exists():
        raise RunFileError(f"{checkpoint} does not exist: the run stopped before its first checkpoint, so there is "
                           f"nothing to resume; start a fresh run with the config")
    read_run_pickle(checkpoint, "start a fresh run with the config")
    return cfg


def _prepare(args):
    """(config, run folder or None) of a start that passed every check: config, environment, Ray pool. Nothing
    is written here, so a failed start leaves nothing on disk."""
    from .agents.preflight import check_budget, check_env, check_pool, kernel_cache_cold

    paths = [x for x in args.items if "=" not in x]
    overrides = [x for x in args.items if "=" in x]
    if args.resume:
        cfg = _resume_config(args.resume, paths, overrides)
    else:
        cfg = _fresh_config(paths, overrides)
    _check_env_id(cfg.env.id)
    _trainer(cfg.algo)
    check_budget(cfg)
    check_env(cfg)
    check_pool(cfg)
    if kernel_cache_cold():
        print("pbad-train: compiling the simulation kernel, once: about a minute", flush=True)
    return cfg, Path(args.resume) if args.resume else None


def _start(cfg, run_dir):
    """Create the run folder (a new one unless resuming) and write its config.yaml atomically."""
    from .agents.config import dump_config
    from .agents.runio import atomic_write_bytes, create_run_dir

    if run_dir is None:
        run_dir = create_run_dir(cfg.out_dir, cfg.name)
    atomic_write_bytes(run_dir / "config.yaml", dump_config(cfg).encode())
    return run_dir


def _stop_line(run_dir, why) -> str:
    """The one line printed when a run is stopped: the command that resumes it, or why there is none yet."""
    if (run_dir / "checkpoint.pkl").exists():
        return f"pbad-train: {why}; continue with: pbad-train --resume {run_dir}"
    return f"pbad-train: {why} before the first checkpoint; nothing to resume in {run_dir}: start the run again"


def _summary(final, run_dir) -> str:
    """The closing lines: the last iteration's figures (blank ones left out) and the files to look at."""
    shown = ", ".join(f"{k} {final[k]}" for k in ("iteration", "env_steps", "wall_time", "return_mean",
                                                  "return_best", "distance_best") if final.get(k) not in (None, ""))
    text = f"pbad-train: done: {shown}\n  run folder {run_dir} (metrics.csv, learning_curve.png"
    if (run_dir / "best_policy.pkl").exists():
        return text + f", best_policy.pkl)\n  replay: pbad-eval {run_dir} --gif {run_dir / 'best.gif'}"
    return text + ")\n  no episode finished, so there is no best_policy.pkl yet: train longer (more iterations or" \
        " timesteps) or shorten the episodes (env.kwargs={max_episode_steps: N})"


def train_main(argv=None) -> int:
    """``pbad-train CONFIG.yaml [key=value ...] [--resume RUN_DIR] [--no-progress]``: train a controller into a
    run folder. Errors exit 2 with one line and leave nothing on disk; Ctrl-C exits 130, SIGTERM 143, each with
    one line naming the ``--resume`` command."""
    args = _train_parser().parse_intermixed_args(argv)
    try:
        cfg, run_dir = _prepare(args)
    except ValueError as exc:  # ConfigError and RunFileError included
        _fail("pbad-train", exc)
    except KeyboardInterrupt:
        print("pbad-train: interrupted before the run started; nothing was written", file=sys.stderr)
        return 130
    run_dir = _start(cfg, run_dir)
    print(f"pbad-train: {cfg.algo} on {cfg.env.id}, run folder {run_dir}", flush=True)
    return _train(cfg, run_dir, resume=bool(args.resume), progress=not args.no_progress)


def _train(cfg, run_dir, resume, progress) -> int:
    """Run the trainer; a stop by Ctrl-C or SIGTERM prints one line with the resume command."""
    def stop(signum, frame):  # a clean exit: the last checkpoint stays the last complete one
        raise _Stopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        final = _trainer(cfg.algo).train(cfg, run_dir, resume=resume, progress=progress)
    except KeyboardInterrupt:
        print(_stop_line(run_dir, "interrupted"), file=sys.stderr)
        return 130
    except _Stopped as exc:
        print(_stop_line(run_dir, f"stopped by signal {exc.signum}"), file=sys.stderr)
        return 128 + exc.signum
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(_summary(final, run_dir))
    return 0


def _check_env_id(env_id):
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the pbad_gym/* ids)

    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error:
        ids = sorted(k for k in gymnasium.registry if k.startswith("pbad_gym/"))
        raise ValueError(f"env.id {env_id!r} is not registered; pbad_gym ids: {ids} (or any Gymnasium id)") from None


def _eval_parser():
    parser = argparse.ArgumentParser(prog="pbad-eval", description="Replay the best policy of a pbad-train run: "
                                     "mean return and forward distance over N episodes, optionally a GIF. Errors "
                                     "exit 2 with one line.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--episodes", type=int, default=10, help="episodes, run as one vector env (default 10)")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per episode (default: the run's cmaes.episode_steps, or 1000)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed of the first episode (default 0)")
    parser.add_argument("--gif", metavar="PATH", help="also write a GIF of one episode")
    parser.add_argument("--gif-every", type=int, default=2, help="render every this many steps (default 2)")
    return parser


def _check_output_path(path) -> None:
    """Refuse an output file that could not be written (checked before the work that produces it)."""
    import os

    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"--gif {path} is a folder; give a file name such as {path / 'best.gif'}")
    if not parent.is_dir():
        raise ValueError(f"--gif {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"--gif {path}: the folder {parent} is not writable")


def _load_eval(args):
    """(config, policy) of the run to replay, every input checked before an episode runs."""
    from .agents.policies import load_policy
    from .agents.preflight import check_env

    if args.episodes < 1 or (args.steps is not None and args.steps < 1) or args.gif_every < 1:
        raise ValueError("--episodes, --steps and --gif-every must be positive")
    if args.gif:
        _check_output_path(args.gif)
    cfg = read_run_config(args.run_dir)
    try:
        policy = load_policy(args.run_dir)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    check_env(cfg)
    return cfg, policy


def eval_main(argv=None) -> int:
    """``pbad-eval RUN_DIR [--episodes N] [--steps N] [--gif PATH]``: replay a run's best policy. Errors (a
    missing or corrupt run file, an unwritable --gif path) exit 2 with one line, before any episode runs."""
    import numpy as np

    from .agents.cmaes import with_episode_steps
    from .agents.rollout import evaluate
    from .agents.vecenv import make_vec_env

    args = _eval_parser().parse_args(argv)
    try:
        cfg, policy = _load_eval(args)
    except ValueError as exc:  # RunFileError and ConfigError included
        _fail("pbad-eval", exc)
    steps = args.steps or (cfg.cmaes.episode_steps if cfg.algo == "cmaes" else 1000)
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
        _write_gif(cfg, env_cfg, policy, args, steps)
    return 0


def _write_gif(cfg, env_cfg, policy, args, steps):
    import gymnasium
    import numpy as np

    from .envs.render import record_rollout

    env = gymnasium.make(cfg.env.id, render_mode="rgb_array", **env_cfg.kwargs)
    policy.reset(1)
    record_rollout(env, args.gif, steps=steps, policy=lambda obs: policy.act(np.asarray(obs)[None])[0],
                   seed=args.seed, every=args.gif_every)
    env.close()
    print(f"pbad-eval: wrote {args.gif}")


if __name__ == "__main__":
    sys.exit(bench_main())
