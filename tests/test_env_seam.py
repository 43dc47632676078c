"""The environments on the engine seam: physics from the engine (centre of mass, contact forces), Gymnasium-named
hooks, the public contract between the single and the vector env, rendering from poses, Body.meta, and the
configuration mistakes the envs refuse (max_iter too small, render_mode="human" through gymnasium.make)."""
import inspect

import gymnasium as gym
import numpy as np
import pytest

import pbad_gym
from pbad_gym.arrays import to_numpy
from pbad_gym.dynamics import centre_of_mass, energy
from pbad_gym.envs import (PBADEnv, SpiderV1VectorEnv, SpiderVectorEnv, SwimmerEnv, SwimmerV1VectorEnv,
                           SwimmerVectorEnv)
from pbad_gym.envs.render import render_frames
from pbad_gym.kinematics import forward_kinematics, integrate
from pbad_gym.model import Body, Link, spider, swimmer
from pbad_gym.model.shapes import Sphere

IDS = ["pbad_gym/Swimmer-v0", "pbad_gym/Spider-v0", "pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1", "pbad_gym/Spider-v2"]
FLOORS = {"pbad_gym/Swimmer-v0": 2, "pbad_gym/Swimmer-v1": 2, "pbad_gym/Spider-v0": 3, "pbad_gym/Spider-v1": 20,
          "pbad_gym/Spider-v2": 8}


def _random_q(body, n, seed=0):
    rng = np.random.default_rng(seed)
    return integrate(body, np.tile(body.q0(), (n, 1)), rng.uniform(-1, 1, (n, body.nv)))


# --- engine physics the envs use -------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [swimmer(), spider(density=5.0)], ids=["swimmer", "spider"])
def test_centre_of_mass_is_the_mass_weighted_link_centres(body):
    q = _random_q(body, 3)
    kin = forward_kinematics(body, q)
    ref = sum(lk.mass * (kin.t[:, i] + kin.R[:, i] @ lk.com) for i, lk in enumerate(body.links)) / body.total_mass
    np.testing.assert_allclose(centre_of_mass(body, q), ref, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(centre_of_mass(body, kin=kin), centre_of_mass(body, q))
    # the potential energy is the body's weight at its centre of mass
    g = np.array([0.0, 0.0, -9.81])
    _, pe = energy(body, q, np.zeros((3, body.nv)), g)
    np.testing.assert_allclose(pe, body.total_mass * 9.81 * ref[:, 2], rtol=1e-12, atol=1e-9)
    with pytest.raises(ValueError, match="q .* or kin"):
        centre_of_mass(body)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_env_centre_of_mass_is_the_engines(backend):
    """The env's centre of mass is dynamics.centre_of_mass of its state: exactly on the NumPy backend; on numba the
    state's kinematics come from the compiled step, which agrees with NumPy's forward kinematics to round-off."""
    if backend == "numba":
        pytest.importorskip("numba")
    env = SwimmerV1VectorEnv(num_envs=2, backend=backend)
    env.reset(seed=0)
    env.step(np.full((2, 3), 0.5, np.float32))
    expected = centre_of_mass(env.body, env.sim.q)
    check = np.testing.assert_array_equal if backend == "numpy" else (
        lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-12))
    check(env.centre_of_mass(), expected)
    check(env.centre_of_mass(env.sim.kinematics()), expected)


@pytest.mark.parametrize("cls, kwargs", [(SpiderV1VectorEnv, {}),  # smoothed Coulomb friction
                                         (SpiderVectorEnv, {"include_contact_forces_in_observation": True}),
                                         (SpiderVectorEnv, {"include_contact_forces_in_observation": True,
                                                            "contact_model": "impulse"})],
                         ids=["coulomb", "viscous", "impulse"])
def test_spider_contact_forces_are_the_simulators(cls, kwargs):
    """Observation and contact cost use the force the step applied (Simulator.contact_forces), not a copy of the
    force laws; after a reset the reset pose's normal forces."""
    lo, hi = -1e4, 1e4
    env = cls(num_envs=2, contact_force_range=(lo, hi), **kwargs)
    obs, _ = env.reset(seed=1)
    n_obs = 35
    F = to_numpy(env.sim.contact_forces)
    np.testing.assert_array_equal(obs[:, n_obs:], np.clip(F, lo, hi).reshape(2, -1).astype(np.float32))
    assert np.all(F[..., :2] == 0)  # no step yet: no friction
    for a in np.random.default_rng(2).uniform(-1, 1, (15, 2, 12)).astype(np.float32):
        obs, _, _, _, info = env.step(a)
    F = to_numpy(env.sim.contact_forces)
    np.testing.assert_array_equal(env.contact_forces(), F)
    np.testing.assert_array_equal(obs[:, n_obs:], np.clip(F, lo, hi).reshape(2, -1).astype(np.float32))
    np.testing.assert_allclose(info["reward_contact"], -env.contact_cost_weight * np.sum(np.clip(F, lo, hi) ** 2,
                                                                                        axis=(1, 2)))
    assert np.any(F[..., :2] != 0)  # friction once the feet move on the ground


# --- hooks and the single / vector contract --------------------------------------------------------------------
@pytest.mark.parametrize("cls", [SwimmerVectorEnv, SpiderVectorEnv])
def test_hooks_are_named_after_gymnasiums(cls):
    for hook in ("reset_model", "_get_obs", "_get_rew", "_get_reset_info"):
        assert getattr(cls, hook) is not getattr(object, hook, None)
    for old in ("_initial_state", "_observe", "_reward", "_state_info", "_reset_info", "_advance"):
        assert not hasattr(cls, old)


def test_single_env_uses_only_the_public_contract():
    source = inspect.getsource(PBADEnv)
    assert "vec._" not in source
    single = SwimmerEnv()
    vec = SwimmerVectorEnv(num_envs=1, max_episode_steps=None)
    with pytest.raises(RuntimeError, match="reset"):
        vec.advance(np.zeros(3, np.float32), batched=False)
    o1, i1 = single.reset(seed=4)
    o2, i2 = vec.reset(seed=4)
    np.testing.assert_array_equal(o1, o2[0])
    for a in np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32):
        obs, reward, terminated, truncated, info = single.step(a)
        vobs, vreward, vterm, vdiv, vinfo = vec.advance(a, batched=False)
        np.testing.assert_array_equal(obs, vobs[0])
        assert reward == vreward[0] and terminated == vterm[0] and truncated == vdiv[0]
        assert info == {k: v[0].item() for k, v in vinfo.items()}
    with pytest.raises(ValueError, match=r"shape \(1, 3\)"):
        vec.advance(np.zeros(3, np.float32))  # batched by default


# --- rendering from poses, Body.meta ---------------------------------------------------------------------------
def test_render_frames_takes_a_body_and_poses():
    body = spider(density=5.0)
    q = np.tile(body.q0(), (2, 1))
    q[:, 2] = body.meta["stand_height"]
    q[1, 0] = 0.3
    frames = render_frames(body, q, width=40, height=30)
    assert len(frames) == 2 and frames[0].shape == (30, 40, 3) and frames[0].dtype == np.uint8
    same = render_frames(body, kin=forward_kinematics(body, q), width=40, height=30)
    np.testing.assert_array_equal(frames[0], same[0])
    assert len(np.unique(frames[1].reshape(-1, 3), axis=0)) > 10  # shaded body and ground, not a blank image
    with pytest.raises(ValueError, match="q .* or kin"):
        render_frames(body)


def test_body_meta_is_a_constructor_argument():
    link = Link("ball", -1, pbad_gym.Joint("free"), shapes=[Sphere(radius=0.1)])
    assert Body([link]).meta == {}
    meta = {"actuated": np.array([0])}
    body = Body([link], name="ball", meta=meta)
    assert body.meta == meta and body.meta is not meta
    with pytest.raises(TypeError, match="meta must be a dict"):
        Body([link], meta=[1])
    assert list(swimmer().meta["actuated"]) == [6, 7, 8] and "stand_height" in spider().meta
    assert render_frames(Body([link]), np.array([[0, 0, 1, 1, 0, 0, 0]], float), width=8, height=6)[0].shape == (
        6, 8, 3)  # nothing to draw: background only


# --- configuration mistakes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", IDS)
def test_too_small_max_iter_is_refused_naming_the_range(env_id):
    floor = FLOORS[env_id]
    for bad in (0, 1, floor - 1, 2.5, True, "50"):
        if isinstance(bad, int) and not isinstance(bad, bool) and bad >= floor:
            continue
        with pytest.raises(ValueError, match=rf"max_iter must be None .* or an integer >= {floor} .*got"):
            gym.make_vec(env_id, num_envs=1, max_iter=bad)
        with pytest.raises(ValueError, match=rf"max_iter .* >= {floor}"):
            gym.make(env_id, max_iter=bad)
    assert gym.make_vec(env_id, num_envs=1, max_iter=floor).unwrapped.sim.max_iter == floor


@pytest.mark.parametrize("env_id, lm", [("pbad_gym/Swimmer-v1", 50), ("pbad_gym/Spider-v0", 50),
                                        ("pbad_gym/Spider-v1", 100)])
def test_max_iter_default_is_the_optimisers(env_id, lm):
    assert gym.make_vec(env_id, num_envs=1).unwrapped.sim.max_iter == lm
    assert gym.make_vec(env_id, num_envs=1, optimizer="lbfgs").unwrapped.sim.max_iter == 500


def test_spider_with_lbfgs_converges_every_step():
    """Issue repro: with the env's old max_iter=50 for every optimiser, L-BFGS left rows unconverged at 7 of 30
    steps; the engine's L-BFGS default (500) converges them all."""
    env = gym.make_vec("pbad_gym/Spider-v0", num_envs=4, vectorization_mode="vector_entry_point",
                       optimizer="lbfgs")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(30):
        info = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))[4]
        assert info["converged"].all() and not info["diverged"].any()


@pytest.mark.parametrize("env_id", ["pbad_gym/Swimmer-v1", "pbad_gym/Spider-v1"])
def test_human_render_mode_is_refused_by_the_env_through_make(env_id):
    message = r"render_mode must be None or one of \['rgb_array'\], got 'human'"
    with pytest.raises(ValueError, match=message):
        gym.make(env_id, render_mode="human")
    with pytest.raises(ValueError, match=message):
        gym.make_vec(env_id, num_envs=2, render_mode="human")
    env = gym.make(env_id, render_mode="rgb_array", render_width=16, render_height=12)
    assert env.metadata["render_modes"] == ["rgb_array"] and env.render_mode == "rgb_array"
    env.reset(seed=0)
    assert env.render().shape == (12, 16, 3)


# --- env → Simulator → backend in three hops -------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("frame_skip", [1, 3])
def test_an_env_step_is_one_advance_one_backend_call_and_one_action_check(backend, frame_skip, monkeypatch):
    """Each env step validates the action once (the env's check; the Simulator's own τ check is not run again) and
    reaches the backend's step function in one call with the frame_skip substeps; what the env reads of the new
    state is the view that call returned (observations equal those of the public Simulator.step path)."""
    env = SpiderVectorEnv(num_envs=2, backend=backend, frame_skip=frame_skip)
    ref = SpiderVectorEnv(num_envs=2, backend=backend, frame_skip=frame_skip)
    env.reset(seed=1)
    ref.reset(seed=1)
    sim = env.sim
    calls = []
    backend_step = sim._step

    def counted(model, state, tau, options, substeps=1, **kw):
        calls.append(substeps)
        return backend_step(model, state, tau, options, substeps, **kw)

    def no_second_check(tau):
        raise AssertionError("the Simulator checked tau again")

    monkeypatch.setattr(sim, "_step", counted)
    monkeypatch.setattr(sim, "_checked_tau", no_second_check)
    rng = np.random.default_rng(0)
    for k in range(3):
        a = rng.uniform(-1, 1, env.action_space.shape)
        obs, *_ = env.step(a)
        obs_ref, *_ = ref.step(a)
        assert calls == [frame_skip] * (k + 1)
        np.testing.assert_array_equal(obs, obs_ref)
        assert env._views()[0].q is sim.q  # the view of the state the step left
    with pytest.raises(ValueError, match="action must have shape"):
        env.step(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.full(env.action_space.shape, np.nan))
    assert len(calls) == 3


def test_envs_read_no_simulator_caches():
    """The environments read the new state from the StateView a step returns (or Simulator.view() after a reset or
    restore), never the Simulator's State or its cached kinematics, velocity and contact forces."""
    import pbad_gym.envs.base as base
    import pbad_gym.envs.divergence as divergence
    import pbad_gym.envs.spider as spider_env
    import pbad_gym.envs.swimmer as swimmer_env

    for module in (base, divergence, spider_env, swimmer_env):
        source = inspect.getsource(module)
        for read in ("sim.state", "sim.kinematics(", "sim.qd", "sim.contact_forces", "sim.step(", ".velocity"):
            assert read not in source, (module.__name__, read)


def test_an_env_sees_a_reset_made_on_its_simulator():
    """A state written through ``env.sim.reset`` (tests, tools) is what the env's centre of mass and contact forces
    report next: the env's view follows the Simulator's state."""
    env = SpiderVectorEnv(num_envs=2)
    env.reset(seed=0)
    env.step(np.zeros(env.action_space.shape))
    q, qd = env._state_numpy()
    q2 = q.copy()
    q2[:, 2] += 1.0  # lifted clear of the ground: no contact force
    env.sim.reset(q2, qd)
    np.testing.assert_allclose(env.centre_of_mass(), to_numpy(centre_of_mass(env.body, q2)), rtol=0, atol=1e-12)
    assert not np.any(env.contact_forces())
