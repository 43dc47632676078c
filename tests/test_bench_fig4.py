"""pbad-bench fig4 --quick on a machine without a GPU: the CPU side runs, the GPU columns say they need a device,
the exit status is 0 and the table, CSVs and PNG are written."""
import csv

from pbad_gym.bench.fig4 import NEEDS_DEVICE, Budget, speedups
from pbad_gym.cli import bench_main


def test_fig4_quick_runs_the_cpu_side_without_a_device(tmp_path, capsys):
    rc = bench_main(["fig4", "--quick", "--no-gpu", "--out", str(tmp_path), "--links", "3", "--trajectories", "4",
                     "--steps", "1", "--env-batches", "4", "--envs", "pbad_gym/Swimmer-v1", "--cpu-backend", "numpy"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "GPU columns: needs a device" in out and "MJX" in out
    d = tmp_path / "fig4"
    assert (d / "fig4.png").stat().st_size > 0
    assert "| N \\ B | 4 |" in (d / "fig4.md").read_text()
    chain = list(csv.DictReader(open(d / "fig4_chain.csv")))
    sides = [("cpu", "numpy", "ok"), ("cuda", "numpy", NEEDS_DEVICE), ("cuda", "cuda", NEEDS_DEVICE)]
    assert [(r["device"], r["backend"], r["status"]) for r in chain] == sides
    assert float(chain[0]["seconds"]) > 0
    envs = list(csv.DictReader(open(d / "fig4_envs.csv")))
    assert [(r["device"], r["backend"], r["status"]) for r in envs] == sides
    assert float(envs[0]["env_steps_per_s"]) > 0


def test_speedups_pair_cpu_and_gpu_rows_and_the_budget_stops():
    rows = [(5, 10, 10, "cpu", "numpy", 2.0, 3.0, "ok"), (5, 10, 10, "cuda", "numpy", 0.5, 3.0, "ok"),
            (5, 30, 10, "cpu", "numpy", 4.0, 3.0, "ok"), (5, 30, 10, "cuda", "numpy", None, None, NEEDS_DEVICE)]
    assert speedups(rows) == {(5, 10): 4.0}
    fused = rows + [(5, 10, 10, "cuda", "cuda", 0.25, 3.0, "ok")]
    assert speedups(fused, "cuda") == {(5, 10): 8.0} and speedups(fused) == {(5, 10): 4.0}
    assert Budget(0).spent() and not Budget(None).spent()
