"""CMA-ES trainer: fitness of diverged candidates, learning through the public Gymnasium API, no stray files,
determinism, and kill/resume through the ``pbad-train`` command."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pbad_gym.agents import cmaes
from pbad_gym.agents.config import EnvConfig, config_from_dict
from pbad_gym.agents.policies import FlatPolicy, load_policy
from pbad_gym.agents.rollout import evaluate
from pbad_gym.agents.runio import load_pickle
from pbad_gym.agents.vecenv import make_vec_env

import test_agents_rollout  # noqa: F401  (registers the T1Test/* environments)


def _metrics(run_dir, drop=("wall_time", "sps")):
    lines = (run_dir / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    keep = [i for i, h in enumerate(header) if h not in drop]
    return [[row.split(",")[i] for i in keep] for row in lines]


def test_diverged_candidates_rank_below_every_other():
    f = cmaes.penalised_fitness([5.0, 100.0, -3.0, np.nan], [False, True, False, False])
    assert f[0] == -5.0 and f[2] == 3.0
    assert f[1] > f[2] and f[3] > f[2] and f[1] == f[3]  # NaN returns count as diverged
    assert np.all(np.isfinite(cmaes.penalised_fitness([1.0, 2.0], [True, True])))


def test_diverging_env_never_yields_a_diverged_best(tmp_path):
    # actions above 0.5 diverge with a large reward: without the explicit worst fitness CMA-ES would chase them
    cfg = config_from_dict({"name": "div", "env": {"id": "T1Test/Diverge-v0"},
                            "cmaes": {"popsize": 8, "iterations": 8, "episode_steps": 30, "sigma0": 1.0}})
    cmaes.train(cfg, tmp_path, progress=False)
    rows = _metrics(tmp_path, drop=())
    header = rows[0]
    assert sum(int(r[header.index("diverged")]) for r in rows[1:]) > 0
    policy = load_policy(tmp_path)
    res = evaluate(make_vec_env(EnvConfig(id="T1Test/Diverge-v0"), 1), policy, 1, 30, seeds=0)
    assert not res.diverged.any()
    assert res.returns[0] > 30 * 1.2  # learnt to push towards the 0.5 limit without crossing it


def test_trains_pendulum_through_make_vec_and_leaves_no_files_in_cwd(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    run = tmp_path / "run"
    cfg = config_from_dict({"name": "pend", "seed": 3, "env": {"id": "Pendulum-v1"},
                            "cmaes": {"policy": "mlp", "hidden": [8], "popsize": 10, "iterations": 30,
                                      "episode_steps": 100, "episodes_per_candidate": 2, "sigma0": 1.0}})
    final = cmaes.train(cfg, run, progress=False)
    assert os.listdir(cwd) == []
    assert sorted(os.listdir(run)) == ["best_policy.pkl", "checkpoint.pkl", "learning_curve.png", "metrics.csv"]
    assert final["iteration"] == 30 and final["env_steps"] == 30 * 10 * 2 * 100
    envs = make_vec_env(EnvConfig(id="Pendulum-v1", kwargs={"max_episode_steps": 100}), 16)
    policy = load_policy(run)
    trained = evaluate(envs, policy, 1, 100, seeds=1000).row_returns.mean()
    untrained = evaluate(envs, FlatPolicy(policy.spec, np.zeros(policy.spec.n_params), None, 10.0, policy.low,
                                          policy.high), 1, 100, seeds=1000).row_returns.mean()
    assert trained > untrained + 100  # Pendulum returns are negative costs


def test_same_seed_same_metrics_and_checkpoint_contents(tmp_path):
    cfg = config_from_dict({"name": "d", "env": {"id": "pbad_gym/Swimmer-v0"},
                            "cmaes": {"policy": "oscillator", "popsize": 4, "iterations": 2, "episode_steps": 30}})
    a, b = tmp_path / "a", tmp_path / "b"
    cmaes.train(cfg, a, progress=False)
    cmaes.train(cfg, b, progress=False)
    assert _metrics(a) == _metrics(b)
    ck = load_pickle(a / "checkpoint.pkl")
    assert {"es", "np_random", "seed_base", "obs_stats", "iteration", "best"} <= set(ck)
    rows = _metrics(a, drop=())
    d = rows[0].index("distance_best")
    assert all(np.isfinite(float(r[d])) for r in rows[1:])


CLI = [sys.executable, "-c", "import sys; from pbad_gym.cli import train_main; sys.exit(train_main())"]


# 40 iterations: after the kill point (5 done) the run has about a second left (measured: 0.15 s to iteration 5,
# 1.27 s in all), so a test process descheduled on a busy CI host does not miss it (with 12 iterations, 0.3 s left,
# the run once finished first and exited 0)
PENDULUM = ("name: pend\nseed: 1\nenv: {id: Pendulum-v1}\ncheckpoint_every: 3\n"
            "cmaes: {policy: linear, popsize: 6, iterations: 40, episode_steps: 200}\n")


def _run_to_completion(args, cwd):
    out = subprocess.run(CLI + args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference run: the Pendulum config run through pbad-train without interruption."""
    root = tmp_path_factory.mktemp("ref")
    (root / "pend.yaml").write_text(PENDULUM)
    _run_to_completion(["pend.yaml", "--no-progress"], root)
    return root / "runs" / "pend"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_run_resumes_to_the_same_final_metrics(tmp_path, sig, uninterrupted):
    config = tmp_path / "pend.yaml"
    config.write_text(PENDULUM)
    ref = uninterrupted

    proc = subprocess.Popen(CLI + [str(config), "out_dir=runs", "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "runs" / "pend" / "metrics.csv"
    deadline = time.time() + 240
    # kill past a checkpoint but before the next one: iteration 4 done (checkpoints after iterations 2, 5, ...)
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 1 + 5:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    run = tmp_path / "runs" / "pend"
    done = load_pickle(run / "checkpoint.pkl")["iteration"]
    assert done < 39 and len(metrics.read_text().splitlines()) - 1 > done + 1  # rows past the checkpoint exist
    out = _run_to_completion(["--resume", str(run), "--no-progress"], tmp_path)
    assert "done" in out.stdout
    assert _metrics(run) == _metrics(ref)
    assert not [f for f in os.listdir(run) if f.endswith(".tmp")]


def test_resume_without_a_checkpoint_raises_and_starts_nothing_over(tmp_path):
    from pbad_gym.agents.runio import RunFileError

    cfg = config_from_dict({"name": "p", "env": {"id": "Pendulum-v1"},
                            "cmaes": {"popsize": 4, "iterations": 2, "episode_steps": 20}})
    cmaes.train(cfg, tmp_path, progress=False)
    (tmp_path / "checkpoint.pkl").unlink()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(RunFileError, match="checkpoint.pkl does not exist"):
        cmaes.train(cfg, tmp_path, resume=True, progress=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_ctrl_c_during_the_checkpoints_pickling_stays_a_keyboard_interrupt():
    """pycma's es.pickle_dumps() turned a Ctrl-C arriving mid-pickle into an AttributeError (exit 1, no resume
    line): the checkpoint pickles the search itself."""
    import cma

    from pbad_gym.agents.cmaes import Search
    from pbad_gym.agents.stats import RunningStats

    class Interrupted:
        def __reduce__(self):
            raise KeyboardInterrupt

    es = cma.CMAEvolutionStrategy([0.0, 0.0], 1.0, {"verbose": -9})
    es.ctrl_c = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        Search(es, RunningStats(2), 0, {"return": 0.0}).state_dict(0)
