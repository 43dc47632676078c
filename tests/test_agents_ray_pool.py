"""How the trainers join Ray and size their actor pool, on a stand-in ``ray`` module (no cluster is started):
``ray_address`` null starts this run's own local cluster even beside one ``ray start --head`` left running; a
joined cluster gets no resource arguments; a pool a joined cluster cannot hold is refused within the wait."""
import time
from types import SimpleNamespace

import pytest

from pbad_gym.agents import distributed
from pbad_gym.agents.config import EnvConfig


def _fake_ray(monkeypatch, resources):
    """A ``ray`` whose cluster reports ``resources()`` (a callable) and that records ``ray.init``'s arguments."""
    calls = []
    state = {"up": False}

    def init(**kwargs):
        if kwargs.get("address") not in ("local", None) and ("num_cpus" in kwargs or "num_gpus" in kwargs):
            raise ValueError("When connecting to an existing cluster, num_cpus and num_gpus must not be provided.")
        calls.append(kwargs)
        state["up"] = True

    ray = SimpleNamespace(init=init, is_initialized=lambda: state["up"], cluster_resources=resources)
    monkeypatch.setattr(distributed, "import_ray", lambda: ray)
    return calls


def test_a_local_cluster_gets_the_cpus_and_a_joined_one_no_resources(monkeypatch):
    calls = _fake_ray(monkeypatch, lambda: {"CPU": 4.0})
    distributed.init_ray(None, num_cpus=3)
    # "local": Ray would otherwise join the cluster `ray start --head` left running, and refuse num_cpus there
    assert calls[0]["address"] == "local" and calls[0]["num_cpus"] >= 3
    for address in ("auto", "10.0.0.2:6379"):
        calls = _fake_ray(monkeypatch, lambda: {"CPU": 4.0})
        distributed.init_ray(address, num_cpus=3)
        assert calls == [{"address": address, "log_to_driver": True}]


def test_a_pool_a_joined_cluster_cannot_hold_is_refused_within_the_wait(monkeypatch):
    _fake_ray(monkeypatch, lambda: {"CPU": 2.0})
    monkeypatch.setattr(distributed, "POOL_WAIT_S", 0.3)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"workers=3 × worker_cpus=1 need 3 CPUs; the Ray cluster has 2 CPUs"):
        distributed.RayVectorEnv(EnvConfig(id="pbad_gym/Swimmer-v1"), 6, 3, ray_address="auto")
    assert time.monotonic() - t0 < 5


def test_a_joined_cluster_that_grows_within_the_wait_is_accepted(monkeypatch):
    t0 = time.monotonic()
    _fake_ray(monkeypatch, lambda: {"CPU": 2.0 if time.monotonic() - t0 < 0.2 else 4.0})  # an autoscaler's node
    distributed.check_pool_fits(3, 1, 0, address="auto", wait_s=5.0)


def test_pbad_train_refuses_the_pool_before_creating_the_run_folder(tmp_path, monkeypatch, capsys):
    from pbad_gym.cli import train_main

    _fake_ray(monkeypatch, lambda: {"CPU": 2.0})
    monkeypatch.setattr(distributed, "POOL_WAIT_S", 0.1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("name: x\nenv: {id: Pendulum-v1}\ncmaes: {popsize: 6, iterations: 1}\n")
    with pytest.raises(SystemExit) as exc:
        train_main(["c.yaml", "workers=3", "ray_address=auto", "--no-progress"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "need 3 CPUs" in err
    assert not (tmp_path / "runs").exists()
