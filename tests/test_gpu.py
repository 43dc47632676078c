"""The CuPy path: the same engine code on device arrays, the environments on the GPU, array_type on the GPU and the
host-synchronisation budget of a step. Skips cleanly where CuPy or a CUDA device is missing (CI); run on a device
by ``scripts/device_check.sh``."""
import numpy as np
import pytest

from pbad_gym.arrays import count_host_syncs, gpu_available, to_numpy
from pbad_gym.model import chain
from pbad_gym.simulator import Simulator

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA device")]


@pytest.fixture(autouse=True)
def _numpy_reference(monkeypatch):
    """CPU references run the NumPy code (the GPU runs the same code on CuPy arrays; the numba kernel is
    cross-checked elsewhere, and compiling it would spend the device run's minutes)."""
    import pbad_gym.simulator as simulator

    monkeypatch.setattr(simulator, "default_backend", lambda device="cpu": "numpy")


@pytest.mark.parametrize("kw", [dict(), dict(order=3), dict(drag=(0.1, 5.0), gravity=(0, 0, 0), floating=True),
                                dict(contact=dict(stiffness=1e3), floating=True)])
def test_cupy_matches_numpy(kw):
    kw = dict(kw)
    body = chain(4, floating=kw.pop("floating", False))
    sims = [Simulator(body, dt=0.01, num_envs=8, device=d, **kw) for d in ("cpu", "cuda")]
    rng = np.random.default_rng(0)
    for _ in range(10):
        tau = 1e-3 * rng.standard_normal((8, body.nv))
        for s in sims:
            s.step(s.xp.asarray(tau))
    np.testing.assert_allclose(to_numpy(sims[1].q), sims[0].q, atol=1e-9)


def test_state_stays_on_the_device():
    import cupy

    sim = Simulator(chain(4), dt=0.01, num_envs=8, device="cuda")
    info = sim.step()
    assert isinstance(sim.q, cupy.ndarray) and isinstance(sim.state.q_prev, cupy.ndarray)
    assert all(isinstance(v, cupy.ndarray) for v in (info["iterations"], info["converged"]))


# --- host synchronisation budget -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(contact=dict(stiffness=1e3), floating=True)], ids=["chain", "contact"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_at_most_one_host_sync_per_lm_iteration(kw, dtype):
    """The issue's budget: no host synchronisation inside a step except one "all converged?" check per LM
    iteration. Counted by arrays.count_host_syncs (host_bool / host_int / to_numpy on device arrays and CuPy's
    synchronising module functions such as cupy.nonzero); the failure message lists the sites."""
    kw = dict(kw)
    floating = kw.pop("floating", False)
    body = chain(6, floating=floating)
    sim = Simulator(body, dt=0.01, num_envs=64, device="cuda", dtype=dtype, **kw)
    rng = np.random.default_rng(0)
    if not floating:  # random poses (the floating chain starts from its neutral pose on the ground)
        sim.reset(q=rng.uniform(-0.3, 0.3, (64, body.nq)))
    sim.step()  # warm-up (kernel compilation)
    tau = sim.xp.asarray(1e-3 * rng.standard_normal((64, body.nv)), dtype=sim.dtype)
    with count_host_syncs() as syncs:
        info = sim.step(tau)
    iterations = int(to_numpy(info["iterations"]).max())
    # a round of μ growth after a rejection (solves only) takes the place of an LM iteration at a μ too small
    # to change the step, and decides on the host as that iteration did
    rounds = syncs.sites.get("lm: a rejected step to shorten", 0)
    assert syncs.count - rounds <= iterations + 1, (
        f"{syncs.count} host syncs in one step of {iterations} LM iterations and {rounds} rounds of μ growth "
        f"(budget {iterations + 1} besides those): {dict(syncs.sites)}")


def test_blocking_runtime_calls_per_step(record_property):
    """A census through CUPTI of the CUDA runtime calls that block the host during one step (every sync, also the
    ones count_host_syncs cannot see: bool(a), a.item(), boolean-mask indexing). Recorded (junit properties and
    the printed line), asserted only against count_host_syncs' lower bound: the budget is asserted above."""
    from cupti_syncs import CuptiUnavailable, RuntimeCalls

    body = chain(6)
    sim = Simulator(body, dt=0.01, num_envs=64, device="cuda")
    sim.reset(q=np.random.default_rng(0).uniform(-0.3, 0.3, (64, body.nq)))
    sim.step()
    tau = sim.xp.zeros((64, body.nv))
    try:
        with count_host_syncs() as syncs, RuntimeCalls() as calls:
            info = sim.step(tau)
    except CuptiUnavailable as err:
        pytest.skip(f"CUPTI unavailable: {err}")
    iterations = int(to_numpy(info["iterations"]).max())
    line = (f"one step, {iterations} LM iterations: {calls.blocking} blocking runtime calls {calls!r}; "
            f"count_host_syncs {syncs.count} {dict(syncs.sites)}")
    print(line)
    record_property("lm_iterations", iterations)
    record_property("blocking_runtime_calls", calls.blocking)
    record_property("runtime_calls", dict(calls.names))
    record_property("count_host_syncs", syncs.count)
    assert sum(calls.names.values()) > 0, "CUPTI subscribed but saw no runtime call: " + line


# --- the environments: GPU vs CPU trajectories ---------------------------------------------------------------------
ENVS = ("pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1", "pbad_gym/Swimmer-v0", "pbad_gym/Spider-v0")
# (dtype, solver tol, steps, atol on q): float64 solved far below the tolerance so both devices stop at the same
# minimiser to round-off; float32 at its default tolerance, compared to float32 resolution of the solve
CASES = [(np.float64, 1e-11, 10, 1e-9), (np.float32, None, 5, 2e-3)]


def _rollout(env_id, device, dtype, tol, steps, n=8, seed=0, backend="numpy"):
    import gymnasium

    import pbad_gym  # noqa: F401

    env = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", device=device,
                             dtype=dtype, tol=tol, backend=backend)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    qs, obs = [], []
    for _ in range(steps):
        o = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))[0]
        obs.append(to_numpy(o))
        qs.append(to_numpy(env.unwrapped.sim.q).astype(np.float64))
    env.close()
    return np.array(qs), np.array(obs)


_CPU_ROLLOUTS = {}


def _cpu_rollout(env_id, dtype, tol, steps):
    """The NumPy CPU reference rollout, computed once per case (the lock-step and the fused GPU paths are both
    compared with it; NumPy, not numba: compiling the numba kernel would spend the device run's minutes, and the
    two CPU backends agree to 1e-10 with equal LM iterations, tests/test_numba_kernel.py)."""
    key = (env_id, np.dtype(dtype).str, tol, steps)
    if key not in _CPU_ROLLOUTS:
        _CPU_ROLLOUTS[key] = _rollout(env_id, "cpu", dtype, tol, steps)
    return _CPU_ROLLOUTS[key]


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("dtype,tol,steps,atol", CASES, ids=["float64", "float32"])
def test_env_gpu_matches_cpu(env_id, dtype, tol, steps, atol):
    q_cpu, o_cpu = _cpu_rollout(env_id, dtype, tol, steps)
    q_gpu, o_gpu = _rollout(env_id, "cuda", dtype, tol, steps)
    np.testing.assert_allclose(q_gpu, q_cpu, atol=atol, rtol=0, err_msg=f"{env_id} {np.dtype(dtype)} q")
    scale = max(1.0, float(np.abs(o_cpu).max()))
    np.testing.assert_allclose(o_gpu, o_cpu, atol=max(atol, 1e-6) * scale * 10, rtol=0,
                               err_msg=f"{env_id} {np.dtype(dtype)} observations")


# --- array_type on the GPU -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("array_type", ["cupy", "torch"])
def test_array_type_on_the_gpu(array_type):
    import cupy

    from pbad_gym.envs import SwimmerVectorEnv

    env = SwimmerVectorEnv(num_envs=4, device="cuda", array_type=array_type)
    ref = SwimmerVectorEnv(num_envs=4, device="cuda")
    obs, _ = env.reset(seed=0)
    ref.reset(seed=0)
    act = np.linspace(-1, 1, 4 * env.single_action_space.shape[0], dtype=np.float32).reshape(4, -1)
    if array_type == "torch":
        import torch

        assert isinstance(obs, torch.Tensor) and obs.device.type == "cuda" and obs.dtype == torch.float32
        step = env.step(torch.as_tensor(act, device="cuda"))  # CUDA tensors are accepted as actions
        assert all(t.device.type == "cuda" for t in step[:4])
    else:
        assert isinstance(obs, cupy.ndarray) and obs.dtype == np.float32
        step = env.step(cupy.asarray(act))
        assert all(isinstance(t, cupy.ndarray) for t in step[:4])
    expected = ref.step(act)
    for got, want in zip(step[:4], expected[:4]):  # same device, same code: equal up to reduction order
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-6, atol=1e-9)


def test_torch_view_of_cupy_is_zero_copy():
    import cupy

    from pbad_gym.arrays import to_torch

    a = cupy.arange(6, dtype=cupy.float32)
    t = to_torch(a)
    assert t.device.type == "cuda" and t.data_ptr() == a.data.ptr
    a[0] = 5
    assert float(t[0]) == 5.0


# --- the fused kernel (backend="cuda": one thread per trajectory, one launch per step) ------------------------------
def _fused_or_skip():
    from pbad_gym.kernels.cuda import unavailable_reason

    why = unavailable_reason("cuda")
    if why is not None:
        pytest.skip(why)


def _fused_case(name):
    """(body, Simulator keyword arguments, torque scale) of the cross-checked chains (tests/cudasim_crosscheck.py's)."""
    from conftest import mixed_body

    if name == "chain":
        return chain(6), dict(dt=0.01), 0.01
    if name == "tree":
        return mixed_body(limited=True), dict(dt=0.01, drag=(0.2, 1.0), limit_stiffness=50.0, contact=dict(
            stiffness=1e3, friction="viscous", damping=10.0)), 0.02
    return chain(3, floating=True, joint="ball"), dict(dt=0.01, damping=0.05, contact=dict(
        stiffness=1e3, friction="coulomb", mu=0.8)), 0.2


@pytest.mark.parametrize("name", ["chain", "tree", "free_ball"])
def test_fused_matches_cpu(name, record_property):
    """The fused GPU kernel against the CPU reference (NumPy: see _cpu_rollout), float64, 20 steps of 64
    trajectories solved far below the default tolerance (1e-11), so that round-off differences (FMA contraction,
    libdevice's sin/cos/atan2) do not move the minimiser: q to 1e-9. The share of (step, row) pairs with equal LM
    iteration counts is recorded (under the CUDA simulator it is 100 %, tests/test_cuda_kernel.py)."""
    _fused_or_skip()
    body, kw, scale = _fused_case(name)
    B = 64
    sims = [Simulator(body, num_envs=B, device=d, backend=b, tol=1e-11, **kw)
            for d, b in (("cpu", "numpy"), ("cuda", "cuda"))]
    assert sims[1].backend == "cuda"
    rng = np.random.default_rng(0)
    if body.links[0].joint.type != "free":
        q0 = rng.uniform(-0.3, 0.3, (B, body.nq))
        for s in sims:
            s.reset(q=s.xp.asarray(q0))
    same, dq = [], 0.0
    for _ in range(20):
        tau = scale * rng.standard_normal((B, body.nv))
        infos = [s.step(s.xp.asarray(tau)) for s in sims]
        same.append(to_numpy(infos[1]["iterations"]) == infos[0]["iterations"])
        dq = max(dq, float(np.abs(to_numpy(sims[1].q) - sims[0].q).max()))
    record_property("equal_iteration_share", float(np.mean(same)))
    record_property("max_dq", dq)
    print(f"fused vs CPU {name}: max |dq| {dq:.2e}, equal LM iterations on {np.mean(same):.1%} of row-steps")
    assert dq <= 1e-9
    from pbad_gym.envs.divergence import GuardModel, energy_terms

    act = np.arange(min(body.nv, 3), body.nv)  # the divergence guard's terms: the reference and the GPU kernel's
    guards = [GuardModel(body, s.forces, s.dt, act, np.ones(act.size), s.backend) for s in sims]
    for a, b in zip(*(energy_terms(g, s.q, s.qd) for g, s in zip(guards, sims))):
        np.testing.assert_allclose(to_numpy(b), a, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("env_id", ["pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1", "pbad_gym/Spider-v2"])
@pytest.mark.parametrize("dtype,tol,steps,atol", CASES, ids=["float64", "float32"])
def test_fused_env_matches_cpu(env_id, dtype, tol, steps, atol):
    """The environments on backend='cuda' (device='cuda') follow the CPU reference trajectories."""
    _fused_or_skip()
    q_cpu, o_cpu = _cpu_rollout(env_id, dtype, tol, steps)
    q_gpu, o_gpu = _rollout(env_id, "cuda", dtype, tol, steps, backend="cuda")
    np.testing.assert_allclose(q_gpu, q_cpu, atol=atol, rtol=0, err_msg=f"{env_id} {np.dtype(dtype)} q")
    scale = max(1.0, float(np.abs(o_cpu).max()))
    np.testing.assert_allclose(o_gpu, o_cpu, atol=max(atol, 1e-6) * scale * 10, rtol=0,
                               err_msg=f"{env_id} {np.dtype(dtype)} observations")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_step_stays_on_device_without_host_sync(dtype, record_property):
    """One fused step: CuPy arrays in and out (q, q_prev, velocity, kinematics, contact memory and force,
    diagnostics), no host synchronisation by the engine (count_host_syncs), and the CUPTI census of
    blocking runtime calls recorded (the Simulator's own finiteness check of tau is one)."""
    import cupy

    _fused_or_skip()
    from cupti_syncs import CuptiUnavailable, RuntimeCalls

    body = chain(6, floating=True)
    sim = Simulator(body, dt=0.01, num_envs=64, device="cuda", dtype=dtype, backend="cuda",
                    contact=dict(stiffness=1e3))
    sim.step()  # compiles the kernel
    tau = cupy.asarray(1e-3 * np.random.default_rng(0).standard_normal((64, body.nv)), dtype=dtype)
    try:
        with count_host_syncs() as syncs, RuntimeCalls() as calls:
            info = sim.step(tau)
        blocking = calls.blocking
    except CuptiUnavailable:
        with count_host_syncs() as syncs:
            info = sim.step(tau)
        blocking = None
    record_property("blocking_runtime_calls", blocking)
    assert syncs.count == 0, dict(syncs.sites)
    s = sim.state
    arrays = [a for a in (s.q, s.q_prev, s.velocity, *s.kin, *s.contact, s.force, *info.values())
              if a is not None]
    assert all(isinstance(a, cupy.ndarray) for a in arrays)
    assert s.q.dtype == dtype and s.velocity.dtype == dtype


def test_fused_kernel_resources(record_property):
    """Registers, local memory and the occupancy they allow, read from the compiled kernel (recorded; the
    docs/gpu.md note compares them with the sm_90 compile made without a device)."""
    _fused_or_skip()
    from pbad_gym.kernels.cuda.kernel import step_kernel

    sim = Simulator(chain(4), dt=0.01, num_envs=8, device="cuda", backend="cuda")
    sim.step()
    regs = step_kernel.get_regs_per_thread()
    local = step_kernel.get_local_mem_per_thread()
    regs = max(regs.values()) if isinstance(regs, dict) else regs
    local = max(local.values()) if isinstance(local, dict) else local
    record_property("regs_per_thread", regs)
    record_property("local_mem_per_thread", local)
    print(f"fused step kernel: {regs} registers, {local} bytes local memory per thread")
    assert 0 < regs <= 255
