import csv

import numpy as np
import pytest

pytest.importorskip("torch")

from pbad_gym.agents import policies, ppo, ppo_lagrangian, runio  # noqa: E402
from pbad_gym.agents.config import config_from_dict  # noqa: E402


def _train_killed_after_iteration_3(monkeypatch, cfg, run_dir):
    """Train into ``run_dir`` and kill the run right after iteration 3's metrics row (its last checkpoint is the one
    after iteration 2)."""
    real_append = runio.MetricsLog.append

    def dying_append(self, row):
        real_append(self, row)
        if row["iteration"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(runio.MetricsLog, "append", dying_append)
    with pytest.raises(KeyboardInterrupt):
        ppo.train(cfg, run_dir, progress=False)
    monkeypatch.setattr(runio.MetricsLog, "append", real_append)


def test_gae_bootstraps_truncation_not_termination():
    gamma, lam = 0.9, 0.8
    # 3 steps of one env: step 0 ordinary, step 1 truncated (time limit), step 2 the autoreset step
    rewards = np.array([[1.0], [2.0], [0.0]])
    values = np.array([[0.5], [0.7], [3.0]])  # values[2] = V(final observation of the truncated episode)
    next_value = np.array([4.0])
    ended = np.array([[False], [True], [False]])
    adv, ret = ppo.compute_gae(rewards, values, next_value, np.zeros_like(ended), ended, gamma, lam)
    a1 = 2.0 + gamma * 3.0 - 0.7  # truncated: keeps γ·V(final observation), no chaining past it
    a0 = 1.0 + gamma * 0.7 - 0.5 + gamma * lam * a1
    np.testing.assert_allclose(adv[:2, 0], [a0, a1])
    np.testing.assert_allclose(ret, adv + values)
    # the same step terminated: no bootstrap
    adv_t, _ = ppo.compute_gae(rewards, values, next_value, ended, ended, gamma, lam)
    np.testing.assert_allclose(adv_t[1, 0], 2.0 - 0.7)
    # the rollout's last step bootstraps with next_value
    np.testing.assert_allclose(adv[2, 0], 0.0 + gamma * 4.0 - 3.0)


# Pendulum through a SyncVectorEnv (does not pickle: envs reset at checkpoint boundaries); the native Swimmer
# (pickles: the episodes in progress travel in the checkpoint)
ENVS = {"pendulum": ({"id": "Pendulum-v1", "num_envs": 8}, 100),
        "swimmer": ({"id": "pbad_gym/Swimmer-v1", "num_envs": 4, "kwargs": {"max_episode_steps": 30}}, 16)}


def _cfg(tmp_path, env="pendulum", **ppo_over):
    env_cfg, steps = ENVS[env]
    p = {"total_timesteps": 4 * env_cfg["num_envs"] * steps, "num_steps": steps, "num_minibatches": 4,
         "update_epochs": 2, "hidden": [16], **ppo_over}
    return config_from_dict({"name": "t", "algo": "ppo", "seed": 3, "checkpoint_every": 2, "env": env_cfg,
                             "ppo": p})


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in ("wall_time", "sps")} for r in csv.DictReader(f)]


@pytest.mark.parametrize("env", sorted(ENVS))
def test_same_seed_same_metrics_and_resume_after_kill(tmp_path, monkeypatch, env):
    cfg = _cfg(tmp_path, env)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    ppo.train(cfg, a, progress=False)
    ppo.train(cfg, b, progress=False)
    rows = _rows(a)
    assert len(rows) == 4 and rows == _rows(b)
    assert all(r["value_loss"] and r["explained_variance"] for r in rows)
    assert int(rows[-1]["episodes"]) > 0 and (env == "pendulum") == (rows[-1]["distance_mean"] == "")
    assert (a / "best_policy.pkl").exists() and (a / "learning_curve.png").exists()
    assert (runio.load_pickle(a / "checkpoint.pkl")["rollout"] is None) == (env == "pendulum")

    # killed after iteration 3 (its row written, the last checkpoint after iteration 2), then resumed
    _train_killed_after_iteration_3(monkeypatch, cfg, c)
    assert len(_rows(c)) == 3
    ppo.train(cfg, c, resume=True, progress=False)
    assert _rows(c) == rows


def test_best_policy_loads_and_acts(tmp_path):
    from pbad_gym.agents.runio import load_pickle

    cfg = _cfg(tmp_path, "pendulum", total_timesteps=2 * 8 * 100, eval_episodes=2)
    ppo.train(cfg, tmp_path, progress=False)
    rows = _rows(tmp_path)
    assert all(float(r["eval_return"]) < 0 and r["eval_distance"] == "" for r in rows)  # Pendulum: no x_position
    obj = load_pickle(tmp_path / "best_policy.pkl")
    assert obj["score"] == max(float(r["eval_return"]) for r in rows)
    pol = policies.load_best(obj)
    pol.reset(5)
    a = pol.act(np.random.default_rng(0).normal(size=(5, 3)))
    assert a.shape == (5, 1) and np.all(np.abs(a) <= 2.0)
    with pytest.raises(ValueError, match="kind"):
        policies.load_best({"kind": "linear"})


def test_too_few_timesteps_names_the_fields(tmp_path):
    with pytest.raises(ValueError, match="total_timesteps"):
        ppo.train(_cfg(tmp_path, "pendulum", total_timesteps=100), tmp_path, progress=False)


def test_ppo_improves_pendulum(tmp_path):
    # Gymnasium's own Box env through make_vec (sync): the trainer uses only the public API
    cfg = config_from_dict({"name": "pend", "algo": "ppo", "seed": 0, "env": {"id": "Pendulum-v1", "num_envs": 8},
                            "ppo": {"total_timesteps": 24 * 8 * 200, "num_steps": 200, "gamma": 0.9,
                                    "learning_rate": 1e-3, "num_minibatches": 8, "update_epochs": 10}})
    ppo.train(cfg, tmp_path, progress=False)
    ret = [float(r["return_mean"]) for r in _rows(tmp_path)]
    assert np.mean(ret[-4:]) > np.mean(ret[:4]) + 250, ret


def test_episode_tracker_masks_reset_steps_and_measures_distance():
    from pbad_gym.agents.episodes import EpisodeTracker

    tr = EpisodeTracker(2)
    info = lambda x, div=(False, False): {"x_position": np.array(x), "diverged": np.array(div)}  # noqa: E731
    f, t = np.array([False, False]), np.array([True, False])
    tr.step(np.array([1.0, 1.0]), f, f, ~f, info([0.1, 5.0]))
    tr.step(np.array([2.0, 1.0]), f, t, ~f, info([0.6, 5.5]))       # row 0 truncated
    tr.step(np.array([0.0, 1.0]), f, f, ~t, info([0.0, 9.0], (False, True)))  # row 0 reset step; row 1 diverged
    eps = tr.pop()
    assert len(eps) == 1 and eps[0].ret == 3.0 and eps[0].length == 2 and not eps[0].terminated
    np.testing.assert_allclose(eps[0].distance, 0.5)
    tr.step(np.array([1.0, 0.0]), f, np.array([False, True]), ~f, info([0.2, 0.0], (False, True)))
    (e1,) = tr.pop()
    assert e1.diverged and e1.length == 4 and e1.ret == 3.0
    np.testing.assert_allclose(e1.distance, 0.5)  # the diverged steps' positions are not used
    tr.step(np.array([1.0, 0.0]), t, t, np.array([True, False]), info([0.5, 0.0]))
    (e0,) = tr.pop()
    assert e0.terminated and e0.length == 2 and e0.ret == 2.0
    np.testing.assert_allclose(e0.distance, 0.3)


def test_selection_key_prefers_healthy_evaluations():
    key = ppo.selection_key
    # at most 10 % terminated ranks above a higher return with more falls; among those, the return decides
    assert key(500.0, 0.0625, 0.1) > key(2000.0, 0.375, 0.1)
    assert key(600.0, 0.1, 0.1) > key(500.0, 0.0, 0.1)
    # none qualifies: the lower terminated share first, then the return
    assert key(100.0, 0.25, 0.1) > key(2000.0, 0.5, 0.1)
    assert key(200.0, 0.25, 0.1) > key(100.0, 0.25, 0.1)
    # max_terminated 1: the return alone
    assert key(2000.0, 0.9, 1.0) > key(500.0, 0.0, 1.0)


def test_periodic_evaluation_chooses_the_best_policy(tmp_path):
    from pbad_gym.agents.runio import load_pickle

    cfg = _cfg(tmp_path, "pendulum", total_timesteps=3 * 8 * 100, eval_episodes=2, eval_every=2)
    ppo.train(cfg, tmp_path, progress=False)
    rows = _rows(tmp_path)
    # iterations 2 and 3 (the last) are evaluated, iteration 1 is not
    assert [r["eval_return"] != "" for r in rows] == [False, True, True]
    assert all(r["eval_speed"] == "" for r in rows)  # Pendulum: no x_position
    obj = load_pickle(tmp_path / "best_policy.pkl")
    best = max(rows[1:], key=lambda r: float(r["eval_return"]))
    assert obj["iteration"] == int(best["iteration"]) and obj["score"] == float(best["eval_return"])
    assert obj["eval_terminated"] == 0.0
    with pytest.raises(ValueError, match="eval_every"):
        _cfg(tmp_path, "pendulum", eval_every=0)
    with pytest.raises(ValueError, match="select_max_terminated"):
        _cfg(tmp_path, "pendulum", select_max_terminated=1.5)


# --- PPO-Lagrangian (ppo.cost_limit) ---

def test_episode_cost_only_at_unhealthy_termination():
    term = np.array([True, True, False, False, True])
    valid = np.array([True, True, True, True, False])   # row 4: a NEXT_STEP reset step
    diverged = np.array([False, True, True, False, False])
    # row 0 fell (cost 1); row 1 diverged (a truncation, never terminated, but guarded); row 2 truncated as
    # diverged; row 3 running or cut by the time limit; row 4 not a step of an episode
    np.testing.assert_array_equal(ppo_lagrangian.episode_cost(term, valid, diverged), [1.0, 0.0, 0.0, 0.0, 0.0])


def test_lagrange_multiplier_dual_ascent():
    step = ppo_lagrangian.lagrangian_step
    assert step(1.0, 0.5, 0.1, 0.2) == pytest.approx(1.0 + 0.2 * 0.4)   # above the limit: λ rises
    assert step(1.0, 0.0, 0.1, 0.2) == pytest.approx(1.0 - 0.2 * 0.1)   # below: λ falls
    assert step(0.01, 0.0, 0.1, 0.2) == 0.0                             # ... clipped at 0
    assert step(0.0, 0.1, 0.1, 0.2) == 0.0                              # at the limit: unchanged
    assert step(0.7, None, 0.1, 0.2) == 0.7                             # no episode ended: no step


def test_lagrangian_off_by_default_changes_nothing(tmp_path):
    # cost_limit null (the default) leaves the other Lagrangian keys inert: same metrics, same columns, no cost
    # critic in the checkpoint
    a, b = tmp_path / "a", tmp_path / "b"
    ppo.train(_cfg(tmp_path, "swimmer"), a, progress=False)
    ppo.train(_cfg(tmp_path, "swimmer", cost_limit=None, lagrangian_lr=5.0, lagrangian_init=3.0), b,
              progress=False)
    assert _rows(a) == _rows(b)
    with open(a / "metrics.csv") as f:
        assert next(csv.reader(f)) == ppo.METRICS
    ckpt = runio.load_pickle(a / "checkpoint.pkl")
    assert not any(k.startswith("cost_critic") for k in ckpt["model"]) and "lagrange_multiplier" not in ckpt["state"]


SPIDER = {"id": "pbad_gym/Spider-v1", "num_envs": 4, "kwargs": {"max_episode_steps": 40}}


def _spider_cfg(**ppo_over):
    # σ = 1 actions flip the Spider within a few dozen steps: most episodes end unhealthy
    p = {"total_timesteps": 4 * 4 * 16, "num_steps": 16, "num_minibatches": 2, "update_epochs": 2, "hidden": [16],
         "init_log_std": 0.0, "cost_limit": 0.1, "lagrangian_lr": 0.5, "lagrangian_init": 0.2, **ppo_over}
    return config_from_dict({"name": "t", "algo": "ppo", "seed": 1, "checkpoint_every": 2, "env": SPIDER, "ppo": p})


def test_lagrangian_spider_resumes_exactly_and_tracks_the_fall_rate(tmp_path, monkeypatch):
    pytest.importorskip("pbad_gym.envs.spider")
    cfg = _spider_cfg()
    a, c = tmp_path / "a", tmp_path / "c"
    ppo.train(cfg, a, progress=False)
    rows = _rows(a)
    assert list(rows[0]) == [m for m in ppo.METRICS + ppo_lagrangian.METRICS if m not in ("wall_time", "sps")]
    lam = 0.2
    for r in rows:
        n, falls = int(r["episodes"]), int(r["terminated"])
        rate = falls / n if n else None
        assert r["fall_rate"] == ("" if rate is None else str(rate))
        lam = ppo_lagrangian.lagrangian_step(lam, rate, 0.1, 0.5)
        assert float(r["lagrange_multiplier"]) == pytest.approx(lam)
        assert float(r["cost_value_loss"]) >= 0
    assert sum(int(r["terminated"]) for r in rows) > 0 and lam > 0.2  # the Spider falls: λ rose
    ckpt = runio.load_pickle(a / "checkpoint.pkl")
    assert ckpt["state"]["lagrange_multiplier"] == pytest.approx(lam)
    assert any(k.startswith("cost_critic") for k in ckpt["model"])
    assert (a / "learning_curve.png").exists()

    # killed after iteration 3 (the last checkpoint after iteration 2, λ in it), resumed: the same metrics
    _train_killed_after_iteration_3(monkeypatch, cfg, c)
    ppo.train(cfg, c, resume=True, progress=False)
    assert _rows(c) == rows


@pytest.mark.parametrize("key, value", [("cost_limit", 1.5), ("cost_limit", -0.1), ("cost_limit", "often"),
                                        ("lagrangian_lr", 0.0), ("lagrangian_lr", -1.0),
                                        ("lagrangian_init", -0.5)])
def test_lagrangian_validation_names_the_key(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        _cfg(tmp_path, "pendulum", **{key: value})
