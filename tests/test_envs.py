import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import pbad_gym  # noqa: F401  (registers the environments)
from pbad_gym.envs import (SpiderEnv, SpiderV1Env, SpiderV1VectorEnv, SpiderVectorEnv, SwimmerEnv, SwimmerV1Env,
                           SwimmerV1VectorEnv, SwimmerVectorEnv)

IDS = ["pbad_gym/Swimmer-v0", "pbad_gym/Spider-v0"]
V1_IDS = ["pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1"]


def _actions(env, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n,) + env.action_space.shape).astype(np.float32)


@pytest.mark.parametrize("env_id", IDS + V1_IDS + ["pbad_gym/Spider-v2", "pbad_gym/Spider-v5"])
def test_check_env_without_warnings(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    assert env.spec.max_episode_steps == 1000


@pytest.mark.parametrize("env_id, extra", [(IDS[0], {}), (IDS[1], {}), (V1_IDS[0], {}),
                                           (V1_IDS[1], {"terminate_when_unhealthy": False}),
                                           (IDS[1], {"contact_model": "impulse"}), (IDS[0], {"order": 3}),
                                           ("pbad_gym/Spider-v2", {"terminate_when_unhealthy": False})])
def test_native_and_sync_vectorisation_agree(env_id, extra):
    kw = dict(num_envs=3, max_episode_steps=7, **extra)
    native = gym.make_vec(env_id, vectorization_mode="vector_entry_point", **kw)
    sync = gym.make_vec(env_id, vectorization_mode="sync", **kw)
    assert isinstance(native.unwrapped, (SwimmerVectorEnv, SpiderVectorEnv))
    assert native.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert native.observation_space == sync.observation_space and native.action_space == sync.action_space
    o1, _ = native.reset(seed=11)
    o2, _ = sync.reset(seed=11)
    np.testing.assert_array_equal(o1, o2)
    assert o1.dtype == native.observation_space.dtype == np.float32
    done_seen = 0
    for a in _actions(native, 16):  # two episodes end (step 7 and 15) and autoreset
        r1, r2 = native.step(a), sync.step(a)
        for x, y in zip(r1[:4], r2[:4]):
            if "contact_model" in extra or "order" in extra:  # the batched LCP pads to the batch's contact count
                np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-9)
            else:  # penalty contact: bit for bit
                np.testing.assert_array_equal(x, y)
        done_seen += int(r1[3].sum())
    assert done_seen == 6


def test_fixed_seed_reproduces_rollout_bit_for_bit():
    def rollout():
        env = SpiderVectorEnv(num_envs=4)
        obs = [env.reset(seed=123)[0]]
        for a in _actions(env, 15, seed=4):
            obs.append(env.step(a)[0])
        return np.array(obs)

    a, b = rollout(), rollout()
    np.testing.assert_array_equal(a, b)
    env = SpiderVectorEnv(num_envs=4)
    assert not np.array_equal(env.reset(seed=124)[0], a[0])


def test_reset_mask_resets_only_the_masked_rows():
    acts = _actions(SwimmerVectorEnv(num_envs=4), 10)
    ref = SwimmerVectorEnv(num_envs=4)
    env = SwimmerVectorEnv(num_envs=4)
    ref.reset(seed=0)
    env.reset(seed=0)
    for k, a in enumerate(acts):
        o_ref = ref.step(a)[0]
        o = env.step(a)[0]
        if k == 4:
            mask = np.array([False, True, False, False])
            o, _ = env.reset(options={"reset_mask": mask})
            assert not np.array_equal(o[1], o_ref[1])
        np.testing.assert_array_equal(o[[0, 2, 3]], o_ref[[0, 2, 3]])
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.array([1, 0, 0, 0])})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"foo": 1})


def test_bad_actions_raise_clear_errors():
    env = SwimmerVectorEnv(num_envs=3)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3, 3\)"):
        env.step(np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        env.step(np.full((3, 3), "a"))
    with pytest.raises(TypeError, match="dtype"):
        env.step(np.zeros((3, 3), complex))
    a = np.zeros((3, 3), np.float32)
    a[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf in sub-environment\(s\) \[1\]"):
        env.step(a)
    single = SwimmerEnv()
    single.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        single.step(np.zeros(4))
    with pytest.raises(ValueError, match="NaN"):
        single.step(np.array([0.0, np.inf, 0.0]))


def test_nonfinite_action_sanitising_option():
    env = SwimmerVectorEnv(num_envs=2, nonfinite_action="zero")
    ref = SwimmerVectorEnv(num_envs=2)
    env.reset(seed=1)
    ref.reset(seed=1)
    a = np.zeros((2, 3), np.float32)
    a[0, 0] = np.nan
    o, _, _, _, info = env.step(a)
    o_ref = ref.step(np.zeros((2, 3), np.float32))[0]
    np.testing.assert_array_equal(o, o_ref)
    assert info["action_sanitised"].tolist() == [True, False]
    with pytest.raises(ValueError, match="nonfinite_action"):
        SwimmerVectorEnv(nonfinite_action="ignore")


def test_diverged_trajectory_is_truncated_and_leaves_others_unchanged():
    acts = _actions(SpiderVectorEnv(num_envs=3), 8, seed=2)
    ref, env = SpiderVectorEnv(num_envs=3), SpiderVectorEnv(num_envs=3)
    ref.reset(seed=5)
    env.reset(seed=5)
    sim_step = env.sim._advance

    def faulty_step(tau, substeps=1, **kw):  # the engine blows up on row 1 at the 4th step
        out = sim_step(tau, substeps, **kw)
        if faulty_step.calls == 3:
            env.sim.state.q[1, 0] = np.nan
        faulty_step.calls += 1
        return out

    faulty_step.calls = 0
    env.sim._advance = faulty_step
    flagged = []
    for a in acts:
        o_ref, r_ref, *_ = ref.step(a)
        o, r, term, trunc, info = env.step(a)
        assert np.all(np.isfinite(o)) and np.all(np.isfinite(r))
        np.testing.assert_array_equal(o[[0, 2]], o_ref[[0, 2]])
        np.testing.assert_array_equal(r[[0, 2]], r_ref[[0, 2]])
        flagged.append(info["diverged"].copy())
        if info["diverged"].any():
            assert trunc[1] and not term[1] and r[1] == 0.0
    flagged = np.array(flagged)
    assert flagged[:, 1].tolist() == [False, False, False, True, False, False, False, False]
    assert not flagged[:, [0, 2]].any()


def test_unconverged_solver_counts_as_divergence():
    env = SwimmerVectorEnv(num_envs=2, max_iter=2, tol=1e-15, max_unconverged_steps=2)
    env.reset(seed=0)
    flags = [env.step(_actions(env, 1)[0])[4]["diverged"].copy() for _ in range(3)]
    assert flags[2].all() and not flags[1].any()


def test_solver_options_are_validated():
    with pytest.raises(ValueError, match="order"):
        SwimmerVectorEnv(order=5)
    with pytest.raises(ValueError, match="order=2"):
        SpiderVectorEnv(contact_model="impulse", order=3)
    with pytest.raises(ValueError, match="contact_model"):
        SpiderVectorEnv(contact_model="soft")
    with pytest.raises(ValueError, match="no ground contact"):
        SwimmerVectorEnv(contact_model="impulse")
    with pytest.raises(ValueError, match="lcp_method"):
        SpiderVectorEnv(lcp_method="gauss")
    with pytest.raises(ValueError, match="optimizer"):
        SwimmerVectorEnv(optimizer="newton")
    env = SwimmerVectorEnv(num_envs=2, optimizer="lbfgs")  # passed through to the Simulator
    env.reset(seed=0)
    o, *_ = env.step(np.zeros((2, 3), np.float32))
    assert env.sim.optimizer == "lbfgs" and np.all(np.isfinite(o))
    with pytest.raises(ValueError, match="num_envs"):
        SwimmerVectorEnv(num_envs=0)
    with pytest.raises(ValueError, match="render_mode"):
        SwimmerVectorEnv(render_mode="human")
    with pytest.raises(ValueError, match="num_envs"):
        SwimmerEnv(num_envs=2)


def test_float32_simulation():
    env = SwimmerVectorEnv(num_envs=2, dtype=np.float32)
    o, _ = env.reset(seed=0)
    for a in _actions(env, 5):
        o, r, *_ = env.step(a)
    assert env.sim.dtype == np.float32 and o.dtype == np.float32 and np.all(np.isfinite(o))


@pytest.mark.parametrize("cls", [SwimmerVectorEnv, SpiderVectorEnv, SwimmerV1VectorEnv, SpiderV1VectorEnv])
def test_reward_equals_sum_of_terms(cls):
    env = cls(num_envs=3)
    env.reset(seed=0)
    for a in _actions(env, 3):
        _, r, _, _, info = env.step(a)
    terms = sum(v for k, v in info.items() if k.startswith("reward_"))
    np.testing.assert_allclose(r, terms, rtol=0, atol=1e-12)
    for key in ("x_position", "x_velocity", "iterations", "converged", "diverged"):
        assert info[key].shape == (3,)
    assert np.all(info["reward_ctrl"] < 0)


@pytest.mark.parametrize("env_id, kw", [(IDS[0], {}), (V1_IDS[0], {}),
                                        (V1_IDS[1], {"terminate_when_unhealthy": False}),
                                        ("pbad_gym/Spider-v2", {"terminate_when_unhealthy": False})])
def test_gymnasium_vector_wrappers_work_on_native_env(env_id, kw):
    env = gym.make_vec(env_id, num_envs=4, max_episode_steps=5, **kw)
    env = gym.wrappers.vector.ClipAction(env)
    env = gym.wrappers.vector.NormalizeObservation(env)
    env = gym.wrappers.vector.RecordEpisodeStatistics(env)
    env.reset(seed=0)
    episodes = 0
    for _ in range(11):
        _, _, _, _, info = env.step(3 * np.ones(env.action_space.shape, np.float32))
        if "episode" in info:
            episodes += int(info["_episode"].sum())
            np.testing.assert_array_equal(info["episode"]["l"][info["_episode"]], 5)
    assert episodes == 8


def test_swimmer_travelling_wave_swims_forward_and_rests_without_actions():
    env = SwimmerEnv(reset_noise_scale=0.0)
    obs, info = env.reset(seed=0)
    x0, xs = info["x_position"], []
    for k in range(400):  # 20 s: a PD-tracked travelling wave, head to tail, 0.5 Hz
        target = 1.0 * np.sin(2 * np.pi * 0.5 * k * env.dt - np.arange(3) * 2 * np.pi / 3)
        a = np.clip(5.0 * (target - obs[4:7]) - 0.5 * obs[13:16], -1, 1)
        obs, r, term, trunc, info = env.step(a)
        xs.append(info["x_position"])
        assert not (term or trunc)
    speed = (xs[-1] - xs[199]) / (200 * env.dt)
    assert speed > 0.25  # steady: both halves of the run advance
    assert xs[199] - x0 > 0.2 * 10
    assert abs(info["y_position"]) < 0.5 * (xs[-1] - x0)

    env.reset(seed=0)
    for _ in range(50):
        _, _, _, _, info = env.step(np.zeros(3, np.float32))
    assert abs(info["x_position"] - x0) < 1e-9 and abs(info["x_velocity"]) < 1e-9


def test_swimmer_zero_actions_stays_put_with_reset_noise():
    # the reset noise gives up to 0.1 m/s per axis; the fluid (axial drag 0.1/s) damps it, nothing propels
    env = SwimmerVectorEnv(num_envs=4)
    _, info0 = env.reset(seed=3)
    speeds = []
    for _ in range(200):
        _, _, _, _, info = env.step(np.zeros((4, 3), np.float32))
        speeds.append(np.hypot(info["x_velocity"], info["y_velocity"]))
    speeds = np.array(speeds)
    drift = np.hypot(info["x_position"] - info0["x_position"], info["y_position"] - info0["y_position"])
    assert np.all(drift < 0.2 / 0.1)  # at most |v0| / c_axial
    assert np.all(speeds[-1] < 0.5 * speeds[10])
    assert np.all(np.diff(speeds[10:], axis=0) <= 1e-9)  # monotone decay


def _spider_zero_action_run(steps):
    env = SpiderVectorEnv(num_envs=2)
    env.reset(seed=0)
    zs, iters = [], []
    for k in range(steps):
        _, r, term, trunc, info = env.step(np.zeros((2, 12), np.float32))
        assert not term.any()
        assert trunc.all() == (k == env.max_episode_steps - 1) and trunc.all() == trunc.any()
        zs.append(info["z_position"])
        iters.append(info["iterations"])
    return np.array(zs), np.array(iters), r, info


def test_spider_settles_on_its_feet_with_zero_actions():
    zs, iters, r, info = _spider_zero_action_run(250)
    assert np.all(zs > 0.3) and np.all(zs < 0.8)
    np.testing.assert_allclose(zs[-1], 0.385, atol=0.02)  # standing on its feet, torso clear of the ground
    assert np.all(np.abs(zs[-1] - zs[-50]) < 1e-3)  # at rest
    assert np.all(r > 0.9)  # healthy, no control cost
    assert iters[-50:].max() <= 2


def test_spider_stays_healthy_for_a_whole_episode():  # ~3 s: one LM iteration per step at rest
    zs, _, _, info = _spider_zero_action_run(1000)
    assert np.all(zs > 0.3)
    assert not info["diverged"].any()


def test_spider_random_actions_do_not_explode():
    env = SpiderVectorEnv(num_envs=8)
    env.reset(seed=0)
    for a in _actions(env, 150, seed=1):
        o, r, term, trunc, info = env.step(a)
        assert np.all(np.isfinite(o)) and not info["diverged"].any()
        assert np.all(np.abs(o[:, 17:20]) < 10.0)  # torso speed stays physical
        assert np.all(info["converged"])


def test_spider_terminates_when_flipped():
    env = SpiderVectorEnv(num_envs=2)
    env.reset(seed=0)
    q = env.body.q0()
    q[2], q[3:7] = 0.5, [0.0, 1.0, 0.0, 0.0]  # upside down
    env.set_state(q[None], np.zeros((1, 18)), mask=np.array([False, True]))
    _, r, term, trunc, info = env.step(np.zeros((2, 12), np.float32))
    assert term.tolist() == [False, True] and not trunc.any()
    assert info["reward_survive"].tolist() == [1.0, 0.0]


def test_spider_contact_forces_in_observation():
    env = SpiderVectorEnv(num_envs=1, include_contact_forces_in_observation=True,
                          contact_force_range=(-1e4, 1e4), exclude_current_positions_from_observation=False)
    assert env.single_observation_space.shape == (37 + 39,)
    env.reset(seed=0)
    for _ in range(100):
        o = env.step(np.zeros((1, 12), np.float32))[0]
    f = o[0, 37:].reshape(13, 3)
    # spheres: torso, 4 hips, then knee and foot of each leg; at rest the feet carry the weight
    feet = [6, 8, 10, 12]
    np.testing.assert_allclose(f[feet, 2].sum(), env.body.total_mass * 9.81, rtol=0.02)
    assert np.all(np.delete(f[:, 2], feet) == 0)


@pytest.mark.parametrize("cls", [SwimmerEnv, SpiderEnv, SwimmerV1Env, SpiderV1Env])
def test_rgb_array_render_and_gif(cls, tmp_path):
    from PIL import Image

    from pbad_gym.envs.render import record_rollout

    env = cls(render_mode="rgb_array", render_width=64, render_height=48)
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 10  # shaded bodies, not a blank image
    path = record_rollout(env, tmp_path / "rollout.gif", steps=4)
    with Image.open(path) as im:
        assert im.n_frames == 5 and im.size == (64, 48)
    vec = SwimmerVectorEnv(num_envs=3, render_mode="rgb_array", render_width=32, render_height=24,
                           render_num_envs=2)
    vec.reset(seed=0)
    frames = vec.render()
    assert len(frames) == 2 and frames[0].shape == (24, 32, 3)


def test_spider_impulse_contact_stands_and_resets_rows_cleanly():
    env = SpiderVectorEnv(num_envs=2, contact_model="impulse", include_contact_forces_in_observation=True,
                          contact_force_range=(-1e4, 1e4))
    env.reset(seed=0)
    for _ in range(60):
        o, r, term, trunc, info = env.step(np.zeros((2, 12), np.float32))
    assert not term.any() and np.all(info["z_position"] > 0.3)
    assert "lcp_iterations" in info and info["contacts"].tolist() == [4, 4]  # the four feet
    feet = [6, 8, 10, 12]
    np.testing.assert_allclose(o[:, 35:].reshape(2, 13, 3)[:, feet, 2].sum(1), env.body.total_mass * 9.81, rtol=0.02)
    env.reset(options={"reset_mask": np.array([True, False])})
    assert np.all(env.sim.state.impulse.impulse[0] == 0) and np.any(env.sim.state.impulse.impulse[1] != 0)


def test_collocation_order_three_with_autoreset_matches_solo_rows():
    """Order 3 keeps an interior node per trajectory; a per-row reset must leave the other rows bit for bit."""
    env = SwimmerVectorEnv(num_envs=3, order=3, max_episode_steps=4)
    env.reset(seed=5)
    acts = _actions(env, 7, seed=1)
    obs = [env.step(a)[0] for a in acts]
    solo = SwimmerVectorEnv(num_envs=1, order=3, max_episode_steps=4)
    solo.reset(seed=6)  # sub-env 1 of the batch is seeded with seed + 1
    obs1 = [solo.step(a[1:2])[0] for a in acts]
    np.testing.assert_array_equal(np.stack(obs)[:, 1], np.stack(obs1)[:, 0])
