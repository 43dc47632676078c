"""pbad-train / pbad-eval / pbad-bench command lines: run folders, named errors, replay, the shipped configs."""
from pathlib import Path

import pytest
import yaml

from pbad_gym.agents.config import config_to_dict, load_config
from pbad_gym.cli import bench_main, eval_main, train_main

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_bench_without_a_name_fails_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        bench_main([])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: pbad-bench" in err and "fig2" in err


@pytest.mark.parametrize("override, expected", [
    ("cmaes.popsiz=3", "valid keys"), ("cmaes.policy=rnn", "['linear', 'mlp', 'oscillator']"),
    ("algo=sac", "['cmaes', 'ppo', 'shac']"), ("env.id=pbad_gym/Nope-v0", "pbad_gym ids")])
def test_bad_keys_and_values_exit_2_naming_the_valid_ones(tmp_path, capsys, override, expected):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\nenv: {id: Pendulum-v1}\n")
    with pytest.raises(SystemExit) as exc:
        train_main([str(cfg), override])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_train_writes_the_run_folder_and_eval_replays_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("name: swim\nenv: {id: pbad_gym/Swimmer-v0}\n"
                              "cmaes: {policy: oscillator, popsize: 4, iterations: 2, episode_steps: 20}\n")
    assert train_main(["c.yaml", "seed=5", "--no-progress"]) == 0
    run = tmp_path / "runs" / "swim"
    assert {p.name for p in run.iterdir()} == {"config.yaml", "metrics.csv", "checkpoint.pkl", "best_policy.pkl",
                                              "learning_curve.png"}
    resolved = load_config(run / "config.yaml")
    assert resolved.seed == 5 and config_to_dict(resolved) == yaml.safe_load((run / "config.yaml").read_text())
    out = capsys.readouterr().out
    assert f"run folder {Path('runs') / 'swim'}" in out and "distance_best" in out
    assert train_main(["c.yaml", "cmaes.iterations=1", "--no-progress"]) == 0
    assert (tmp_path / "runs" / "swim-2" / "metrics.csv").exists()  # a finished run is never overwritten

    assert eval_main([str(run), "--episodes", "3", "--steps", "20", "--gif", "best.gif", "--gif-every", "5"]) == 0
    out = capsys.readouterr().out
    assert "3 episode(s) of up to 20 steps" in out and "forward distance" in out
    assert Path("best.gif").read_bytes()[:6] == b"GIF89a"


def test_eval_of_a_folder_without_a_run_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        eval_main([str(tmp_path)])
    assert exc.value.code == 2 and "not a run folder" in capsys.readouterr().err


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert cfg.name == path.stem


def test_fig5_quick_runs_every_case(tmp_path):
    pytest.importorskip("torch")
    spider = tmp_path / "spider.yaml"
    spider.write_text("name: spider_ppo\nalgo: ppo\nenv: {id: pbad_gym/Spider-v1, num_envs: 2}\n")
    assert bench_main(["fig5", "--quick", "--tasks", "swimmer", "--out", str(tmp_path)]) == 0
    # the spider panel run on its own keeps the swimmer's rows
    assert bench_main(["fig5", "--quick", "--tasks", "spider", "--spider-config", str(spider),
                       "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "fig5" / "fig5.csv").read_text().splitlines()
    engines = {tuple(line.split(",")[:2]) for line in lines[1:]}
    assert {("swimmer", "pbad"), ("spider", "pbad")} <= engines
    assert (tmp_path / "fig5" / "fig5.png").stat().st_size > 0
    assert (tmp_path / "fig5" / "runs" / "swimmer_cmaes" / "best_policy.pkl").exists()


def test_episodes_evaluates_a_run_under_overridden_env_kwargs(tmp_path, monkeypatch, capsys):
    """``python -m pbad_gym.agents.episodes RUN --env dt=… frame_skip=…``: the kept policy under finer physics
    at the same control interval (how BENCHMARKS.md checks a learned gait at Δt/10); a malformed pair exits 2."""
    from pbad_gym.agents import episodes

    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("name: swim\nenv: {id: pbad_gym/Swimmer-v1, kwargs: {max_episode_steps: 10}}\n"
                              "cmaes: {policy: oscillator, popsize: 4, iterations: 1, episode_steps: 10}\n")
    assert train_main(["c.yaml", "--no-progress"]) == 0
    capsys.readouterr()
    assert episodes.main(["runs/swim", "--episodes", "2", "--env", "dt=0.005", "frame_skip=10"]) == 0
    fine = capsys.readouterr().out
    assert episodes.main(["runs/swim", "--episodes", "2"]) == 0
    coarse = capsys.readouterr().out
    assert "2 episodes" in fine and "length 10 steps" in fine and fine != coarse
    with pytest.raises(SystemExit) as exc:
        episodes.main(["runs/swim", "--env", "dt"])
    assert exc.value.code == 2 and "KEY=VALUE" in capsys.readouterr().err
