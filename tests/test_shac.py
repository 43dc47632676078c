"""DiffVecEnv (the Swimmer's observations and rewards as torch functions of the state) and the SHAC trainer."""
import csv

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (before torch)

torch = pytest.importorskip("torch")
from pbad_gym.agents.config import config_from_dict  # noqa: E402
from pbad_gym.agents.policies import load_policy  # noqa: E402
from pbad_gym.agents.shac import train  # noqa: E402
from pbad_gym.cli import eval_main, train_main  # noqa: E402
from pbad_gym.diff import DiffVecEnv  # noqa: E402


def test_diff_env_observes_and_rewards_as_the_native_env():
    diff = DiffVecEnv("pbad_gym/Swimmer-v1", 3)
    ref = gym.make_vec("pbad_gym/Swimmer-v1", num_envs=3, vectorization_mode="vector_entry_point")
    o, (o_ref, _) = diff.reset(seed=3), ref.reset(seed=3)
    np.testing.assert_allclose(o.numpy(), o_ref, atol=1e-5)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.uniform(-1.2, 1.2, (3, 3))  # clipped by both
        o, r, term, trunc, info = diff.step(torch.tensor(a))
        o_ref, r_ref, *_, info_ref = ref.step(a)
        np.testing.assert_allclose(o.detach().numpy(), o_ref, atol=1e-5)
        np.testing.assert_allclose(r.detach().numpy(), r_ref, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(info["x_position"], info_ref["x_position"], atol=1e-9)
    assert not term.any() and not trunc.any()


def _check_action_gradient(diff, actions, rng, rel):
    """d/d(actions) of Σ_t (Σ r_t + 0.1 Σ o_t) over len(actions) steps from diff's state, against central
    differences along a random direction."""
    state = (diff.q.clone(), diff.q_prev.clone(), diff.elapsed.copy())

    def total(a):
        diff.q, diff.q_prev, diff.elapsed, diff.anchor = state[0], state[1], state[2].copy(), None
        out = 0.0
        for t in range(len(a)):
            o, r, *_ = diff.step(a[t])
            out = out + r.sum() + 0.1 * o.sum()
        return out

    actions = actions.clone().requires_grad_(True)
    total(actions).backward()
    d = torch.tensor(rng.standard_normal(actions.shape))
    h = 1e-6
    with torch.no_grad():
        fd = (total(actions + h * d) - total(actions - h * d)) / (2 * h)
    assert float((actions.grad * d).sum()) == pytest.approx(float(fd), rel=rel)


def test_rewards_are_differentiable_in_the_actions():
    diff = DiffVecEnv("pbad_gym/Swimmer-v1", 2)
    diff.reset(seed=0)
    rng = np.random.default_rng(1)
    _check_action_gradient(diff, torch.tensor(rng.uniform(-0.8, 0.8, (6, 2, 3))), rng, 1e-5)


def test_episodes_end_at_the_time_limit_and_restart():
    diff = DiffVecEnv("pbad_gym/Swimmer-v1", 2, max_episode_steps=3)
    diff.reset(seed=0)
    for t in range(3):
        o, r, term, trunc, info = diff.step(torch.zeros((2, 3)))
    assert trunc.all() and "final_obs" in info and info["done"].all()
    assert (diff.elapsed == 0).all() and not torch.equal(o, info["final_obs"])


def test_envs_without_a_differentiable_form_are_refused_by_name():
    with pytest.raises(ValueError, match="SwimmerVectorEnv"):
        DiffVecEnv("Pendulum-v1", 1)  # no native pbad_gym vector env
    with pytest.raises(ValueError, match="penalty"):
        DiffVecEnv("pbad_gym/Spider-v3", 1, contact_model="impulse")
    pytest.importorskip("mujoco")
    with pytest.raises(ValueError, match="SpiderVectorEnv"):
        DiffVecEnv("pbad_gym/Hopper-v0", 1)


SPIDER = dict(include_contact_forces_in_observation=False, contact_cost_weight=0.0)


@pytest.mark.parametrize("kwargs", [{}, SPIDER], ids=["ground-forces-observed-and-costed", "without-forces"])
def test_spider_through_contact_observes_rewards_and_terminates_as_the_native_env(kwargs):
    diff = DiffVecEnv("pbad_gym/Spider-v3", 2, **kwargs)
    ref = gym.make_vec("pbad_gym/Spider-v3", num_envs=2, vectorization_mode="vector_entry_point", backend="numpy",
                       **kwargs)
    o, (o_ref, _) = diff.reset(seed=3), ref.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(4):
        a = rng.uniform(-1, 1, (2, 8))
        o, r, term, _, info = diff.step(torch.tensor(a, requires_grad=True))
        o_ref, r_ref, term_ref, _, info_ref = ref.step(a)
        np.testing.assert_allclose(o.detach().numpy(), o_ref, atol=1e-5)
        np.testing.assert_allclose(r.detach().numpy(), r_ref, atol=1e-9)
        np.testing.assert_array_equal(term.numpy(), term_ref)
    assert diff.anchor is not None and diff.anchor.requires_grad  # the stick anchors carry the graph


@pytest.mark.parametrize("kwargs", [{"contact_cost_weight": 0.05}, SPIDER], ids=["ground-forces", "without-forces"])
def test_spider_rewards_are_differentiable_through_contact(kwargs):
    diff = DiffVecEnv("pbad_gym/Spider-v3", 1, frame_skip=5, **kwargs)  # 5 physics steps per env step
    diff.reset(seed=1)
    rng = np.random.default_rng(2)
    _check_action_gradient(diff, torch.tensor(rng.uniform(-0.5, 0.5, (3, 1, 8))), rng, 1e-4)


def _config(tmp_path, **shac):
    return config_from_dict({"name": "s", "algo": "shac", "out_dir": str(tmp_path), "checkpoint_every": 1,
                             "env": {"id": "pbad_gym/Swimmer-v1", "num_envs": 4},
                             "shac": {"total_timesteps": 128, "horizon": 8, "critic_iterations": 2, **shac}})


def _rows(path):
    with open(path) as fh:
        return [{k: v for k, v in r.items() if k not in ("wall_time", "sps")} for r in csv.DictReader(fh)]


def test_shac_writes_the_run_folder_and_resumes_to_the_same_metrics(tmp_path, monkeypatch):
    cfg = _config(tmp_path, eval_episodes=2, eval_every=2)
    row = train(cfg, tmp_path / "full", progress=False)
    assert row["iteration"] == 4 and row["env_steps"] == 128 and np.isfinite(row["eval_return"])
    full = _rows(tmp_path / "full" / "metrics.csv")
    assert {"metrics.csv", "checkpoint.pkl", "best_policy.pkl", "learning_curve.png"} <= {
        p.name for p in (tmp_path / "full").iterdir()}
    policy = load_policy(tmp_path / "full")
    a = policy.act(np.zeros((3, 16)))
    assert a.shape == (3, 3) and (np.abs(a) < 1).all()  # tanh-squashed
    import pbad_gym.agents.shac as shac

    real = shac._iteration

    def killed_at_3(cfg, run_dir, L, state, log, carried, it, iterations):
        if it == 2:
            raise KeyboardInterrupt
        return real(cfg, run_dir, L, state, log, carried, it, iterations)

    monkeypatch.setattr(shac, "_iteration", killed_at_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "cut", progress=False)
    monkeypatch.setattr(shac, "_iteration", real)
    train(cfg, tmp_path / "cut", resume=True, progress=False)
    assert _rows(tmp_path / "cut" / "metrics.csv") == full


def test_pbad_train_and_eval_run_the_shipped_config_on_a_tiny_budget(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from pathlib import Path
    config = Path(__file__).resolve().parents[1] / "configs" / "swimmer_shac.yaml"
    assert train_main([str(config), "shac.total_timesteps=256", "env.num_envs=4", "shac.horizon=8",
                       "shac.eval_episodes=1", "shac.eval_every=4", "--no-progress"]) == 0
    assert eval_main(["runs/swimmer_shac", "--episodes", "1", "--steps", "5"]) == 0


@pytest.mark.parametrize("override, expected", [("shac.horizon=0", "SHACConfig.horizon"),
                                                ("shac.total_timesteps=10", "shac.total_timesteps"),
                                                ("shac.gamma=1.5", "SHACConfig.gamma"),
                                                ("env.id=Pendulum-v1", "SwimmerVectorEnv")])
def test_bad_shac_settings_exit_2_naming_the_key(tmp_path, monkeypatch, capsys, override, expected):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\nalgo: shac\nenv: {id: pbad_gym/Swimmer-v1, num_envs: 4}\n")
    with pytest.raises(SystemExit) as exc:
        train_main([str(cfg), override, "--no-progress"])
    assert exc.value.code == 2
    assert expected in capsys.readouterr().err


def test_spider_rows_that_end_restart_with_a_fresh_contact_memory():
    from pbad_gym.energies.contact import sphere_centres
    from pbad_gym.kinematics import forward_kinematics

    diff = DiffVecEnv("pbad_gym/Spider-v3", 2, frame_skip=2, max_episode_steps=2, **SPIDER)
    diff.reset(seed=0)
    for _ in range(3):
        *_, trunc, info = diff.step(torch.zeros((2, 8)))
        if trunc.any():
            centres = sphere_centres(diff.env.body, forward_kinematics(diff.env.body, diff.q.numpy()))
            np.testing.assert_allclose(diff.anchor.detach().numpy(), centres)
            np.testing.assert_allclose(diff.spec.memory.P, centres)
    assert (diff.elapsed == 1).all()


def test_a_row_whose_physics_fails_is_truncated_and_passes_no_gradient():
    diff = DiffVecEnv("pbad_gym/Swimmer-v1", 2, max_iter=2, tol=1e-15)  # no step converges in two iterations
    o0 = diff.reset(seed=0)
    a = torch.ones((2, 3), requires_grad=True)
    o, r, term, trunc, info = diff.step(a)
    assert info["diverged"].all() and trunc.all() and not term.any()
    assert torch.equal(info["final_obs"], o0) and float(r.detach().abs().sum()) == 0.0
    (r.sum() + info["final_obs"].sum()).backward()
    assert torch.isfinite(a.grad).all() and float(a.grad.abs().sum()) == 0.0
    assert diff.info["masked"] == 2
