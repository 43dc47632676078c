import pytest

from pbad_gym.bench import BENCHMARKS
from pbad_gym.cli import bench_main


def test_every_benchmark_module_imports_and_parses_its_options():
    import importlib

    for name, mod in BENCHMARKS.items():
        m = importlib.import_module(mod)
        assert callable(m.add_arguments) and callable(m.run), name


def test_unknown_benchmark_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        bench_main(["nope"])
    assert "invalid choice" in capsys.readouterr().err


def test_fig3_quick_runs(tmp_path, monkeypatch):
    import pbad_gym.bench.fig3 as fig3

    monkeypatch.setattr(fig3, "NS", (3,))
    monkeypatch.setattr(fig3, "DTS", (0.05,))
    assert bench_main(["fig3", "--quick", "--steps", "1", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "fig3" / "fig3abc.csv").read_text().count("\n") == 7  # header + 2 orders x 3 optimisers
    assert (tmp_path / "fig3" / "fig3.png").stat().st_size > 0
