"""The step seam: typed options validated once with their defaults in one table, State values, the registry."""
import copy
import pickle

import numpy as np
import pytest

from pbad_gym import Simulator
from pbad_gym.integrators import LCPOptions, SolverOptions, State, StepInfo, pbad
from pbad_gym.model import BodyArrays, chain, put_body, spider
from pbad_gym.simulator import select_step


def test_solver_option_defaults_depend_on_dtype_optimizer_and_order():
    assert SolverOptions.create(np.float64).tol == 1e-9 and SolverOptions.create(np.float32).tol == 1e-5
    assert SolverOptions.create(optimizer="lm").max_iter == 50
    assert SolverOptions.create(optimizer="lbfgs").max_iter == 500
    assert SolverOptions.create(optimizer="lbfgs", order=3).max_iter == 2000
    assert SolverOptions.create(max_iter=7, tol=1e-4).max_iter == 7
    # the Simulator takes the same table: L-BFGS is no longer capped at LM's 50
    assert Simulator(chain(2), 0.01, optimizer="lbfgs").max_iter == 500
    assert Simulator(chain(2), 0.01, dtype=np.float32).tol == 1e-5


@pytest.mark.parametrize("kwargs, name", [
    (dict(order=5), "order"), (dict(optimizer="newton"), "optimizer"), (dict(hessian="bfgs"), "hessian"),
    (dict(max_iter=0), "max_iter"), (dict(max_iter=2.5), "max_iter"), (dict(max_iter=True), "max_iter"),
    (dict(tol=0.0), "tol"), (dict(tol=-1.0), "tol"), (dict(tol=float("nan")), "tol"),
])
def test_solver_options_name_the_bad_argument(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        SolverOptions.create(np.float64, **kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(lcp_method="gauss"), "lcp_method"), (dict(lcp_order="zigzag"), "lcp_order"),
    (dict(lcp_iterations=0), "lcp_iterations"), (dict(lcp_tol=-1.0), "lcp_tol"), (dict(lcp_omega=2.0), "lcp_omega"),
    (dict(lcp_method="block_pgs", lcp_omega=1.3), "lcp_omega"), (dict(lcp_tol="1e-9"), "lcp_tol"),
])
def test_lcp_options_name_the_bad_argument(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        LCPOptions.create(**kwargs)


def test_options_are_frozen():
    with pytest.raises(Exception):
        SolverOptions().tol = 1.0


def test_body_arrays_are_typed_and_cached():
    body = spider()
    a = body.arrays(np, np.float32)
    assert isinstance(a, BodyArrays) and a is body.arrays(np, np.float32)
    assert a.mass.dtype == np.float32 and a.contact_link.dtype.kind == "i" and a.has_parent.dtype == bool
    np.testing.assert_array_equal(put_body(body).contact_r, body.contact_points()[2])
    with pytest.raises(AttributeError):
        a.contact_radius  # noqa: B018 - a misspelt field fails loudly


def test_snapshot_is_a_value_that_later_steps_do_not_touch():
    sim = Simulator(spider(), 0.02, num_envs=3, contact=True, limit_stiffness=100.0)
    rng = np.random.default_rng(0)
    taus = rng.normal(scale=5.0, size=(6, 3, sim.body.nv))
    for t in taus[:2]:
        sim.step(t)
    snap = sim.snapshot()
    q_snap = snap.q.copy()
    after = [sim.step(t) and sim.q.copy() for t in taus[2:]]
    np.testing.assert_array_equal(snap.q, q_snap)
    sim.restore(snap)
    again = [sim.step(t) and sim.q.copy() for t in taus[2:]]
    for a, b in zip(after, again):
        np.testing.assert_array_equal(a, b)


def test_step_contract_returns_state_and_info():
    sim = Simulator(chain(3), 0.01, num_envs=2)
    state, info = pbad.step(sim.model, sim.state, np.zeros((2, 3)), sim.options)
    assert isinstance(state, State) and isinstance(info, StepInfo)
    assert state.time == pytest.approx(0.01) and sim.state.time == 0.0  # the input State is unchanged
    assert set(info.as_dict()) == {"iterations", "grad_norm", "converged"}


def test_registry_refuses_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        select_step("pbad", 2, "penalty", backend="fortran")


def test_mid_episode_simulator_pickles_and_deep_copies():
    sim = Simulator(spider(), 0.02, num_envs=2, contact={"friction": "coulomb"})
    tau = np.random.default_rng(1).normal(scale=5.0, size=(2, sim.body.nv))
    for _ in range(3):
        sim.step(tau)
    for other in (pickle.loads(pickle.dumps(sim)), copy.deepcopy(sim)):
        for _ in range(3):
            other.step(tau)
        ref = copy.deepcopy(sim)
        for _ in range(3):
            ref.step(tau)
        np.testing.assert_array_equal(other.q, ref.q)
        np.testing.assert_array_equal(other.contact_forces, ref.contact_forces)


@pytest.mark.parametrize("friction", ["viscous", "coulomb"])
def test_contact_forces_carry_the_weight_and_respect_coulomb(friction):
    """A spider settling on the ground: the engine's per-sphere forces sum to its weight, Coulomb friction stays
    within μN of the step's lagged normal force, and a reset row reports normal forces only."""
    body = spider()
    sim = Simulator(body, 0.02, num_envs=2, contact={"friction": friction, "stiffness": 2e4, "mu": 0.5},
                    limit_stiffness=100.0, damping=1.0)
    q0 = body.q0()
    q0[2] = 0.45
    sim.reset(q0)
    for _ in range(150):
        sim.step()
    F = sim.contact_forces
    assert F.shape == (2, len(body.contact_points()[0]), 3)
    np.testing.assert_allclose(F[..., 2].sum(1), body.total_mass * 9.81, rtol=0.02)
    if friction == "coulomb":
        normal = sim.state.contact.normal  # lagged normal force of this state; the step used the previous one
        assert np.all(np.linalg.norm(F[..., :2], axis=-1) <= 0.5 * np.maximum(normal, F[..., 2]) * 1.05 + 1e-9)
    sim.reset(sim.q[0], rows=[1])  # at rest on the ground: normal forces, no friction yet
    G = sim.contact_forces
    assert np.all(G[1, :, :2] == 0) and G[1, :, 2].sum() > 0.5 * body.total_mass * 9.81
    np.testing.assert_array_equal(G[0], F[0])


@pytest.mark.parametrize("env_id", ["pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1", "pbad_gym/Spider-v2"])
def test_envs_pass_the_backend_through_and_both_agree(env_id):
    import gymnasium as gym

    envs = [gym.make_vec(env_id, num_envs=3, backend=b) for b in ("numpy", "numba")]
    assert [e.sim.backend for e in envs] == ["numpy", "numba"]
    assert gym.make_vec(env_id, num_envs=1).sim.backend == "numba"  # the default on CPU
    obs = [e.reset(seed=3)[0] for e in envs]
    rng = np.random.default_rng(0)
    for _ in range(15):
        a = rng.uniform(-1, 1, envs[0].action_space.shape)
        out = [e.step(a) for e in envs]
        obs = [o[0] for o in out]
        np.testing.assert_array_equal(out[0][4]["iterations"], out[1][4]["iterations"])
    np.testing.assert_allclose(envs[0].sim.q, envs[1].sim.q, atol=1e-10)
    np.testing.assert_allclose(obs[0], obs[1], atol=1e-5)


def test_observation_beyond_float32_range_counts_as_divergence():
    """Finiteness is judged on the float32 observation the agent receives, not on its float64 source."""
    import gymnasium as gym

    env = gym.make_vec("pbad_gym/Swimmer-v1", num_envs=2)
    env.reset(seed=0)
    get_obs = env._get_obs

    def huge(q, qd, kin):
        obs = get_obs(q, qd, kin)
        obs[0, 0] = 1e39  # finite in float64, inf in float32
        return obs

    env._get_obs = huge
    obs, _, _, truncated, info = env.step(np.zeros(env.action_space.shape))
    assert info["diverged"][0] and truncated[0] and not info["diverged"][1]
    assert np.all(np.isfinite(obs))


def test_compiled_kinematics_match_numpy():
    from pbad_gym.kernels.numba.contract import forward_kinematics as compiled
    from pbad_gym.kinematics import forward_kinematics, normalize

    body = spider()
    q = normalize(body, np.random.default_rng(0).normal(size=(5, body.nq)))
    for a, b in zip(forward_kinematics(body, q), compiled(body, q)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)


def test_step_substeps_is_n_single_steps_fused_or_not():
    """Simulator.step(tau, substeps=n): the numba backend's one compiled call for n steps gives the n single steps'
    numbers bit for bit (state, velocity, contact memory, every step's configuration and velocity, summed
    iterations), and the NumPy backend's loop the same to round-off; n must be a positive integer."""
    import gymnasium as gym

    envs = {b: gym.make_vec("pbad_gym/Spider-v2", num_envs=3, backend=b, frame_skip=1) for b in ("numba", "numpy")}
    single = gym.make_vec("pbad_gym/Spider-v2", num_envs=3, backend="numba", frame_skip=1)
    for e in (*envs.values(), single):
        e.reset(seed=7)
    tau = np.zeros((3, single.body.nv))
    tau[:, single.actuated] = np.random.default_rng(7).uniform(-1, 1, (3, 8)) * single.gear
    out = {b: e.sim.step(tau, substeps=4) for b, e in envs.items()}
    its, qs, qds = 0, [], []
    for _ in range(4):
        its = its + single.sim.step(tau)["iterations"]
        qs.append(single.sim.q.copy())
        qds.append(single.sim.qd.copy())
    fused, ref = envs["numba"].sim, single.sim
    np.testing.assert_array_equal(fused.q, ref.q)
    np.testing.assert_array_equal(fused.qd, ref.qd)
    np.testing.assert_array_equal(fused.state.q_prev, ref.state.q_prev)
    np.testing.assert_array_equal(fused.state.contact.anchor, ref.state.contact.anchor)
    np.testing.assert_array_equal(out["numba"]["iterations"], its)
    np.testing.assert_array_equal(out["numba"]["substep_q"], np.array(qs))
    np.testing.assert_array_equal(out["numba"]["substep_qd"], np.array(qds))
    assert fused.time == ref.time
    np.testing.assert_allclose(envs["numpy"].sim.q, ref.q, atol=1e-10)
    np.testing.assert_array_equal(out["numpy"]["iterations"], its)
    np.testing.assert_allclose(out["numpy"]["substep_q"], np.array(qs), rtol=0, atol=1e-10)
    np.testing.assert_allclose(out["numpy"]["substep_qd"], np.array(qds), rtol=0, atol=1e-7)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            fused.step(tau, substeps=bad)


def test_substep_kinematics_only_where_asked():
    """Simulator.step keeps every substep's kinematics only with substep_kin=True (the environments' path,
    Simulator.advance, always does: the divergence guard reads them); either way the state, every substep's
    configuration and the final kinematics are the same, and substep_kin's last entry is the final one."""
    sims = [Simulator(spider(), dt=0.01, num_envs=3, backend="numba", contact=True)
            for _ in range(3)]
    tau = np.random.default_rng(3).normal(size=(3, sims[0].body.nv))
    plain = sims[0].step(tau, substeps=5)
    kept = sims[1].step(tau, substeps=5, substep_kin=True)
    _, info = sims[2].advance(tau, substeps=5)
    assert "substep_kin" not in plain
    for got in (kept["substep_kin"], info.substep_kin):
        assert got.R.shape == (5, 3, sims[0].body.L, 3, 3)
        np.testing.assert_array_equal(got.R[-1], sims[0].kinematics().R)
        np.testing.assert_array_equal(got.v[-1], sims[0].kinematics().v)
    np.testing.assert_array_equal(kept["substep_q"], plain["substep_q"])
    for s in sims[1:]:
        np.testing.assert_array_equal(s.q, sims[0].q)
        np.testing.assert_array_equal(s.kinematics().t, sims[0].kinematics().t)
    # one substep's kinematics from the fused call equal those of stepping one substep alone
    one = Simulator(spider(), dt=0.01, num_envs=3, backend="numba", contact=True)
    for _ in range(4):
        one.step(tau)
    np.testing.assert_array_equal(kept["substep_kin"].R[3], one.kinematics().R)


def test_each_solver_default_is_written_once():
    """The Simulator's, impulse_step's and LCPOptions.create's LCP defaults are LCPOptions' fields, and
    SolverOptions' field defaults are what create() fills in for float64 LM: no second copy that can drift."""
    import dataclasses
    import inspect

    from pbad_gym.integrators.impulse import impulse_step
    from pbad_gym.integrators.options import LCPOptions, SolverOptions
    from pbad_gym.simulator import Simulator

    fields = {f.name: f.default for f in dataclasses.fields(LCPOptions)}
    for fn in (Simulator.__init__, impulse_step, LCPOptions.create):
        params = inspect.signature(fn).parameters
        for name, default in fields.items():
            assert params[f"lcp_{name}"].default == default, (fn.__qualname__, name)
    assert SolverOptions() == SolverOptions.create(np.float64)
