"""Spider-v1 (Ant-v5's dynamics) and Swimmer-v1 (hinge ranges): the properties their version entries promise."""
import gymnasium as gym
import numpy as np
import pytest
from conftest import spider_random_action_run

import pbad_gym  # noqa: F401  (registers the environments)
from pbad_gym.envs import SpiderV1VectorEnv, SpiderV2VectorEnv, SwimmerV1VectorEnv, SwimmerVectorEnv


def test_spider_v1_has_ant_v5_proportions():
    env = gym.make("pbad_gym/Spider-v1")
    u = env.unwrapped
    body = u.vec.body
    assert body.total_mass == pytest.approx(0.91, rel=0.02)  # Ant-v5: 0.911 kg at density 5
    np.testing.assert_array_equal(body.armature[:6], 0.0)  # free base: no rotor
    np.testing.assert_array_equal(body.armature[6:], 1.0)
    np.testing.assert_array_equal(u.vec.gear, 150.0)
    assert u.vec.sim.forces.contact.friction == "coulomb"
    np.testing.assert_array_equal(u.vec.sim.forces.damping[6:], 1.0)
    assert u.dt == 0.05 and env.observation_space.shape == (74,)
    assert u.metadata["render_fps"] == 20 and gym.make_vec("pbad_gym/Spider-v1", num_envs=2).metadata[
        "render_fps"] == 20


@pytest.mark.parametrize("kwargs, match", [({"density": 0.0}, "density"), ({"armature": -1.0}, "armature")])
def test_spider_v1_rejects_bad_model_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SpiderV1VectorEnv(**kwargs)


@pytest.mark.parametrize("cls, steps", [(SpiderV1VectorEnv, 30), (SpiderV2VectorEnv, 40)])
def test_spider_random_actions_short(cls, steps):
    depth, converged, finite = spider_random_action_run(cls, 4, steps)
    assert converged and finite and depth < 0.25, depth


@pytest.mark.slow
@pytest.mark.parametrize("cls", [SpiderV1VectorEnv, SpiderV2VectorEnv])
def test_spider_random_actions_16_by_1000(cls):
    """The issue's must-show: no unconverged step, no non-finite value, deepest sphere < 25 % of its radius."""
    depth, converged, finite = spider_random_action_run(cls, 16, 1000)
    assert converged and finite and depth < 0.25, depth


def test_spider_v1_rests_on_its_feet_without_noise():
    env = SpiderV1VectorEnv(num_envs=1, reset_noise_scale=0.0)
    env.reset(seed=0)
    for k in range(160):  # 8 s
        _, _, term, _, info = env.step(np.zeros((1, 12)))
        assert not term[0]
        if k == 59:
            p3 = np.asarray(env.sim.q[0, :3]).copy()
    z = float(env.sim.q[0, 2])
    assert 0.3 < z < 0.6 and np.linalg.norm(np.asarray(env.sim.q[0, :3]) - p3) < 1e-3


def test_swimmer_v1_hinges_stay_in_range_and_v0_winds_through():
    """Bang-bang torques that wind the hinges: v1's limit penalty keeps them near ±100°, v0 passes far beyond."""
    peak = {}
    for name, env in (("v1", SwimmerV1VectorEnv(num_envs=1)), ("v0", SwimmerVectorEnv(num_envs=1))):
        env.reset(seed=0)
        worst = 0.0
        for _ in range(200):
            env.step(np.ones((1, 3)))
            worst = max(worst, float(np.max(np.abs(np.asarray(env.sim.q[0, 7:])))))
        peak[name] = worst
    assert peak["v1"] < np.deg2rad(100.0) + 0.05 and peak["v0"] > np.deg2rad(150.0), peak


def test_swimmer_v1_limits_can_be_disabled_and_x_position_is_the_centre_of_mass():
    env = SwimmerV1VectorEnv(num_envs=2, joint_range=None)
    assert env.sim.forces.limit_stiffness == 0.0 and all(lk.joint.range is None for lk in env.body.links)
    env.reset(seed=1)
    _, _, _, _, info = env.step(np.full((2, 3), 0.5))
    com = env.centre_of_mass(env.sim.kinematics())
    np.testing.assert_allclose(info["x_position"], com[:, 0])
    with pytest.raises(ValueError, match="joint_range"):
        SwimmerV1VectorEnv(joint_range=-1.0)
    with pytest.raises(ValueError, match="limit_stiffness"):
        SwimmerV1VectorEnv(limit_stiffness=-1.0)


def test_swimmer_render_shows_a_grid_that_moves_with_the_swimmer():
    env = SwimmerV1VectorEnv(num_envs=1, render_mode="rgb_array", render_width=64, render_height=48,
                             reset_noise_scale=0.0)
    env.reset(seed=0)
    first = env.render()[0]
    q = np.asarray(env.sim.q).copy()
    q[0, 0] += 0.5  # half a grid cell along x: the camera follows, the sea-bed grid does not
    env.set_state(q, np.zeros((1, env.body.nv)))
    second = env.render()[0]
    assert len(np.unique(first.reshape(-1, 3), axis=0)) > 10
    assert np.mean(np.any(first != second, axis=-1)) > 0.05
