"""pbad-train / pbad-eval against a newcomer's ordinary mistakes (issue 22): every failed start exits 2 with one
line and leaves nothing on disk; --resume refuses what would break the run and never starts over silently;
missing and corrupt run files are named; Ctrl-C prints the resume command; run folders are claimed atomically."""
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pbad_gym.cli import eval_main, train_main

PEND = "name: pend\nenv: {id: Pendulum-v1}\ncmaes: {policy: linear, popsize: 4, iterations: 1, episode_steps: 20}\n"
SWIM = ("name: swim\nenv: {id: pbad_gym/Swimmer-v1}\n"
        "cmaes: {policy: oscillator, popsize: 4, iterations: 1, episode_steps: 20}\n")
PPO = ("name: ppo\nalgo: ppo\nenv: {id: Pendulum-v1, num_envs: 2}\n"
       "ppo: {total_timesteps: 32, num_steps: 8, num_minibatches: 1, update_epochs: 1, hidden: [8]}\n")
CLI = [sys.executable, "-c", "import sys; from pbad_gym.cli import train_main; sys.exit(train_main())"]


def _error_line(main, argv, capsys) -> str:
    """The one stderr line of a command that must exit 2."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in (("pend.yaml", PEND), ("swim.yaml", SWIM), ("ppo.yaml", PPO)):
        Path(name).write_text(text)
    return tmp_path


@pytest.fixture
def pend_run(cwd, capsys):
    """A finished one-iteration CMA-ES run on Pendulum: runs/pend."""
    assert train_main(["pend.yaml", "--no-progress"]) == 0
    capsys.readouterr()
    return cwd / "runs" / "pend"


def _files(run):
    return {p.name: p.read_bytes() for p in run.iterdir()}


# --- 1. run folders -------------------------------------------------------------------------------------------
def test_runs_started_together_never_share_a_folder(tmp_path):
    from pbad_gym.agents.runio import create_run_dir

    n, barrier, made = 8, threading.Barrier(8), []

    def start():
        barrier.wait()  # every thread claims a name at the same moment
        made.append(create_run_dir(tmp_path / "runs", "swim"))

    threads = [threading.Thread(target=start) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == n and all(p.is_dir() for p in made)
    assert sorted(p.name for p in made) == sorted(["swim"] + [f"swim-{k}" for k in range(2, n + 1)])


# --- 5. failed starts -----------------------------------------------------------------------------------------
MUJOCO = importlib.util.find_spec("mujoco") is not None


@pytest.mark.parametrize("config, override, named", [
    ("swim.yaml", "env.kwargs={foo: 1}", "foo"), ("swim.yaml", "env.kwargs={gear: abc}", "gear"),
    ("swim.yaml", "env.kwargs={dt: -1}", "dt"), ("swim.yaml", "env.kwargs={gear: '40'}", "gear"),
    ("swim.yaml", "env.kwargs={frame_skip: 2.0}", "frame_skip"), ("pend.yaml", "seed=-1", "seed"),
    ("pend.yaml", "seed=99999999999", "seed"), ("pend.yaml", "seed=.inf", "seed"),
    ("pend.yaml", "cmaes.sigma0=.nan", "cmaes.sigma0"), ("pend.yaml", "env.id=CartPole-v1", "CartPole-v1"),
    pytest.param("pend.yaml", "env.id=Swimmer-v5", "Swimmer-v5",
                 marks=pytest.mark.skipif(MUJOCO, reason="mujoco is installed: Swimmer-v5 starts")),
    ("ppo.yaml", "ppo.total_timesteps=8", "ppo.total_timesteps")])
def test_a_failed_start_exits_2_with_one_line_and_leaves_nothing(cwd, capsys, config, override, named):
    line = _error_line(train_main, [config, override, "--no-progress"], capsys)
    assert named in line
    assert not (cwd / "runs").exists()


# --- 7. overrides anywhere ------------------------------------------------------------------------------------
def test_overrides_after_a_flag_are_accepted(cwd, capsys):
    assert train_main(["pend.yaml", "--no-progress", "cmaes.iterations=2", "name=late"]) == 0
    rows = (cwd / "runs" / "late" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 2


# --- 2. --resume overrides ------------------------------------------------------------------------------------
@pytest.mark.parametrize("override, key", [
    ("cmaes.popsize=6", "cmaes.popsize"), ("cmaes.policy=mlp", "cmaes.policy"),
    ("env.id=MountainCarContinuous-v0", "env.id"), ("env.kwargs={g: 9.0}", "env.kwargs"), ("algo=ppo", "algo")])
def test_resume_refuses_a_shape_or_task_change_and_writes_nothing(pend_run, capsys, override, key):
    before = _files(pend_run)
    line = _error_line(train_main, ["--resume", str(pend_run), override], capsys)
    assert key in line and "--resume" in line
    assert _files(pend_run) == before  # config.yaml byte-identical, nothing else touched
    assert train_main(["--resume", str(pend_run), "cmaes.iterations=2", "--no-progress"]) == 0
    assert len((pend_run / "metrics.csv").read_text().splitlines()) == 1 + 2


# --- 3. / 4. missing and corrupt run files --------------------------------------------------------------------
def test_resume_without_a_checkpoint_is_an_error_and_overwrites_nothing(pend_run, capsys):
    (pend_run / "checkpoint.pkl").unlink()
    before = _files(pend_run)
    line = _error_line(train_main, ["--resume", str(pend_run), "cmaes.iterations=3"], capsys)
    assert "checkpoint.pkl does not exist" in line and "fresh run" in line
    assert _files(pend_run) == before


@pytest.mark.parametrize("name", ["checkpoint.pkl", "config.yaml"])
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_damaged_file_stops_resume_with_one_line_naming_it(pend_run, capsys, name, damage):
    path = pend_run / name
    path.write_bytes(b"" if damage == "empty" else path.read_bytes()[:len(path.read_bytes()) // 3])
    before = _files(pend_run)
    assert name in _error_line(train_main, ["--resume", str(pend_run), "--no-progress"], capsys)
    assert _files(pend_run) == before


@pytest.mark.parametrize("name", ["best_policy.pkl", "config.yaml"])
@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_a_damaged_file_stops_eval_with_one_line_naming_it(pend_run, capsys, name, damage):
    path = pend_run / name
    data = {"empty": b"", "truncated": path.read_bytes()[:len(path.read_bytes()) // 3],
            "garbage": b"\x80\x04\x95\xff\x00garbage\x93\xff"}[damage]
    path.write_bytes(data)
    assert name in _error_line(eval_main, [str(pend_run), "--episodes", "1"], capsys)


# --- 9. PPO without a finished episode, iteration numbering, --gif up front -----------------------------------
def test_ppo_without_an_episode_names_no_missing_file_and_resumes_refusals(cwd, capsys):
    pytest.importorskip("torch")
    assert train_main(["ppo.yaml", "--no-progress"]) == 0
    out = capsys.readouterr().out
    run = cwd / "runs" / "ppo"
    assert not (run / "best_policy.pkl").exists()
    assert "no episode finished" in out and "pbad-eval" not in out and "return_mean" not in out
    rows = (run / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2"]  # numbered from 1, as CMA-ES's
    before = _files(run)
    for override, key in (("ppo.hidden=[16]", "ppo.hidden"), ("env.num_envs=4", "env.num_envs")):
        assert key in _error_line(train_main, ["--resume", str(run), override], capsys)
    (run / "checkpoint.pkl").unlink()  # as a PPO run killed before its first checkpoint
    assert "checkpoint.pkl does not exist" in _error_line(train_main, ["--resume", str(run)], capsys)
    assert _files(run) == {k: v for k, v in before.items() if k != "checkpoint.pkl"}


def test_cmaes_metrics_count_iterations_from_1(cwd, capsys):
    assert train_main(["pend.yaml", "cmaes.iterations=2", "--no-progress"]) == 0
    rows = (cwd / "runs" / "pend" / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2"]
    assert "done: iteration 2," in capsys.readouterr().out


def test_eval_checks_the_gif_path_before_any_episode(pend_run, capsys, monkeypatch):
    from pbad_gym.agents import rollout

    def never(*args, **kwargs):
        raise AssertionError("an episode ran before the --gif path was checked")

    monkeypatch.setattr(rollout, "evaluate", never)
    line = _error_line(eval_main, [str(pend_run), "--gif", "missing/dir/x.gif"], capsys)
    assert "missing/dir" in line


# --- 6. Ctrl-C ------------------------------------------------------------------------------------------------
def test_ctrl_c_prints_the_resume_command_and_exits_130(cwd):
    config = PEND.replace("iterations: 1", "iterations: 100000")
    Path("long.yaml").write_text(config)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    # a shell that started the test in the background may have left SIGINT ignored: restore Ctrl-C's default
    proc = subprocess.Popen(CLI + ["long.yaml", "--no-progress"], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    checkpoint = cwd / "runs" / "pend" / "checkpoint.pkl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not checkpoint.exists():
        time.sleep(0.02)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [f"pbad-train: interrupted; continue with: pbad-train --resume "
                                        f"{Path('runs') / 'pend'}"]


# --- 10. the kernel compile -----------------------------------------------------------------------------------
def test_compile_is_announced_and_the_progress_bar_starts_after_the_first_iteration(cwd, capsys, monkeypatch):
    import tqdm.auto

    from pbad_gym.agents import preflight

    monkeypatch.setattr(preflight, "kernel_cache_cold", lambda: True)
    seen = []
    real = tqdm.auto.tqdm

    def bar(*args, **kwargs):  # the rows written when the bar opens: its clock must not count the first
        seen.append((len((cwd / "runs" / "pend" / "metrics.csv").read_text().splitlines()) - 1, kwargs["initial"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(tqdm.auto, "tqdm", bar)
    assert train_main(["pend.yaml", "cmaes.iterations=3"]) == 0
    assert "compiling the simulation kernel, once: about a minute" in capsys.readouterr().out
    assert seen == [(1, 1)]


def test_a_cold_numba_cache_is_detected(tmp_path):
    code = ("import gymnasium, pbad_gym\nfrom pbad_gym.agents.preflight import kernel_cache_cold\n"
            "assert not kernel_cache_cold()  # the kernel is not in use yet\n"
            "gymnasium.make_vec('pbad_gym/Swimmer-v1', num_envs=1, vectorization_mode='vector_entry_point')\n"
            "print(kernel_cache_cold())\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
