"""fig2's panels: limits follow the data, runs that leave the panel are marked, log axes are not crowded."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pbad_gym.bench.fig2 import _plot_energy, _sparse_log_ticks  # noqa: E402


def test_energy_panel_fits_the_stable_runs_and_marks_the_unstable_one():
    t = np.linspace(0, 1, 11)
    traces = [("pbad", t, -0.2 * t, False), ("rk4", t, 1e-4 * t, False),
              ("euler", t, np.r_[0.01 * t[:6], 1e3, 1e6, 1e9, np.nan, np.nan], True)]
    fig, ax = plt.subplots()
    _plot_energy(ax, traces, scale=1.7)
    lo, hi = ax.get_ylim()
    assert lo <= -0.2 and hi >= 1e-4
    assert hi - lo < 1.5 * 0.2  # the data fill the panel (a fixed ±2 m·g·L/2 range would squeeze them)
    labels = [child.get_text() for child in ax.texts]
    assert labels == ["euler: +1e+09 J"]  # the off-panel run is marked with its last finite value
    plt.close(fig)


def test_wall_time_panel_labels_only_the_time_steps_run():
    fig, ax = plt.subplots()
    dts = [0.0025, 0.01, 0.05]
    ax.plot(dts, [1.0, 0.3, 0.1])
    ax.set(xscale="log", yscale="log")
    _sparse_log_ticks(ax, dts)
    fig.canvas.draw()
    x_labels = [lab.get_text() for lab in ax.get_xticklabels() if lab.get_text()]
    assert x_labels == ["0.0025", "0.01", "0.05"]
    assert not [lab for lab in ax.get_xticklabels(minor=True) if lab.get_text()]
    assert not [lab for lab in ax.get_yticklabels(minor=True) if lab.get_text()]
    plt.close(fig)


def test_throughput_workloads_quick_run_writes_its_table(tmp_path):
    """`pbad-bench throughput --workloads --quick` end to end (no MuJoCo): every workload of issue 11 is timed
    for the Swimmer and every Spider version and lands in workloads.csv."""
    import csv

    from pbad_gym.cli import bench_main

    assert bench_main(["throughput", "--workloads", "--quick", "--no-mujoco", "--backends", "numba",
                       "--out", str(tmp_path)]) == 0
    with open(tmp_path / "throughput" / "workloads.csv") as fh:
        rows = list(csv.DictReader(fh))
    engines = {r["engine"] for r in rows}
    assert {"Swimmer-v1 numba", "Spider-v2 numba", "Spider-v1 numba", "Spider-v0 numba"} <= engines
    assert all(float(r["value"]) > 0 for r in rows)


def test_throughput_set_makes_the_swept_envs_with_its_keywords(tmp_path, monkeypatch):
    """`pbad-bench throughput --set KEY=VALUE`: every pbad_gym env of the sweep is made with those keywords."""
    import csv

    from pbad_gym.bench import throughput
    from pbad_gym.cli import bench_main

    made = []
    real = throughput._make_pbad
    monkeypatch.setattr(throughput, "_make_pbad", lambda *a, **kw: made.append(kw) or real(*a, **kw))
    assert bench_main(["throughput", "--quick", "--no-mujoco", "--envs", "Spider-v4", "--batches", "2",
                       "--backends", "numba", "--set", "integrator=bdf2", "penalty_springs=implicit", "dt=0.005",
                       "--out", str(tmp_path)]) == 0
    assert made and all(kw == {"integrator": "bdf2", "penalty_springs": "implicit", "dt": 0.005} for kw in made)
    with open(tmp_path / "throughput" / "throughput.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["env"], r["num_envs"]) for r in rows] == [("Spider-v4", "2")]
