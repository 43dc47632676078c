"""Run-folder I/O: atomic writes, metrics CSV with resume truncation, learning-curve PNG."""
import os

import pytest

from pbad_gym.agents.runio import MetricsLog, atomic_write_bytes, load_pickle, plot_learning_curve, save_pickle


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    p = tmp_path / "f.bin"
    atomic_write_bytes(p, b"one")
    atomic_write_bytes(p, b"two")
    assert p.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_failed_write_keeps_previous_file(tmp_path):
    p = tmp_path / "ckpt.pkl"
    save_pickle(p, {"a": 1})

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        save_pickle(p, Unpicklable())
    assert load_pickle(p) == {"a": 1}
    assert os.listdir(tmp_path) == ["ckpt.pkl"]


def test_metrics_log_append_truncate_and_header_check(tmp_path):
    p = tmp_path / "metrics.csv"
    log = MetricsLog(p, ["iteration", "return_mean"])
    for i in range(5):
        log.append({"iteration": i, "return_mean": 0.5 * i})
    log.truncate_after(2)
    assert [r["iteration"] for r in MetricsLog(p, ["iteration", "return_mean"]).rows()] == ["0", "1", "2"]
    with pytest.raises(ValueError, match="columns"):
        MetricsLog(p, ["iteration", "other"])
    with pytest.raises(ValueError, match="unknown metric"):
        log.append({"iteration": 3, "nope": 1})


def test_plot_learning_curve_writes_png(tmp_path):
    p = tmp_path / "metrics.csv"
    log = MetricsLog(p, ["iteration", "env_steps", "return_mean", "return_best"])
    for i in range(3):
        log.append({"iteration": i, "env_steps": 100 * i, "return_mean": i, "return_best": 2 * i})
    png = plot_learning_curve(p, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
