"""pbad-bench gradients --quick: every part end to end, and its argument checks."""
import csv

import pytest

from pbad_gym.cli import bench_main

pytest.importorskip("torch")


def _rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_quick_run_measures_accuracy_cost_and_learning(tmp_path):
    assert bench_main(["gradients", "--quick", "--seconds", "0.05", "--batches", "1", "--out", str(tmp_path)]) == 0
    out = tmp_path / "gradients"
    acc = _rows(out / "accuracy.csv")
    assert {r["case"].split(" ")[0] for r in acc} == {"chain", "Swimmer-v1"}
    assert all(float(r["relative error"]) < 1e-5 for r in acc)  # the adjoint agrees with finite differences
    cost = _rows(out / "cost.csv")
    assert [r["env"] for r in cost] == ["Swimmer-v1", "Spider-v3"]
    for r in cost:
        assert all(float(r[k]) > 0 for k in ("forward NumPy ms", "backward NumPy ms"))
        kernel = [float(r[k]) for k in ("forward numba ms", "backward numba ms", "rollout forward ms",
                                        "rollout backward ms")]
        assert all(v > 0 for v in kernel) or all(v != v for v in kernel)  # measured, or NaN without numba
    assert [r["learner"] for r in _rows(out / "learning.csv")] == ["shac", "ppo", "cmaes"]
    assert (out / "learning.png").stat().st_size > 0


@pytest.mark.parametrize("args, name", [(["--fraction", "0"], "--fraction"), (["--batches", "0"], "--batches")])
def test_bad_arguments_are_refused_by_name(tmp_path, args, name):
    with pytest.raises(ValueError, match=name):
        bench_main(["gradients", *args, "--out", str(tmp_path)])
