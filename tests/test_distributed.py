"""Trainers on Ray actors (``workers > 0``, agents/distributed.py): the same metrics.csv as a local run with the
same seed, an actor killed mid-iteration replaced without changing a number or losing a file, thread caps inside
the actors, and the config keys' checks. One local Ray cluster for the module (skipped without Ray)."""
import importlib.util
import os
import pickle
import sys

import numpy as np
import pytest

from pbad_gym.agents.config import config_from_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the NumPy backend: the same rows bit for bit as numba's (both are batch-independent; with numba the equalities
# below hold as well, checked by hand), and no kernel compile in each new actor process while a cache is cold
NUMPY = {"backend": "numpy"}


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    nice = os.environ.get("RAY_worker_niceness")
    if started:
        os.environ["RAY_worker_niceness"] = "0"  # as distributed.init_ray: actors not starved on a shared host
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
        if nice is None:
            os.environ.pop("RAY_worker_niceness", None)
        else:
            os.environ["RAY_worker_niceness"] = nice


def _columns(run_dir, drop=("wall_time", "sps")):
    lines = (run_dir / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    keep = [i for i, h in enumerate(header) if h not in drop]
    return [[row.split(",")[i] for i in keep] for row in lines]


def _killer(distributed, monkeypatch, at_round):
    """Make RayVectorEnv kill its first actor right after submitting its ``at_round``-th round of calls (so in
    the middle of that round's work); returns a dict with the env and what was seen."""
    seen = {"rounds": 0, "env": None, "killed": False, "threads": None}

    def on_submit(env):
        seen["rounds"] += 1
        seen["env"] = env
        if seen["threads"] is None:
            seen["threads"] = env.actor_threads()
        if seen["rounds"] == at_round:
            import ray

            ray.kill(env._actors[0], no_restart=True)
            seen["killed"] = True

    monkeypatch.setattr(distributed.RayVectorEnv, "on_submit", on_submit)
    return seen


def test_workers_equal_local_and_a_killed_actor_is_replaced(ray_cluster, tmp_path, monkeypatch):
    """CMA-ES through ``pbad-train ... workers=2`` and PPO, each against a local run of the same seed, with an
    actor killed mid-iteration in both (one test, so that pytest-xdist starts one Ray cluster, not two)."""
    from pbad_gym.agents.config import EnvConfig
    from pbad_gym.agents.distributed import RayVectorEnv

    with pytest.raises(ValueError, match=r"workers=3 × worker_cpus=1 need 3 CPUs"):  # would wait forever
        RayVectorEnv(EnvConfig(id="pbad_gym/Swimmer-v1"), 6, 3)
    _check_cmaes(tmp_path / "cmaes", monkeypatch)
    if importlib.util.find_spec("torch") is not None:
        _check_ppo(tmp_path / "ppo", monkeypatch)


def _check_cmaes(tmp_path, monkeypatch):
    from pbad_gym import cli
    from pbad_gym.agents import cmaes, distributed
    from pbad_gym.agents.runio import load_pickle

    # a linear policy on normalised observations: the merged observation statistics feed the next iteration
    base = {"name": "dist", "seed": 4, "env": {"id": "pbad_gym/Swimmer-v1", "kwargs": NUMPY},
            "cmaes": {"policy": "linear", "popsize": 5, "iterations": 3, "episode_steps": 30,
                      "episodes_per_candidate": 2, "sigma0": 0.5}}
    local = tmp_path / "local"
    cmaes.train(config_from_dict(base), local, progress=False)

    seen = _killer(distributed, monkeypatch, at_round=2)  # during iteration 1's evaluation
    overrides = ["policy=linear", "popsize=5", "iterations=3", "episode_steps=30", "episodes_per_candidate=2",
                 "sigma0=0.5"]
    argv = ["--no-progress", os.path.join(ROOT, "configs", "swimmer_quick.yaml"), "name=dist", "seed=4", "workers=2",
            f"out_dir={tmp_path / 'runs'}", "env.kwargs={backend: numpy}", *[f"cmaes.{o}" for o in overrides]]
    assert cli.train_main(argv) == 0
    remote = tmp_path / "runs" / "dist"

    assert seen["killed"] and seen["env"].replacements == 1
    numba = None if importlib.util.find_spec("numba") is None else 1
    assert all(t["NUMBA_NUM_THREADS"] == "1" and t["numba_threads"] == numba for t in seen["threads"])
    assert len({t["pid"] for t in seen["threads"]}) == 2
    assert _columns(remote) == _columns(local) and len(_columns(local)) == 1 + 3
    assert sorted(os.listdir(remote)) == sorted(os.listdir(local) + ["config.yaml"])
    a, b = load_pickle(local / "checkpoint.pkl"), load_pickle(remote / "checkpoint.pkl")
    for key in ("count", "sum", "sumsq"):
        assert np.array_equal(a["obs_stats"][key], b["obs_stats"][key])
    es_a, es_b = pickle.loads(a["es"]), pickle.loads(b["es"])  # (the pickles differ in pycma's timers)
    assert np.array_equal(es_a.mean, es_b.mean) and np.array_equal(es_a.C, es_b.C) and es_a.sigma == es_b.sigma
    assert a["best"]["return"] == b["best"]["return"]
    assert np.array_equal(load_pickle(local / "best_policy.pkl")["params"],
                          load_pickle(remote / "best_policy.pkl")["params"])


def _check_ppo(tmp_path, monkeypatch):
    from pbad_gym.agents import distributed, ppo
    from pbad_gym.agents.runio import load_pickle

    data = {"name": "ppo", "algo": "ppo", "seed": 2,
            "env": {"id": "pbad_gym/Swimmer-v1", "num_envs": 5, "kwargs": {"max_episode_steps": 12, **NUMPY}},
            "ppo": {"total_timesteps": 150, "num_steps": 15, "num_minibatches": 3, "update_epochs": 2,
                    "hidden": [16], "gamma": 0.99}}
    ppo.train(config_from_dict(data), tmp_path / "local", progress=False)
    seen = _killer(distributed, monkeypatch, at_round=20)  # a step in the middle of the second rollout
    ppo.train(config_from_dict({**data, "workers": 2}), tmp_path / "remote", progress=False)

    assert seen["killed"] and seen["env"].replacements == 1
    rows = _columns(tmp_path / "remote")
    assert rows == _columns(tmp_path / "local") and len(rows) == 1 + 2
    assert rows[1][rows[0].index("episodes")] not in ("", "0")  # episodes ended: returns were compared
    a, b = load_pickle(tmp_path / "local" / "checkpoint.pkl"), load_pickle(tmp_path / "remote" / "checkpoint.pkl")
    assert np.array_equal(a["obs_rms"]["sum"], b["obs_rms"]["sum"])
    assert b["rollout"] is not None  # the actors' blocks pickled into the checkpoint (resumable)


def test_config_keys_are_checked_naming_the_key():
    cfg = config_from_dict({"name": "x"}, ["workers=3", "ray_address=auto"])
    assert cfg.workers == 3 and cfg.ray_address == "auto" and cfg.worker_cpus == 1
    assert config_from_dict({"name": "x"}, ["ray_address=10.0.0.2:6379"]).ray_address == "10.0.0.2:6379"
    for override, key in (("workers=-1", "workers"), ("workers=1.5", "workers"), ("ray_address=cluster", "ray_address"),
                          ("worker_cpus=0", "worker_cpus")):
        with pytest.raises(ValueError, match=key):
            config_from_dict({"name": "x"}, [override])


def test_workers_without_ray_is_a_clear_error(monkeypatch):
    from pbad_gym.agents import distributed

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"\[distributed\]"):
        distributed.import_ray()
