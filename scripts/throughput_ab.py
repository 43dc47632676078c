"""A/B throughput of the environments between a git revision and the working tree, measured in one run.

    python scripts/throughput_ab.py --old REV [--new-backend numpy|numba] [--envs ID ...] [--num-envs 16]
        [--steps 200] [--reps 5]

The old revision is checked out into a temporary git worktree; each repetition runs both trees in fresh
subprocesses, alternating which goes first, so that machine load affects both alike. Prints env-steps/s per tree
(median over repetitions) and the ratio new/old.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

PROBE = r"""
import sys, time, warnings
import numpy as np, gymnasium as gym
warnings.filterwarnings("ignore")
import pbad_gym  # noqa: F401
env_id, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kwargs = {"backend": sys.argv[4]} if len(sys.argv) > 4 else {}
env = gym.make_vec(env_id, num_envs=n, **kwargs)
env.reset(seed=0)
rng = np.random.default_rng(0)
acts = rng.uniform(-1, 1, (steps,) + env.action_space.shape)
for a in acts[:10]:
    env.step(a)
t = time.perf_counter()
for a in acts:
    env.step(a)
print(n * steps / (time.perf_counter() - t))
"""


def measure(tree, env_id, n, steps, backend=None):
    env = dict(os.environ, PYTHONPATH=tree)
    extra = [] if backend is None else [backend]
    out = subprocess.run([sys.executable, "-c", PROBE, env_id, str(n), str(steps)] + extra, env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="git revision to compare against")
    p.add_argument("--new-backend", choices=["numpy", "numba"], default=None,
                   help="backend of the working tree's envs (default: the envs' own default)")
    p.add_argument("--envs", nargs="+", default=["pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1"])
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    new = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                         check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(tmp, "old")
        subprocess.run(["git", "worktree", "add", "--detach", old, args.old], check=True, capture_output=True)
        try:
            print(f"{'env':<24}{'old steps/s':>14}{'new steps/s':>14}{'new/old':>10}")
            for env_id in args.envs:
                runs = {"old": [], "new": []}
                for r in range(args.reps):
                    order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
                    for name, tree in order:
                        backend = args.new_backend if name == "new" else None
                        runs[name].append(measure(tree, env_id, args.num_envs, args.steps, backend))
                o, n = statistics.median(runs["old"]), statistics.median(runs["new"])
                print(f"{env_id:<24}{o:>14.0f}{n:>14.0f}{n / o:>10.3f}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", old], check=True)


if __name__ == "__main__":
    main()
