"""Run-folder input/output shared by the trainers: atomic files, the per-iteration metrics CSV, the learning curve.

Every file a resumed run reads is written atomically (a temporary file in the same folder, fsync, ``os.replace``),
so a run killed at any instant leaves either the previous complete file or the new complete one — never a
partial checkpoint.
"""
from __future__ import annotations

import csv
import io
import os
import pickle
import tempfile
from pathlib import Path


class RunFileError(ValueError):
    """A run-folder file that is missing, empty or unreadable; the message is one line naming the file."""


def create_run_dir(out_dir, name) -> Path:
    """Create and return out_dir/name, or out_dir/name-2, -3, … when it exists (a finished run is never
    overwritten). ``os.mkdir`` both tests and claims a name, so two runs started together never share a folder."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path, k = out_dir / name, 1
    while True:
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            k += 1
            path = out_dir / f"{name}-{k}"


def read_run_pickle(path, hint=""):
    """Load a run-folder pickle; a missing, empty or corrupt file raises :class:`RunFileError` naming it
    (``hint``, e.g. what to do instead, is appended to the message)."""
    path = Path(path)
    suffix = f"; {hint}" if hint else ""
    if not path.exists():
        raise RunFileError(f"{path} does not exist{suffix}")
    if path.stat().st_size == 0:
        raise RunFileError(f"{path} is empty{suffix}")
    try:
        return load_pickle(path)
    except Exception as exc:  # noqa: BLE001 — unpickling garbage raises almost any type; all mean "corrupt"
        raise RunFileError(f"{path} is truncated or corrupt ({type(exc).__name__}: {_first_line(exc)}){suffix}"
                           ) from None


def _first_line(exc) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder (``os.replace`` is atomic only
    within one file system), flushed and fsynced, then renamed over ``path``. Returns the path."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def save_pickle(path, obj) -> Path:
    """Pickle ``obj`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def load_pickle(path):
    """Load a pickle written by :func:`save_pickle`."""
    with open(path, "rb") as f:
        return pickle.load(f)


class MetricsLog:
    """A CSV file with one row per training iteration.

    The trainers number the rows from 1: the ``iteration`` of a row is how many iterations were complete when it
    was written, so the last row of a finished run shows the configured number of iterations.

    ``MetricsLog(path, fieldnames)`` writes the header when the file is new (or empty) and checks it otherwise;
    :meth:`append` writes one row (a dict; missing fields are left blank, unknown ones raise ``ValueError``) and
    flushes it, so a killed run keeps every completed row. On resume, :meth:`truncate_after` drops the rows of
    iterations past the checkpoint's, which the resumed run writes again.
    """

    def __init__(self, path, fieldnames):
        self.path = Path(path)
        self.fieldnames = list(fieldnames)
        if not self.fieldnames or "iteration" not in self.fieldnames:
            raise ValueError(f"fieldnames must include 'iteration', got {self.fieldnames!r}")
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, newline="") as f:
                header = next(csv.reader(f), None)
            if header != self.fieldnames:
                raise ValueError(f"{self.path} has columns {header}, expected {self.fieldnames}")
        else:
            self._write_rows([])

    def _write_rows(self, rows):
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.fieldnames)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_bytes(self.path, out.getvalue().encode())

    def rows(self) -> list[dict]:
        """The rows written so far, as dicts of strings."""
        with open(self.path, newline="") as f:
            return list(csv.DictReader(f))

    def append(self, row: dict) -> None:
        """Append one row and flush it to disk."""
        unknown = set(row) - set(self.fieldnames)
        if unknown:
            raise ValueError(f"unknown metric column(s) {sorted(unknown)}; columns: {self.fieldnames}")
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.fieldnames).writerow(row)
            f.flush()
            os.fsync(f.fileno())

    def truncate_after(self, iteration: int) -> None:
        """Drop every row whose ``iteration`` is greater than ``iteration`` (the checkpoint's), atomically."""
        kept = [r for r in self.rows() if int(r["iteration"]) <= iteration]
        self._write_rows(kept)


def plot_learning_curve(csv_path, png_path, x="env_steps", ys=("return_mean", "return_best")) -> Path:
    """Plot columns ``ys`` of a metrics CSV against column ``x`` into ``png_path`` (matplotlib, Agg backend).
    Blank cells are skipped. Returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    fig, ax = plt.subplots(figsize=(6, 4))
    for y in ys:
        pts = [(float(r[x]), float(r[y])) for r in rows if r.get(x) not in (None, "") and r.get(y) not in (None, "")]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=y)
    ax.set_xlabel(x)
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    data = _png_bytes(fig)
    plt.close(fig)
    return atomic_write_bytes(png_path, data)


def _png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()
