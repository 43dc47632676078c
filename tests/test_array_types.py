"""array_type on the environments (NumPy / torch on the CPU; CuPy is covered by tests/test_gpu.py) and the
host-synchronisation counter's mechanics (on NumPy nothing synchronises; fake device arrays stand in for CuPy)."""
import pickle
import sys
import types

import gymnasium
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (registers the ids)
from pbad_gym.arrays import (ARRAY_TYPES, as_array_type, check_array_type, count_host_syncs, host_bool, host_int,
                             is_device_array, note_host_sync, to_numpy)
from pbad_gym.envs import SpiderVectorEnv, SwimmerVectorEnv
from pbad_gym.envs.array_types import ArrayExport, check_env_array_type

torch = pytest.importorskip("torch")


def _cupy_importable():
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


# --- validation ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["jax", "Torch", "", None, 3])
def test_bad_array_type_names_the_option_and_the_accepted_values(bad):
    with pytest.raises(ValueError, match=r"array_type must be one of \('numpy', 'cupy', 'torch'\)"):
        check_array_type(bad)
    with pytest.raises(ValueError, match="array_type"):
        SwimmerVectorEnv(num_envs=2, array_type=bad)


@pytest.mark.skipif(_cupy_importable(), reason="CuPy is installed here")
def test_cupy_without_cupy_is_a_clear_error():
    with pytest.raises(RuntimeError, match="array_type='cupy' needs CuPy"):
        check_array_type("cupy")
    with pytest.raises(RuntimeError, match="needs CuPy"):
        SwimmerVectorEnv(num_envs=2, array_type="cupy")


@pytest.mark.skipif(not _cupy_importable(), reason="needs CuPy")
def test_cupy_needs_the_gpu_device():
    with pytest.raises(ValueError, match="device='cuda'"):
        check_env_array_type("cupy", "cpu")


# --- conversion ---------------------------------------------------------------------------------------------------
def test_torch_export_shares_memory_with_the_numpy_arrays():
    obs = np.arange(12, dtype=np.float32).reshape(3, 4)
    reward = np.array([0.5, -1.0, 2.0])
    flags = np.array([True, False, True])
    t_obs, t_rew, t_flag = ArrayExport("torch", "cpu")(obs, reward, flags)
    for t, a, dtype in ((t_obs, obs, torch.float32), (t_rew, reward, torch.float64), (t_flag, flags, torch.bool)):
        assert isinstance(t, torch.Tensor) and t.dtype == dtype and t.device.type == "cpu"
        assert t.data_ptr() == a.ctypes.data  # zero copy
    obs[0, 0] = 42.0
    assert t_obs[0, 0].item() == 42.0


def test_numpy_export_is_the_identity_and_none_passes_through():
    a = np.ones(3)
    assert ArrayExport()(a, None)[0] is a
    assert ArrayExport("torch")(None, a)[0] is None
    assert ArrayExport().obs(a) is a


def test_to_numpy_takes_tensors_without_a_copy():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    a = to_numpy(t)
    assert isinstance(a, np.ndarray) and a.ctypes.data == t.data_ptr()
    assert to_numpy(t.requires_grad_(False)).shape == (2, 3)
    assert isinstance(as_array_type(a, "torch"), torch.Tensor)
    assert as_array_type(t, "numpy").ctypes.data == t.data_ptr()
    assert not is_device_array(t) and not is_device_array(a)


def test_read_only_arrays_are_copied_for_torch():
    a = np.ones(3)
    a.flags.writeable = False
    t = as_array_type(a, "torch")
    assert t.data_ptr() != a.ctypes.data and torch.equal(t, torch.ones(3, dtype=torch.float64))


# --- environments ---------------------------------------------------------------------------------------------------
def _run(env, steps, actions):
    out = [env.reset(seed=3)[0]]
    for k in range(steps):
        out.append(env.step(actions[k]))
    return out


@pytest.mark.parametrize("cls", [SwimmerVectorEnv, SpiderVectorEnv])
def test_torch_vector_env_matches_numpy(cls):
    n, steps = 3, 3
    ref, tor = cls(num_envs=n), cls(num_envs=n, array_type="torch")
    assert tor.array_type == "torch"
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (steps, n, ref.single_action_space.shape[0])).astype(np.float32)
    a = _run(ref, steps, acts)
    b = _run(tor, steps, [torch.from_numpy(x) for x in acts])  # actions as torch tensors
    assert isinstance(b[0], torch.Tensor) and b[0].dtype == torch.float32
    np.testing.assert_array_equal(b[0].numpy(), a[0])
    for (o, r, te, tr, info), (o2, r2, te2, tr2, info2) in zip(a[1:], b[1:]):
        assert isinstance(o2, torch.Tensor) and o2.dtype == torch.float32 and o2.shape == (n, ref.obs_dim)
        assert r2.dtype == torch.float64 and te2.dtype == torch.bool and tr2.dtype == torch.bool
        np.testing.assert_array_equal(o2.numpy(), o)
        np.testing.assert_array_equal(r2.numpy(), r)
        np.testing.assert_array_equal(te2.numpy(), te)
        np.testing.assert_array_equal(tr2.numpy(), tr)
        assert isinstance(info2["iterations"], np.ndarray)  # info stays NumPy


def test_make_vec_with_torch_and_float32():
    # the NumPy backend: the float32 kernel is compiled (and checked) by test_env_guards and test_numba_kernel; a
    # second concurrent compile here would only add a minute and a half to the suite
    env = gymnasium.make_vec("pbad_gym/Swimmer-v1", num_envs=4, vectorization_mode="vector_entry_point",
                             array_type="torch", dtype=np.float32, backend="numpy")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float32 and obs.shape == (4, env.unwrapped.obs_dim)
    act = torch.zeros(env.action_space.shape)
    obs, rew, term, trunc, _ = env.step(act)
    assert obs.dtype == torch.float32 and torch.isfinite(obs).all()
    assert rew.shape == (4,) and term.dtype == torch.bool and trunc.dtype == torch.bool
    env.close()


def test_single_env_hands_out_torch_observations():
    env = gymnasium.make("pbad_gym/Swimmer-v1", array_type="torch", disable_env_checker=True)  # it wants NumPy
    obs, info = env.reset(seed=1)
    assert isinstance(obs, torch.Tensor) and obs.shape == (env.unwrapped.vec.obs_dim,)
    obs, reward, terminated, truncated, info = env.step(torch.zeros(env.action_space.shape))
    assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float32
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    env.close()


def test_torch_env_pickles():
    env = SwimmerVectorEnv(num_envs=2, array_type="torch")
    env.reset(seed=0)
    clone = pickle.loads(pickle.dumps(env))
    obs = clone.step(torch.zeros(2, env.single_action_space.shape[0]))[0]
    assert isinstance(obs, torch.Tensor)


def test_array_types_listed():
    assert ARRAY_TYPES == ("numpy", "cupy", "torch")


# --- host synchronisation counter -----------------------------------------------------------------------------------
class _FakeDeviceArray:
    """Stands in for a CuPy array: its type's module starts with "cupy"."""

    __module__ = "cupy._fake"

    def __init__(self, value):
        self.value = np.asarray(value)

    def get(self):
        return self.value.copy()

    def __bool__(self):
        return bool(self.value)

    def __int__(self):
        return int(self.value)


def test_counter_counts_device_reads_only():
    dev = _FakeDeviceArray(True)
    assert is_device_array(dev)
    with count_host_syncs() as syncs:
        assert host_bool(np.bool_(True)) and host_int(np.int64(3)) == 3
        to_numpy(np.ones(3))
        assert syncs.count == 0  # NumPy never synchronises
        assert host_bool(dev, site="lm.converged")
        assert host_int(_FakeDeviceArray(7)) == 7
        np.testing.assert_array_equal(to_numpy(_FakeDeviceArray([1, 2])), [1, 2])
    assert syncs.count == 3
    assert syncs.sites == {"lm.converged": 1, "host_int": 1, "to_numpy": 1}
    host_bool(dev)  # outside the block: not counted
    assert syncs.count == 3


def test_counter_blocks_nest_and_count_independently():
    with count_host_syncs() as outer:
        note_host_sync("a")
        with count_host_syncs() as inner:
            note_host_sync("b")
        note_host_sync("c")
    assert outer.count == 3 and inner.count == 1 and inner.sites == {"b": 1}


def test_counter_wraps_cupys_syncing_functions_and_restores_them(monkeypatch):
    fake = types.ModuleType("cupy")
    fake.nonzero = np.nonzero
    fake.asnumpy = np.asarray
    monkeypatch.setitem(sys.modules, "cupy", fake)
    with count_host_syncs() as syncs:
        idx = fake.nonzero(np.array([0, 1, 1]))[0]
        fake.asnumpy(idx)
        fake.nonzero(np.array([1]))
    assert syncs.count == 3 and syncs.sites == {"cupy.nonzero": 2, "cupy.asnumpy": 1}
    assert fake.nonzero is np.nonzero and fake.asnumpy is np.asarray  # restored


def test_numpy_step_has_no_host_syncs():
    from pbad_gym.model import chain
    from pbad_gym.simulator import Simulator

    sim = Simulator(chain(3), dt=0.01, num_envs=4)
    with count_host_syncs() as syncs:
        sim.step()
    assert syncs.count == 0
