"""pbad_gym.diff.rollout: torch gradients of whole rollouts against central finite differences, and its errors."""
import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (before torch: OpenMP's wait policy)
from pbad_gym import Simulator

torch = pytest.importorskip("torch")
from pbad_gym.diff import rollout  # noqa: E402


def _swimmer(B=2, **kw):
    sw = gym.make_vec("pbad_gym/Swimmer-v1", num_envs=1, vectorization_mode="vector_entry_point").unwrapped.sim
    opts = dict(drag=sw.forces.drag, gravity=(0, 0, 0), limit_stiffness=3000.0, tol=1e-12, max_iter=200,
                backend="numpy")
    sim = Simulator(sw.body, 0.05, num_envs=B, **{**opts, **kw})
    rng = np.random.default_rng(0)
    sim.reset(np.repeat(np.asarray(sw.state.q[:1]), B, 0), 0.3 * rng.standard_normal((B, sim.body.nv)))
    return sim, rng


def _loss(sim, W, tau, q, q_prev):
    with torch.no_grad():
        return float((W * rollout(sim, tau, q, q_prev)).sum())


@pytest.mark.parametrize("backend", ["numpy", "numba"])  # numba: the kernel's forward and compiled backward
def test_swimmer_rollout_gradients_match_finite_differences(backend):
    if backend == "numba":
        pytest.importorskip("numba")
    # both LMs stall at their round-off floor (up to 5e-10 rad here: the step energy sums terms far larger than
    # itself), and the differences are as exact as the forward is converged: steps large beside that floor
    tol, rel, h_tau, h_q = 2e-9, 1e-4, 3e-3, 3e-5
    sim, rng = _swimmer(backend=backend, tol=tol)
    T, B = 25, 2
    tau = torch.tensor(5 * rng.standard_normal((T, B, sim.body.nv)), requires_grad=True)
    q = torch.tensor(np.asarray(sim.state.q), requires_grad=True)
    q_prev = torch.tensor(np.asarray(sim.state.q_prev), requires_grad=True)
    W = torch.tensor(rng.standard_normal((T, B, sim.body.nq)))
    before = np.array(sim.state.q)
    qs = rollout(sim, tau, q, q_prev)
    assert qs.shape == (T, B, sim.body.nq) and qs.dtype == torch.float64
    (W * qs).sum().backward()
    np.testing.assert_array_equal(sim.state.q, before)  # the Simulator is left as it was
    for _ in range(2):
        d = torch.tensor(rng.standard_normal(tau.shape))
        h = h_tau
        fd = (_loss(sim, W, tau.detach() + h * d, q.detach(), q_prev.detach())
              - _loss(sim, W, tau.detach() - h * d, q.detach(), q_prev.detach())) / (2 * h)
        assert float((tau.grad * d).sum()) == pytest.approx(fd, rel=rel)
    d = torch.zeros_like(q)
    d[:, 7:] = torch.tensor(rng.standard_normal((B, 3)))  # the hinge angles of q_k
    h = h_q
    fd = (_loss(sim, W, tau.detach(), q.detach() + h * d, q_prev.detach())
          - _loss(sim, W, tau.detach(), q.detach() - h * d, q_prev.detach())) / (2 * h)
    assert float((q.grad * d).sum()) == pytest.approx(fd, rel=rel)


def test_default_start_is_the_simulators_state_and_float32_follows_tau():
    sim, rng = _swimmer()
    tau = torch.zeros((3, 2, sim.body.nv), dtype=torch.float32, requires_grad=True)
    qs = rollout(sim, tau)
    sim.step(np.zeros((2, sim.body.nv)))
    assert qs.dtype == torch.float32
    np.testing.assert_allclose(qs[0].detach().numpy(), sim.q, atol=1e-6)
    qs[-1, :, 0].sum().backward()  # the base's x after 3 steps
    assert torch.isfinite(tau.grad).all() and tau.grad.abs().sum() > 0


def test_nonconverged_steps_raise_or_are_masked_and_counted():
    sim, rng = _swimmer(tol=1e-14, max_iter=1)
    tau = torch.tensor(50 * rng.standard_normal((2, 2, sim.body.nv)), requires_grad=True)
    with pytest.raises(RuntimeError, match="did not converge"):
        rollout(sim, tau)
    info = {}
    rollout(sim, tau, nonconverged="mask", info=info)[-1].sum().backward()
    assert info["masked"] == 4 and float(tau.grad.abs().sum()) == 0.0


def test_bad_arguments_are_named():
    sim, _ = _swimmer()
    with pytest.raises(ValueError, match="tau"):
        rollout(sim, torch.zeros((3, 5, sim.body.nv)))
    with pytest.raises(ValueError, match="nonconverged"):
        rollout(sim, torch.zeros((3, 2, sim.body.nv)), nonconverged="ignore")
    with pytest.raises(ValueError, match="q_prev"):
        rollout(sim, torch.zeros((3, 2, sim.body.nv)), q=torch.zeros((2, sim.body.nq)))
    spider = gym.make_vec("pbad_gym/Spider-v3", num_envs=1, vectorization_mode="vector_entry_point").unwrapped.sim
    no_resolve = Simulator(spider.body, 0.001, contact=dataclasses.replace(spider.forces.contact, cone_passes=0))
    with pytest.raises(ValueError, match="cone_passes"):
        rollout(no_resolve, torch.zeros((3, 1, spider.body.nv)))
    euler = Simulator(sim.body, 0.01, integrator="euler", gravity=(0, 0, 0))
    with pytest.raises(ValueError, match="order-2 PBAD"):
        rollout(euler, torch.zeros((3, 1, sim.body.nv)))


def _spider(B=2, backend="numpy"):
    """Spider-v3 after 1 s standing (feet on the ground), simulated to a tight solver and cone fixed point."""
    env = gym.make_vec("pbad_gym/Spider-v3", num_envs=B, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    for _ in range(20):
        env.step(np.zeros((B, 8)))
    sp = env.unwrapped.sim
    params = dataclasses.replace(sp.forces.contact, cone_tol=1e-12, cone_passes=100)
    sim = Simulator(sp.body, sp.dt, num_envs=B, contact=params, limit_stiffness=sp.forces.limit_stiffness,
                    limit_damping=sp.forces.limit_damping, damping=sp.forces.damping, tol=1e-12, max_iter=300,
                    backend=backend)
    sim.state = sp.state._replace(kin=None, kin_prev=None)
    return sim, sp.state


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_spider_rollout_through_contact_and_friction_matches_finite_differences(backend):
    if backend == "numba":
        pytest.importorskip("numba")
    sim, state = _spider(backend=backend)
    assert state.contact.active.any(axis=1).all()
    rng = np.random.default_rng(1)
    T = 25
    tau = np.zeros((T, 2, sim.body.nv))
    tau[..., 6:] = 150 * rng.uniform(-1, 1, (T, 2, 8))
    tau = torch.tensor(tau, requires_grad=True)
    W = torch.tensor(rng.standard_normal((T, 2, sim.body.nq)))
    (W * rollout(sim, tau)).sum().backward()

    def loss(t, q=None, q_prev=None):
        with torch.no_grad():
            return float((W * rollout(sim, t, q, q_prev)).sum())

    d = torch.zeros_like(tau)
    d[..., 6:] = torch.tensor(rng.standard_normal((T, 2, 8)))
    h = 1e-4
    fd = (loss(tau.detach() + h * d) - loss(tau.detach() - h * d)) / (2 * h)
    assert float((tau.grad * d).sum()) == pytest.approx(fd, rel=1e-5)
    # from explicit initial configurations (fresh contact memory: anchors at the feet of q)
    q = torch.tensor(np.array(state.q), requires_grad=True)
    q_prev = torch.tensor(np.array(state.q_prev))
    (W * rollout(sim, tau.detach(), q, q_prev)).sum().backward()
    d = torch.zeros_like(q)
    d[:, 7:] = torch.tensor(rng.standard_normal((2, 8)))
    d[:, 2] = 0.3
    h = 1e-7
    fd = (loss(tau.detach(), q.detach() + h * d, q_prev) - loss(tau.detach(), q.detach() - h * d, q_prev)) / (2 * h)
    assert float((q.grad * d).sum()) == pytest.approx(fd, rel=1e-3)


def test_the_kernels_forward_gives_the_numpy_engines_gradient():
    pytest.importorskip("numba")
    _, state = _spider()
    sims = {}
    for backend in ("numpy", "numba"):
        sp = gym.make_vec("pbad_gym/Spider-v3", num_envs=2, vectorization_mode="vector_entry_point").unwrapped.sim
        f = sp.forces
        sim = Simulator(sp.body, sp.dt, num_envs=2, contact=f.contact, limit_stiffness=f.limit_stiffness,
                        limit_damping=f.limit_damping, damping=f.damping, backend=backend)
        sim.state = state._replace(kin=None, kin_prev=None)
        sims[backend] = sim
    rng = np.random.default_rng(3)
    tau = np.zeros((10, 2, sims["numpy"].body.nv))
    tau[..., 6:] = 150 * rng.uniform(-1, 1, (10, 2, 8))
    grads = {}
    for backend, sim in sims.items():
        t = torch.tensor(tau, requires_grad=True)
        rollout(sim, t)[..., :3].sum().backward()
        grads[backend] = t.grad.numpy()
    # the default solver and cone tolerances (1e-7, 1e-3) leave each engine's forward as close as that to the
    # fixed point the adjoint differentiates
    np.testing.assert_allclose(grads["numba"], grads["numpy"], rtol=0, atol=1e-3 * np.abs(grads["numpy"]).max())
