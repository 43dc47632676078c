"""Gymnasium's locomotion robots in PBAD (Hopper-v0, Walker2d-v0, HalfCheetah-v0, Ant-v0), read from Gymnasium's
own MJCF files: the spaces, info and definitions of their v5 peers, Gymnasium's checkers and wrappers, a converged
random-action stress test, and Ant-v0's body equal to Spider-v3's."""
import os
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import pbad_gym  # noqa: F401  (registers the environments)

mujoco = pytest.importorskip("mujoco")
from pbad_gym.envs.locomotion import (ASSETS, AntVectorEnv, HalfCheetahVectorEnv, HopperVectorEnv,  # noqa: E402
                                      Walker2dVectorEnv, contact_defaults)

PEERS = {"pbad_gym/Hopper-v0": "Hopper-v5", "pbad_gym/Walker2d-v0": "Walker2d-v5",
         "pbad_gym/HalfCheetah-v0": "HalfCheetah-v5", "pbad_gym/Ant-v0": "Ant-v5"}
CLASSES = [HopperVectorEnv, Walker2dVectorEnv, HalfCheetahVectorEnv, AntVectorEnv]


@pytest.mark.parametrize("env_id", sorted(PEERS))
def test_check_env_and_the_v5_peers_spaces_and_info(env_id):
    pytest.importorskip("imageio")  # Gymnasium's MuJoCo envs import it (the mujoco extra; mjcf alone lacks it)
    env, peer = gym.make(env_id), gym.make(PEERS[env_id])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    assert env.spec.max_episode_steps == 1000
    assert env.observation_space.shape == peer.observation_space.shape
    assert env.action_space.shape == peer.action_space.shape
    assert env.unwrapped.dt == pytest.approx(peer.unwrapped.dt)
    _, info0 = env.reset(seed=0)
    _, peer_info0 = peer.reset(seed=0)
    assert set(peer_info0) <= set(info0)
    a = env.action_space.sample()
    info, peer_info = env.step(a)[4], peer.step(a)[4]
    assert set(peer_info) <= set(info)
    assert info["cone_excess"] >= 0 and info["converged"]


@pytest.mark.parametrize("cls", CLASSES)
def test_observation_and_reward_follow_v5(cls):
    env = cls(num_envs=3, terminate_when_unhealthy=False) if cls is not HalfCheetahVectorEnv else cls(num_envs=3)
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(1)
    x0 = np.asarray(env.sim.q)[:, 0].copy()
    obs, r, term, _, info = env.step(rng.uniform(-1, 1, (3,) + env.single_action_space.shape))
    q, qd = np.asarray(env.sim.q), np.asarray(env.sim.qd)
    n = 2 if cls is AntVectorEnv else 1
    np.testing.assert_array_equal(obs[:, :env.body.nq - n], q[:, n:].astype(np.float32))
    vel = qd if cls in (HalfCheetahVectorEnv, AntVectorEnv) else np.clip(qd, -10, 10)
    np.testing.assert_array_equal(obs[:, env.body.nq - n:env.body.nq - n + env.body.nv], vel.astype(np.float32))
    np.testing.assert_allclose(info["x_velocity"], (q[:, 0] - x0) / env.dt, rtol=1e-12)
    np.testing.assert_allclose(r, sum(v for k, v in info.items() if k.startswith("reward_")), rtol=0, atol=1e-12)
    assert np.all(info["reward_ctrl"] < 0)


def test_hopper_health_is_v5s():
    env = HopperVectorEnv(num_envs=4)
    q = np.tile(env.init_qpos, (4, 1))
    qd = np.zeros((4, env.body.nv))
    q[1, 1] = 0.69  # too low
    q[2, 2] = 0.21  # torso tilted too far
    qd[3, 4] = 101.0  # a joint too fast
    np.testing.assert_array_equal(env.healthy(q, qd), [True, False, False, False])


@pytest.mark.parametrize("env_id", sorted(PEERS))
def test_random_actions_on_16_rows_stay_converged_and_finite(env_id):
    env = gym.make_vec(env_id, num_envs=16, vectorization_mode="vector_entry_point")
    env.reset(seed=2)
    rng = np.random.default_rng(2)
    excess = friction = 0.0
    for _ in range(300 if "Hopper" in env_id or "Walker" in env_id else 60):
        obs, r, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        assert info["converged"].all() and not info["diverged"].any()
        assert np.isfinite(obs).all() and np.isfinite(r).all()
        F = env.unwrapped.contact_forces()
        excess += info["cone_excess"].sum()
        friction += np.linalg.norm(F[..., :2], axis=-1).sum()
    assert excess <= 1e-2 * friction  # friction outside its cone: at most 1 % (Spider-v3's must-show)


@pytest.mark.parametrize("env_id", ["pbad_gym/Hopper-v0", "pbad_gym/Ant-v0"])
def test_native_and_sync_vectorisation_agree_bit_for_bit(env_id):
    kw = dict(num_envs=3, max_episode_steps=5)
    native = gym.make_vec(env_id, vectorization_mode="vector_entry_point", **kw)
    sync = gym.make_vec(env_id, vectorization_mode="sync", **kw)
    np.testing.assert_array_equal(native.reset(seed=5)[0], sync.reset(seed=5)[0])
    rng = np.random.default_rng(5)
    for _ in range(12):  # through the autoreset
        a = rng.uniform(-1, 1, native.action_space.shape).astype(np.float32)
        for x, y in zip(native.step(a)[:4], sync.step(a)[:4]):
            np.testing.assert_array_equal(x, y)


def test_gymnasium_vector_wrappers_and_pickling():
    env = gym.make_vec("pbad_gym/Walker2d-v0", num_envs=4, max_episode_steps=5, terminate_when_unhealthy=False)
    env = gym.wrappers.vector.RecordEpisodeStatistics(gym.wrappers.vector.NormalizeObservation(
        gym.wrappers.vector.ClipAction(env)))
    env.reset(seed=0)
    episodes = 0
    for _ in range(11):
        info = env.step(3 * np.ones(env.action_space.shape, np.float32))[4]
        episodes += int(info["_episode"].sum()) if "episode" in info else 0
    assert episodes == 8
    a = HalfCheetahVectorEnv(num_envs=2)
    a.reset(seed=0)
    b = pickle.loads(pickle.dumps(a))
    act = np.full((2, 6), 0.3)
    np.testing.assert_array_equal(a.step(act)[0], b.step(act)[0])


def test_torch_observations():
    torch = pytest.importorskip("torch")
    env = HopperVectorEnv(num_envs=2, array_type="torch")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.shape == (2, 11)


def test_resets_start_clear_of_the_floor_and_heavy_noise_is_lifted():
    from pbad_gym.envs.spider import lowest_clearance

    for cls in CLASSES:
        gap = lambda env: lowest_clearance(env.body, np.asarray(env.sim.q))  # noqa: E731
        env = cls(num_envs=200)
        env.reset(seed=0)
        assert gap(env).min() >= -1e-12, cls.__name__  # v5's noise: nothing starts in the floor
        env = cls(num_envs=50, reset_noise_scale=0.3)
        env.reset(seed=0)
        clear = gap(env)
        assert clear.min() >= -1e-12 and np.sum(np.abs(clear) < 1e-12) >= 1, cls.__name__  # some rows lifted


def test_ant_v0_is_spider_v3s_body():
    """Ant-v0 (from ant.xml) and Spider-v3 (written in Python) have the same mass matrix and bias forces, with
    ant.xml's flipped knee axes (legs 2 and 3) and its knee angle measured from the horizontal (Spider-v3's from its
    30° limit)."""
    from pbad_gym.dynamics import crba, rnea
    from pbad_gym.envs import SpiderV3VectorEnv

    ant, spider = AntVectorEnv(num_envs=1).body, SpiderV3VectorEnv(num_envs=1).body
    assert ant.total_mass == pytest.approx(spider.total_mass, rel=1e-12)
    sign = np.array([1, 1, 1, -1, 1, -1, 1, 1.0])
    S = np.diag(np.r_[np.ones(6), sign])
    rng = np.random.default_rng(0)
    for _ in range(3):
        qa = ant.meta["qpos0"].copy()
        qa[3:7] = rng.standard_normal(4)
        qa[3:7] /= np.linalg.norm(qa[3:7])
        qa[7:] = rng.uniform(-0.5, 0.5, 8)
        qs = qa.copy()
        qs[7:] = sign * qa[7:]
        qs[8::2] -= np.deg2rad(30.0)
        np.testing.assert_allclose(S @ crba(ant, qa[None])[0] @ S, crba(spider, qs[None])[0], atol=1e-14)
        va = rng.standard_normal(14)
        ha = rnea(ant, qa[None], va[None], np.zeros((1, 14)))[0]
        hs = rnea(spider, qs[None], (S @ va)[None], np.zeros((1, 14)))[0]
        np.testing.assert_allclose(S @ ha, hs, atol=1e-13)


def test_ant_cfrc_ext_holds_the_robots_weight_at_rest():
    env = AntVectorEnv(num_envs=1, reset_noise_scale=0.0)
    env.reset(seed=0)
    for _ in range(100):  # 5 s: the limp robot lands and settles (within 4 s)
        env.step(np.zeros((1, 8)))
    w = env.cfrc_ext()[0]
    assert w.shape == (13, 6)
    assert w[:, 5].sum() == pytest.approx(env.body.total_mass * 9.81, rel=1e-6)
    np.testing.assert_allclose(w[:, 3:5].sum(0), 0.0, atol=1e-6)


def test_a_modified_xml_builds_the_same_env(tmp_path):
    text = open(os.path.join(ASSETS, "hopper.xml")).read().replace('gear="200.0"', 'gear="100.0"')
    path = tmp_path / "weak_hopper.xml"
    path.write_text(text)
    env = gym.make("pbad_gym/Hopper-v0", xml_file=str(path))
    np.testing.assert_array_equal(env.unwrapped.vec.gear, 100.0)
    env.reset(seed=0)
    env.step(env.action_space.sample())


@pytest.mark.parametrize("kwargs, match", [({"xml_file": "missing.xml"}, "missing.xml"),
                                           ({"dt": 0.003}, "dt"), ({"mu": -1.0}, "mu"),
                                           ({"contact_stiffness": -5.0}, "contact_stiffness"),
                                           ({"healthy_z_range": (1.0, 0.5)}, "healthy_z_range"),
                                           ({"frame_skip": 0}, "frame_skip"),
                                           ({"friction_onset": "first"}, "friction_onset")])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        HopperVectorEnv(**kwargs)


def test_friction_onset_reaches_the_contact():
    """The MJCF robots keep their v0 onset ("lagged") and take Spider-v5's on request."""
    assert HopperVectorEnv().sim.model.forces.contact.friction_onset == "lagged"
    env = HopperVectorEnv(num_envs=2, friction_onset="step")
    assert env.sim.model.forces.contact.friction_onset == "step"
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.zeros((2, 3)))
    assert np.all(np.isfinite(np.asarray(env.sim.q)))


def test_ctrlrange_other_than_unit_is_refused(tmp_path):
    text = open(os.path.join(ASSETS, "hopper.xml")).read().replace('ctrlrange="-1.0 1.0"', 'ctrlrange="-2 2"')
    path = tmp_path / "h.xml"
    path.write_text(text)
    with pytest.raises(ValueError, match="ctrlrange"):
        HopperVectorEnv(xml_file=path)


def test_contact_defaults_are_critically_damped_at_mujocos_time_constant():
    """A sphere carrying a quarter of the robot, and a limited DOF of the mean inertia, ring at 50 rad/s (MuJoCo's
    0.02 s), critically damped: the Ant sinks g/ω² = 3.9 mm on one foot's share."""
    body = AntVectorEnv(num_envs=1).body
    d = contact_defaults(body)
    m = body.total_mass / 4
    assert np.sqrt(d["contact_stiffness"] / m) == pytest.approx(50.0)
    assert d["contact_damping"] == pytest.approx(2 * np.sqrt(d["contact_stiffness"] * m))
    assert d["limit_damping"] ** 2 == pytest.approx(4 * d["limit_stiffness"] * d["limit_stiffness"] / 2500)
    assert d["limit_stiffness"] == pytest.approx(2500 * 1.017, rel=0.01)  # Ant-v5's hips and ankles: 1.03, 1.01


def test_sb3_ppo_runs_a_few_thousand_steps():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    from pbad_gym.envs import SB3VecEnv

    venv = VecMonitor(SB3VecEnv("pbad_gym/Hopper-v0", num_envs=4))
    model = PPO("MlpPolicy", venv, n_steps=512, batch_size=256, n_epochs=2, seed=0, device="cpu")
    model.learn(4096)
    assert len(model.ep_info_buffer) > 10 and all(np.isfinite(ep["r"]) for ep in model.ep_info_buffer)
