"""``autoreset_mode`` of the native vector envs against Gymnasium's SyncVectorEnv of single envs: the same steps
return reset observations, the same final observations / final infos with the same keys and masks, the same
episode boundaries (bit for bit on the Swimmer: its batched physics matches the single rows')."""
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import pbad_gym  # noqa: F401  (registers the environments)

ENV_ID = "pbad_gym/Swimmer-v1"
B, LIMIT = 3, 4


def _pair(mode, native_mode=None):
    kw = dict(num_envs=B, max_episode_steps=LIMIT)
    native = gym.make_vec(ENV_ID, vectorization_mode="vector_entry_point",
                          autoreset_mode=mode if native_mode is None else native_mode, **kw)
    sync = gym.make_vec(ENV_ID, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}, **kw)
    return native, sync


def _actions(n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, B, 3)).astype(np.float32)


def _assert_info_matches(native, sync):
    """Every entry SyncVectorEnv reports (its mask True) is the native env's; where its mask is False the native
    entry is 0; final_obs / final_info carry the same keys, masks and values."""
    for key, val in sync.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = sync["_" + key]
        np.testing.assert_array_equal(native[key][mask], val[mask], err_msg=key)
        np.testing.assert_array_equal(native[key][~mask], 0, err_msg=key)
    assert ("final_obs" in native) == ("final_obs" in sync)
    if "final_obs" not in sync:
        return
    for key in ("_final_obs", "_final_info"):
        assert native[key].dtype == np.bool_
        np.testing.assert_array_equal(native[key], sync[key])
    assert native["final_obs"].dtype == object and native["final_obs"].shape == (B,)
    for a, b in zip(native["final_obs"], sync["final_obs"]):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == np.float32
            np.testing.assert_array_equal(a, b)
    assert sorted(native["final_info"]) == sorted(sync["final_info"])
    for key, val in sync["final_info"].items():
        assert native["final_info"][key].dtype == val.dtype, key
        np.testing.assert_array_equal(native["final_info"][key], val, err_msg=key)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, "same_step", "SameStep"])
def test_same_step_matches_sync_vector_env(mode):
    native, sync = _pair(AutoresetMode.SAME_STEP, native_mode=mode)
    assert native.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    o1, _ = native.reset(seed=5)
    o2, _ = sync.reset(seed=5)
    np.testing.assert_array_equal(o1, o2)
    ends = []
    for k, a in enumerate(_actions(11)):
        if k == 2:  # stagger the episodes: row 1 restarts, so it ends two steps after the others
            mask = np.array([False, True, False])
            o1, _ = native.reset(options={"reset_mask": mask})
            o2, _ = sync.reset(options={"reset_mask": mask})
            np.testing.assert_array_equal(o1, o2)
        r1, r2 = native.step(a), sync.step(a)
        for x, y in zip(r1[:4], r2[:4]):
            np.testing.assert_array_equal(x, y)
        _assert_info_matches(r1[4], r2[4])
        done = r1[2] | r1[3]
        ends.append(done.copy())
        if done.any():  # the returned observation is the fresh episode's, not the final one
            for i in np.nonzero(done)[0]:
                assert not np.array_equal(r1[0][i], r1[4]["final_obs"][i])
        # the reward of an ending step is the step's own (SAME_STEP has no zero-reward reset step)
        assert np.all(r1[1] != 0)
    ends = np.array(ends)
    # rows 0 and 2 end at steps 3 and 7 (0-based), row 1 (restarted before step 2) at steps 5 and 9
    np.testing.assert_array_equal(np.nonzero(ends[:, 0])[0], [3, 7])
    np.testing.assert_array_equal(np.nonzero(ends[:, 1])[0], [5, 9])
    np.testing.assert_array_equal(np.nonzero(ends[:, 2])[0], [3, 7])


def test_same_step_episode_statistics():
    env = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.make_vec(ENV_ID, num_envs=B, max_episode_steps=LIMIT, autoreset_mode=AutoresetMode.SAME_STEP))
    env.reset(seed=0)
    returns = np.zeros(B)
    for k, a in enumerate(_actions(2 * LIMIT)):
        _, reward, _, truncated, info = env.step(a)
        returns += reward
        if k % LIMIT == LIMIT - 1:
            assert truncated.all()
            np.testing.assert_array_equal(info["episode"]["l"], LIMIT)
            np.testing.assert_allclose(info["episode"]["r"], returns)
            returns[:] = 0
        else:
            assert not truncated.any() and "episode" not in info


def test_disabled_matches_sync_vector_env():
    native, sync = _pair(AutoresetMode.DISABLED)
    native_mode = native.metadata["autoreset_mode"]
    assert native_mode is AutoresetMode.DISABLED and native.unwrapped.autoreset_mode is AutoresetMode.DISABLED
    o1, _ = native.reset(seed=2)
    o2, _ = sync.reset(seed=2)
    np.testing.assert_array_equal(o1, o2)
    acts = _actions(7)
    for a in acts[:LIMIT]:
        r1, r2 = native.step(a), sync.step(a)
        for x, y in zip(r1[:4], r2[:4]):
            np.testing.assert_array_equal(x, y)
        assert "final_obs" not in r1[4]
    assert r1[3].all()  # every row truncated by the time limit, none reset
    final = r1[0].copy()
    # stepping an ended row without its reset: SyncVectorEnv fails an assertion, the native env says what to do
    with pytest.raises(AssertionError):
        sync.step(acts[LIMIT])
    with pytest.raises(RuntimeError, match=r"sub-environment\(s\) \[0, 1, 2\] ended.*DISABLED.*reset_mask"):
        native.step(acts[LIMIT])
    # reset rows 0 and 2 only: row 1 keeps its state and its (final) observation, and still refuses a step
    mask = np.array([True, False, True])
    o1, _ = native.reset(options={"reset_mask": mask})
    o2, _ = sync.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(o1[1], final[1])
    assert not np.array_equal(o1[0], final[0])
    with pytest.raises(RuntimeError, match=r"sub-environment\(s\) \[1\] ended"):
        native.step(acts[LIMIT])
    mask = np.array([False, True, False])
    np.testing.assert_array_equal(native.reset(options={"reset_mask": mask})[0],
                                  sync.reset(options={"reset_mask": mask})[0])
    for a in acts[LIMIT:]:
        r1, r2 = native.step(a), sync.step(a)
        for x, y in zip(r1[:4], r2[:4]):
            np.testing.assert_array_equal(x, y)


def test_disabled_reset_with_an_empty_mask_changes_nothing():
    env = gym.make_vec(ENV_ID, num_envs=B, autoreset_mode="disabled")
    obs, _ = env.reset(seed=0)
    obs = env.step(_actions(1)[0])[0]
    again, _ = env.reset(options={"reset_mask": np.zeros(B, dtype=bool)})
    np.testing.assert_array_equal(again, obs)


def test_next_step_stays_the_default():
    env = gym.make_vec(ENV_ID, num_envs=B, max_episode_steps=2)
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    explicit = gym.make_vec(ENV_ID, num_envs=B, max_episode_steps=2, autoreset_mode="next_step")
    assert explicit.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    env.reset(seed=0)
    explicit.reset(seed=0)
    for a in _actions(5):
        r1, r2 = env.step(a), explicit.step(a)
        for x, y in zip(r1[:4], r2[:4]):
            np.testing.assert_array_equal(x, y)
        assert "final_obs" not in r1[4]


@pytest.mark.parametrize("bad", ["sometimes", 1, None, "NEXT"])
def test_bad_autoreset_mode_is_named(bad):
    with pytest.raises(ValueError, match="autoreset_mode must be a gymnasium.vector.AutoresetMode"):
        gym.make_vec(ENV_ID, num_envs=2, autoreset_mode=bad)


def test_single_env_refuses_autoreset_mode():
    with pytest.raises(ValueError, match="autoreset_mode is a vector-env argument"):
        gym.make(ENV_ID, autoreset_mode="same_step")
