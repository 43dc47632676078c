"""Environment guards: the divergence energy budget, collocation refused with contact, per-dtype solver
tolerances and the LCP options the envs accept."""
import gymnasium
import numpy as np
import pytest

import pbad_gym  # noqa: F401  (registers the environments)
from pbad_gym.envs import SpiderVectorEnv, SwimmerVectorEnv
from pbad_gym.envs.divergence import EnergyBudget, body_reach
from pbad_gym.integrators import StepInfo
from pbad_gym.kinematics import normalize
from pbad_gym.lcp import METHODS
from pbad_gym.model import spider


def registered(name):
    """Registered versions of ``name`` ("Spider", "Swimmer")."""
    return [f"pbad_gym/{name}-{v}" for v in ("v0", "v1") if f"pbad_gym/{name}-{v}" in gymnasium.registry]


def spider_ids():
    return registered("Spider")


def make_vec(env_id, n, **kwargs):
    return gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)


def run(env, actions, hook=None):
    """Step ``env`` through actions (T, B, n_act); hook(env, t) before step t. Returns obs (T, B, d) and the
    diverged flags (T, B)."""
    obs, div = [], []
    for t, a in enumerate(actions):
        if hook is not None:
            hook(env, t)
        o, _, _, _, info = env.step(a)
        obs.append(o)
        div.append(info["diverged"])
    return np.array(obs), np.array(div)


# --- divergence -------------------------------------------------------------------------------------------------
def test_body_reach_bounds_every_pair_of_points():
    body = spider()
    reach = body_reach(body)
    rng = np.random.default_rng(0)
    from pbad_gym.energies import sphere_centres
    from pbad_gym.kinematics import forward_kinematics, integrate

    q = integrate(body, np.tile(body.q0(), (64, 1)), rng.uniform(-3, 3, (64, body.nv)))
    P = sphere_centres(body, forward_kinematics(body, q))
    r = body.contact_points()[2]
    far = np.linalg.norm(P[:, :, None] - P[:, None, :], axis=-1) + r[:, None] + r[None, :]
    assert far.max() <= reach
    assert reach < 10.0  # a few metres for a robot of 1 m: the bound is not vacuous


@pytest.mark.parametrize("env_id", registered("Swimmer") + spider_ids())
def test_physical_runs_stay_within_the_energy_budget(env_id):
    env = make_vec(env_id, 4)
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    budget = env.energy_budget
    step_ratio, total_ratio = [], []
    done = np.zeros(4, dtype=bool)
    for _ in range(60):
        K0 = budget.K.copy()
        _, _, term, trunc, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        assert not info["diverged"].any()
        K, ke, c = budget.measure(env.centre_of_mass(env.sim.kinematics()))
        # rows reset by this step (autoreset) start a new budget
        step_ratio.append(np.where(done, 0.0, (K - K0) / (c * np.sqrt(2 * ke) * env.dt)))
        total_ratio.append(np.where(done, 0.0, K / budget.s ** 2))
        done = term | trunc
    # the margin is real: physical runs stay below the bounds themselves, not only below safety × bounds
    assert np.max(step_ratio) < 1.0
    assert np.max(total_ratio) < 1.0


@pytest.mark.parametrize("env_id,kwargs", [(i, {}) for i in registered("Swimmer") + spider_ids()]
                         + [(i, {"contact_model": "impulse"}) for i in spider_ids()[-1:]])
def test_a_row_driven_to_blow_up_is_flagged_and_the_others_are_unaffected(env_id, kwargs):
    B, T, bad = 4, 12, 2
    rng = np.random.default_rng(1)
    ref = make_vec(env_id, B, **kwargs)
    n_act = ref.action_space.shape[1]
    actions = rng.uniform(-1, 1, (T, B, n_act))
    ref.reset(seed=5)
    obs_ref, div_ref = run(ref, actions)
    assert not div_ref.any()

    def kick(env, t):  # a speed no actuator can reach in a few steps, set at step 3
        if t == 3:
            q, qd = (np.asarray(a)[bad:bad + 1] for a in env._state_numpy())
            qd = qd + 1000.0 * np.sign(rng.standard_normal(qd.shape))
            env.set_state(q, qd, mask=np.arange(B) == bad)

    env = make_vec(env_id, B, **kwargs)
    env.reset(seed=5)
    obs, div = run(env, actions, kick)
    flagged = np.nonzero(div[:, bad])[0]
    assert flagged.size and 3 <= flagged[0] <= 3 + 4  # within 5 steps of the kick
    others = np.arange(B) != bad
    assert not div[:, others].any()
    np.testing.assert_array_equal(obs[:, others], obs_ref[:, others])  # bit for bit


def test_energy_growing_geometrically_is_caught_within_a_few_steps():
    """A blow-up that starts from a physical state (kinetic energy ×4 per step) crosses the per-step bound long
    before it reaches 1e9 J; an unchanged row is never flagged."""
    env = SpiderVectorEnv(num_envs=2)
    env.reset(seed=0)
    budget = env.energy_budget
    q, qd = env._state_numpy()
    qd = qd + np.eye(env.body.nv)[0]  # 1 m/s along x: a physical start
    env.sim.reset(q, qd)
    budget.start(np.arange(2), env.centre_of_mass(env.sim.kinematics()))
    for k in range(1, 30):
        env.sim.reset(q, qd * np.array([[2.0 ** k], [1.0]]))
        exceeded, K = budget.check(env.centre_of_mass(env.sim.kinematics()))
        assert not exceeded[1]
        if exceeded[0]:
            break
        budget.accept(np.ones(2, dtype=bool))
    assert exceeded[0] and K[0] < 1e7, (k, K[0])


@pytest.mark.parametrize("env_cls", [SwimmerVectorEnv, SpiderVectorEnv])  # without and with the floor term
@pytest.mark.parametrize("n", [1, 3])  # one step, frame_skip substeps
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_guard_matches_the_numpy_check_bit_for_bit(env_cls, n, dtype):
    """The numba backend's guard after a step (terms and checks in one compiled call, kernels/numba/guard.py) gives
    the NumPy check's exceeded, K and pending budgets bit for bit, on the energy terms the kernel computes for the
    same states (those terms are the compiled terms entry's, bit for bit), NaN and blown-up rows included."""
    from pbad_gym.envs.divergence import energy_terms
    from pbad_gym.kernels.numba.step import forward_kinematics_numba
    from pbad_gym.kinematics import Kinematics

    B = 7
    env = env_cls(num_envs=B, backend="numba", dtype=dtype)
    env.reset(seed=0)
    budget, sim = env.energy_budget, env.sim
    assert budget._compiled is not None
    rng = np.random.default_rng(n)
    q0 = np.asarray(sim.q, np.float64)
    for trial in range(12):
        scale = 10.0 ** rng.uniform(-3, 2)
        q = np.stack([q0 + 0.2 * rng.normal(size=q0.shape) for _ in range(n)])
        q = normalize(sim.body, q.reshape(n * B, -1)).reshape(n, B, -1).astype(dtype)
        qd = (scale * rng.normal(size=(n, B, sim.body.nv))).astype(dtype)
        if trial % 3 == 1:
            qd[rng.integers(n), rng.integers(B)] = np.nan
        budget.K = scale * rng.uniform(0, 1, B)
        budget.s = np.sqrt(budget.K) + rng.uniform(0, 2, B)
        K0, s0 = budget.K.copy(), budget.s.copy()
        kin = forward_kinematics_numba(sim.body, q.reshape(n * B, -1))  # (the kernel's, as a step leaves them)
        kin = Kinematics(*(f.reshape((n, B) + f.shape[1:]) for f in kin))
        view = sim.view()  # (the state the check leaves its last terms for)
        got = budget.check_step(view, StepInfo(None, None, None, substep_q=q, substep_qd=qd, substep_kin=kin))
        got_pending = budget._pending
        terms = energy_terms(budget.model, q, qd)
        assert np.array_equal(terms.kinetic[-1], budget.current(view).kinetic, equal_nan=True)
        budget.K, budget.s = K0, s0
        with np.errstate(invalid="ignore"):
            want = budget.check(terms=terms)
        want_pending = budget._pending
        assert got[0].any() or trial % 3 != 1  # the NaN row is flagged
        for a, b in zip(got + got_pending, want + want_pending):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (trial, a, b)


def test_energy_budget_rejects_a_bad_safety_factor():
    env = SwimmerVectorEnv(num_envs=1)
    with pytest.raises(ValueError, match="safety"):
        EnergyBudget(env.sim, env.actuated, env.gear, None, safety=0.5)
    with pytest.raises(ValueError, match="safety"):
        SwimmerVectorEnv(num_envs=1, divergence_safety=np.inf)


# --- collocation with contact ------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", [3, 4])
def test_collocation_is_refused_with_contact(order):
    with pytest.raises(ValueError, match="refused with ground contact"):
        SpiderVectorEnv(num_envs=1, order=order)
    for env_id in spider_ids():
        with pytest.raises(ValueError, match="refused with ground contact"):
            make_vec(env_id, 1, order=order)


def test_collocation_without_contact_is_accepted():
    env = SwimmerVectorEnv(num_envs=2, order=3)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.zeros(env.action_space.shape))
    assert info["converged"].all()


# --- float32 ------------------------------------------------------------------------------------------------------
def test_solver_tolerance_defaults_per_dtype():
    assert SwimmerVectorEnv(num_envs=1).sim.tol == 1e-7
    assert SwimmerVectorEnv(num_envs=1, dtype=np.float32).sim.tol == 1e-5
    assert SwimmerVectorEnv(num_envs=1, dtype=np.float32, tol=1e-4).sim.tol == 1e-4


@pytest.mark.parametrize("env_id,B,T", [(i, 8, 150) for i in registered("Swimmer")] + [("pbad_gym/Spider-v0", 4, 60),
                                                                                      ("pbad_gym/Spider-v2", 4, 40)])
def test_float32_converges_at_the_default_tolerance(env_id, B, T):
    env = make_vec(env_id, B, dtype=np.float32)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    unconverged = []
    for _ in range(T):
        _, _, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        unconverged.append(~info["converged"])
        assert not info["diverged"].any()
    assert np.mean(unconverged) <= 0.01


@pytest.mark.slow
def test_float32_spider_v1_converges_at_the_default_tolerance():
    if "pbad_gym/Spider-v1" not in gymnasium.registry:
        pytest.skip("pbad_gym/Spider-v1 not registered")
    test_float32_converges_at_the_default_tolerance("pbad_gym/Spider-v1", 8, 150)


# --- LCP options ---------------------------------------------------------------------------------------------------
def test_envs_accept_every_lcp_method_and_validate_omega():
    for method in METHODS:
        SpiderVectorEnv(num_envs=1, contact_model="impulse", lcp_method=method)
    assert SpiderVectorEnv(num_envs=1, contact_model="impulse").sim.lcp_options["lcp_method"] == "block_pgs"
    env = SpiderVectorEnv(num_envs=1, contact_model="impulse", lcp_method="amgs", lcp_omega=1.3)
    assert env.sim.lcp_options["lcp_omega"] == 1.3
    for bad in (0.0, 2.0, -1.0, np.nan):
        with pytest.raises(ValueError, match="lcp_omega"):
            SpiderVectorEnv(num_envs=1, contact_model="impulse", lcp_method="psor", lcp_omega=bad)
    with pytest.raises(ValueError, match="lcp_omega"):
        SpiderVectorEnv(num_envs=1, contact_model="impulse", lcp_method="block_pgs", lcp_omega=1.3)
    with pytest.raises(ValueError, match="lcp_omega"):  # checked with penalty contact too, where it is unused
        SpiderVectorEnv(num_envs=1, lcp_method="pgs", lcp_omega=2.5)


def test_lcp_omega_changes_amgs():
    """AMGS at ω ≠ 1 is not PGS: the impulses differ after a few contact steps."""
    out = {}
    for omega in (1.0, 1.4):
        env = SpiderVectorEnv(num_envs=2, contact_model="impulse", lcp_method="amgs", lcp_omega=omega,
                              lcp_iterations=3)
        env.reset(seed=0)
        for _ in range(15):
            env.step(np.zeros(env.action_space.shape))
        out[omega] = np.asarray(env.sim.contact_impulses).copy()
    assert np.abs(out[1.0]).max() > 0
    assert not np.allclose(out[1.0], out[1.4])
