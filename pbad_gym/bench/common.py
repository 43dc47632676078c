"""Shared benchmark plumbing: output folder, CSV writing, table printing, machine description."""
from __future__ import annotations

import csv
import os
import platform
import time
from pathlib import Path

# The paper's solver: no Newton memory (the Simulator's default keeps one). The paper's figures (fig2, fig3, fig4,
# order) are measured without it, so that they compare with the paper's and across backends (the lock-step LM of
# device arrays has none).
PAPER_SOLVER = {"newton_memory": False}


def out_dir(path, name) -> Path:
    """``path``/``name``, created."""
    d = Path(path) / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_csv(path, rows, header):
    """Write ``rows`` (sequence of sequences) under ``header`` to ``path``."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def print_table(rows, header, title=None):
    """Print rows as an aligned plain-text table."""
    cells = [[h for h in header]] + [[_fmt(x) for x in r] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    if title:
        print(f"\n{title}")
    for k, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(x):
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def sem(x) -> float:
    """Standard error of the mean of the samples x (n,) (same unit; nan for fewer than two)."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    return float(np.std(x, ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def machine() -> str:
    """A short description of this machine for BENCHMARKS.md (no hostnames)."""
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{platform.machine()} {os.cpu_count()} cores, {python}"


def stamp() -> str:
    return time.strftime("%Y-%m-%d")


def mujoco_available() -> bool:
    """Whether Gymnasium's MuJoCo environments can be made here (the optional ``mujoco`` extra)."""
    try:
        import gymnasium
        import mujoco  # noqa: F401

        gymnasium.make("Swimmer-v5").close()
        return True
    except Exception:  # noqa: BLE001 - any failure means the extra is unusable here
        return False


def add_set_argument(p, example="integrator=bdf2 penalty_springs=implicit dt=0.005 frame_skip=10"):
    """``--set KEY=VALUE ...``: keyword arguments of the pbad_gym environments a benchmark makes."""
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help=f"keyword arguments of the pbad_gym environments, values parsed as YAML (e.g. {example})")


def env_settings(args):
    """The ``--set KEY=VALUE`` items of ``args`` as a dict (values parsed as YAML); SystemExit naming --set on an
    item without '='."""
    import yaml

    out = {}
    for item in getattr(args, "set", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"pbad-bench: --set takes KEY=VALUE items, got {item!r}")
        out[key] = yaml.safe_load(value)
    return out
