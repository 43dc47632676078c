"""pbad-bench learnability: a --quick run end to end, its ratio table, and its argument checks."""
import csv

import numpy as np
import pytest

from pbad_gym.bench.learnability import ratio_rows
from pbad_gym.cli import bench_main


def _rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_quick_run_trains_and_evaluates_each_learner_on_the_pbad_env(tmp_path):
    assert bench_main(["learnability", "--quick", "--no-mujoco", "--learners", "cmaes", "ppo", "--dt10", "--out",
                       str(tmp_path)]) == 0
    rows = _rows(tmp_path / "learnability" / "learnability.csv")
    assert [(r["env"], r["learner"]) for r in rows] == [("pbad_gym/Hopper-v0", "cmaes"), ("pbad_gym/Hopper-v0", "ppo")]
    for r in rows:
        assert int(r["env_steps"]) > 0 and np.isfinite(float(r["eval_return"]))
        assert 0 <= float(r["eval_terminated"]) <= 1
        assert (tmp_path / "learnability" / "runs" / r["run_dir"].split("/")[-1] / "best_policy.pkl").exists()
    assert (tmp_path / "learnability" / "curves.png").stat().st_size > 0
    dt10 = _rows(tmp_path / "learnability" / "dt10.csv")  # each policy replayed at Δt 0.001 s and 0.0001 s
    assert [r["learner"] for r in dt10] == ["cmaes", "ppo"]
    assert all(float(r["dt_s"]) == 0.001 and np.isfinite(float(r["distance_dt10"])) for r in dt10)
    (tmp_path / "learnability" / "curves.png").unlink()
    assert bench_main(["learnability", "--quick", "--report", "--dt10", "--out", str(tmp_path)]) == 0  # from the csv
    assert _rows(tmp_path / "learnability" / "dt10.csv") == dt10
    assert (tmp_path / "learnability" / "curves.png").stat().st_size > 0  # redrawn from the run folders


def test_report_needs_an_earlier_table(tmp_path):
    with pytest.raises(ValueError, match="learnability.csv"):
        bench_main(["learnability", "--report", "--out", str(tmp_path)])


def test_quick_run_beside_the_mujoco_peer_writes_ratios(tmp_path):
    pytest.importorskip("mujoco")
    pytest.importorskip("imageio")
    pytest.importorskip("stable_baselines3")
    assert bench_main(["learnability", "--quick", "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path / "learnability" / "learnability.csv")
    assert {(r["engine"], r["learner"]) for r in rows} == {(e, lr) for e in ("PBAD", "MuJoCo")
                                                           for lr in ("cmaes", "ppo", "sb3-ppo")}
    ratios = _rows(tmp_path / "learnability" / "ratios.csv")
    assert [r["learner"] for r in ratios] == ["cmaes", "ppo", "sb3-ppo"]


def test_ratio_rows_divide_pbad_by_mujoco_means_over_seeds():
    def row(engine, seed, ret, dist, fell, wall):
        return ["Hopper", engine, "id", "ppo", seed, 100, wall, ret, dist, fell, 10.0, "dir"]

    table = [row("PBAD", 0, 100.0, 1.0, 0.0, 10.0), row("PBAD", 1, 300.0, 3.0, 1.0, 30.0),
             row("MuJoCo", 0, 400.0, 4.0, 0.5, 5.0)]
    (r,) = ratio_rows(table)
    assert r[:3] == ("Hopper", "ppo", 2)
    assert r[3:6] == (200.0, 400.0, 0.5) and r[6:9] == (2.0, 4.0, 0.5)
    assert r[9:] == (0.5, 0.5, 4.0)


def test_ratio_over_a_non_positive_peer_figure_is_undefined():
    def row(engine, ret, dist):
        return ["Ant", engine, "id", "cmaes", 0, 100, 1.0, ret, dist, 0.0, 10.0, "dir"]

    (r,) = ratio_rows([row("PBAD", -300.0, 0.5), row("MuJoCo", -200.0, -0.2)])
    assert np.isnan(r[5]) and np.isnan(r[8])  # -300 / -200 would read as PBAD 1.5x better


@pytest.mark.parametrize("flag", ["--ppo-steps", "--cma-iterations"])
def test_non_positive_budgets_are_refused_by_name(tmp_path, flag):
    with pytest.raises(ValueError, match=flag):
        bench_main(["learnability", flag, "0", "--out", str(tmp_path)])
