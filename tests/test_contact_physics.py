"""Contact physics a roboticist can check (Spider-v3's and v4's contact model): analytic cases, the friction cone
along rollouts, clean resets, and the energy ledger's closure."""
import gymnasium
import numpy as np
import pytest

import pbad_gym  # noqa: F401
from pbad_gym.bench import contact as checks
from pbad_gym.bench.energy import PARTS, ledger
from pbad_gym.energies import GroundContact, cone_excess
from pbad_gym.envs.spider import lowest_clearance

DT = 0.001
pytestmark = pytest.mark.filterwarnings("ignore:.*out of date:DeprecationWarning")


def test_incline_sticks_below_the_friction_angle_and_slides_above():
    assert abs(checks.incline(DT, 0.97)[0]) < 1e-4
    assert checks.incline(DT, 1.03)[0] > 1e-3


def test_incline_sliding_acceleration_within_one_percent():
    _, accel, expected = checks.incline(DT, theta=np.pi / 3)
    assert accel == pytest.approx(expected, rel=0.01)


def test_launched_block_stops_after_v0_squared_over_two_mu_g():
    dist, expected = checks.stopping_distance(DT)
    assert dist == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("dt", [DT, DT / 10])
def test_dropped_ball_rebounds_less_than_fifteen_percent(dt):
    height, drop = checks.rebound(dt)
    assert 0.0 <= height < 0.15 * drop


@pytest.mark.parametrize("dt", [DT, DT / 10])
def test_oblique_landing_takes_mu_times_its_normal_impulse(dt):
    """A ball landing mid-step while it slides: Coulomb's law makes its friction impulse μ times its normal impulse.
    With friction only for spheres in contact at a step's start (Spider-v4's onset) the landing step's share is
    missing, which shows the check can fail."""
    friction, cap = checks.oblique_landing(dt)
    assert cap > 1.0  # (the normal impulse per kg: more than the 1 m/s of the fall it stops)
    assert friction == pytest.approx(cap, rel=0.01)
    if dt == DT:
        lagged, cap = checks.oblique_landing(dt, onset="lagged")
        assert lagged < 0.9 * cap


def test_resting_box_does_not_drift():
    assert checks.resting_drift(DT, seconds=2.0) < 1e-4


@pytest.mark.slow
def test_resting_box_does_not_drift_for_ten_seconds():
    assert checks.resting_drift(DT, seconds=10.0) < 1e-4


def test_friction_stays_inside_its_cone_along_random_actions():
    """Spider-v3 keeps its friction impulse inside |F_t| <= μF_n (the fixed point); Spider-v2's lagged spring cap
    and Spider-v3 without re-solves do not, which shows the check can fail."""
    def share(env_id, **kw):
        _, (excess, friction), _, _ = ledger(env_id, None, 4, 0.5, 0, **kw)
        assert friction > 0
        return excess / friction

    v3 = share("Spider-v3")
    assert v3 <= 0.01
    assert share("Spider-v4") <= 0.01
    assert share("Spider-v5") <= 0.01
    assert share("Spider-v3", cone_passes=0) > 3 * v3
    assert share("Spider-v2") > 0.1


@pytest.mark.parametrize("env_id", ["pbad_gym/Spider-v3", "pbad_gym/Spider-v5"])
def test_cone_excess_is_reported_in_info(env_id):
    env = gymnasium.make_vec(env_id, num_envs=4, vectorization_mode="vector_entry_point")
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    total = 0.0
    for _ in range(10):
        _, _, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        F = env.contact_forces()
        np.testing.assert_allclose(info["cone_excess"], cone_excess(F, 1.0).sum(1))
        total += np.abs(F[..., :2]).sum()
        assert np.all(info["cone_excess"] <= 1e-3 * np.hypot(F[..., 0], F[..., 1]).sum(1) + 1e-12)
    assert total > 0


@pytest.mark.parametrize("env_id", ["pbad_gym/Spider-v3", "pbad_gym/Spider-v4", "pbad_gym/Spider-v5"])
def test_resets_start_every_sphere_above_the_ground_and_push_gently(env_id):
    env = gymnasium.make_vec(env_id, num_envs=200, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    body = env.body
    assert lowest_clearance(body, np.asarray(env.sim.q)).min() >= env.reset_clearance - 1e-12
    env.sim.step(np.zeros((200, body.nv)))  # one physics step
    weight = body.total_mass * 9.81
    assert np.abs(np.asarray(env.sim.contact_forces)).sum(axis=(1, 2)).max() < 2 * weight
    old = gymnasium.make_vec("pbad_gym/Spider-v2", num_envs=200, vectorization_mode="vector_entry_point")
    old.reset(seed=0)  # the check can fail: Spider-v2's noisy resets start spheres inside the ground
    assert (lowest_clearance(old.body, np.asarray(old.sim.q)) < 0).mean() > 0.2


def test_energy_ledger_closes_and_numerical_dissipation_shrinks_with_dt():
    """W = ΔE + the dissipations by construction; the numerical share must fall as Δt shrinks (a first-order
    implicit step), and be small at Spider-v3's own step."""
    shares = []
    for dt in (0.005, 0.001):
        tot, _, _, _ = ledger("Spider-v3", dt, 2, 0.5, 0)
        W = tot["work"].sum()
        assert W > 0
        np.testing.assert_allclose(sum(tot[p] for p in PARTS), tot["work"], rtol=1e-9, atol=1e-9)
        shares.append(tot["numerical"].sum() / W)
    assert shares[1] < 0.5 * shares[0]
    assert 0 < shares[1] < 0.1


def test_trapezoidal_springs_cut_the_numerical_dissipation():
    """Spider-v4 (trapezoidal penalty springs) against Spider-v3 (implicit) on the same random actions: the
    ledger still closes, and the step's own dissipation falls below 5 % of the actuators' work (measured over
    8 rows x 2 s: 3.8 % against 5.6 %)."""
    shares = {}
    for env_id in ("Spider-v4", "Spider-v3"):
        tot, _, _, _ = ledger(env_id, None, 4, 1.0, 0)
        np.testing.assert_allclose(sum(tot[p] for p in PARTS), tot["work"], rtol=1e-9, atol=1e-9)
        shares[env_id] = tot["numerical"].sum() / tot["work"].sum()
    assert 0 < shares["Spider-v4"] < 0.05
    assert shares["Spider-v4"] < 0.8 * shares["Spider-v3"]


@pytest.mark.parametrize("kwargs, name", [(dict(dt=0.003), "dt"), (dict(mu=-1.0), "mu"),
                                          (dict(joint_damping=-1.0), "joint_damping"),
                                          (dict(frame_skip=2.5), "frame_skip"),
                                          (dict(friction_damping=-1.0), "friction_damping"),
                                          (dict(cone_passes=-1), "cone_passes"), (dict(cone_tol=0.0), "cone_tol"),
                                          (dict(reset_clearance=-0.1), "reset_clearance")])
def test_bad_physics_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gymnasium.make("pbad_gym/Spider-v3", **kwargs)


def test_ground_contact_validates_the_friction_onset():
    with pytest.raises(ValueError, match="friction_onset"):
        GroundContact(friction="coulomb", friction_onset="first")
    for bad in (dict(friction="viscous"), dict(friction="coulomb", friction_cap="lagged_spring"),
                dict(friction="coulomb", cone_passes=0)):
        with pytest.raises(ValueError, match="friction_onset='step' needs"):
            GroundContact(friction_onset="step", **bad)
    with pytest.raises(ValueError, match="friction_onset"):
        gymnasium.make("pbad_gym/Spider-v5", friction_onset="early")


def test_gradients_refuse_the_step_onset():
    from pbad_gym.integrators.adjoint import check_differentiable

    env = gymnasium.make_vec("pbad_gym/Spider-v5", num_envs=1, vectorization_mode="vector_entry_point",
                             penalty_springs="implicit")
    with pytest.raises(ValueError, match="friction_onset"):
        check_differentiable(env.body, env.sim.model.forces)
    env = gymnasium.make_vec("pbad_gym/Spider-v5", num_envs=1, vectorization_mode="vector_entry_point",
                             penalty_springs="implicit", friction_onset="lagged")
    check_differentiable(env.body, env.sim.model.forces)


def test_ground_contact_validates_the_cap():
    with pytest.raises(ValueError, match="friction_cap"):
        GroundContact(friction="coulomb", friction_cap="spring")
    with pytest.raises(ValueError, match="cone_passes"):
        GroundContact(cone_passes=1.5)
    assert GroundContact(friction="coulomb").resolves_cone
    assert not GroundContact(friction="coulomb", friction_cap="lagged_spring").resolves_cone


@pytest.mark.parametrize("env_id", ["pbad_gym/Spider-v3", "pbad_gym/Spider-v5"])
def test_numpy_and_numba_agree_on_the_applied_cap(env_id):
    """The fixed point is the same in the NumPy engine and the kernel: 100 physics steps of Spider-v3 (the cap)
    and Spider-v5 (the cap with the landing spheres joined: the reset's drop lands within them) from one reset
    (2 rows) under the same random actions."""
    pytest.importorskip("numba")
    out = []
    for backend in ("numpy", "numba"):
        env = gymnasium.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point",
                                 backend=backend, frame_skip=50, dt=0.001)
        env.reset(seed=3)
        rng = np.random.default_rng(0)
        its = []
        for _ in range(2):
            _, _, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
            its.append(info["iterations"])
        out.append((np.asarray(env.sim.q).copy(), np.array(its), env.contact_forces().copy()))
    np.testing.assert_allclose(out[0][0], out[1][0], atol=1e-10)
    np.testing.assert_array_equal(out[0][1], out[1][1])
    np.testing.assert_allclose(out[0][2], out[1][2], atol=1e-6)


def test_the_step_onset_changes_the_landing():
    """Spider-v5 and Spider-v4 differ only in the friction onset: from the same reset and actions their states part
    once feet land (the join ran), and stay finite and close."""
    q = {}
    for env_id in ("pbad_gym/Spider-v4", "pbad_gym/Spider-v5"):
        env = gymnasium.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point")
        env.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(4):
            env.step(rng.uniform(-1, 1, env.action_space.shape))
        q[env_id] = np.asarray(env.sim.q).copy()
    gap = np.abs(q["pbad_gym/Spider-v4"] - q["pbad_gym/Spider-v5"]).max()
    assert 1e-6 < gap < 0.1


def test_bench_energy_and_contact_write_their_csv_and_png(tmp_path):
    from pbad_gym.cli import bench_main

    out = tmp_path / "res"
    assert bench_main(["energy", "--envs", "Spider-v3", "--rows", "2", "--seconds", "0.1", "--out", str(out)]) == 0
    lines = (out / "energy" / "energy.csv").read_text().splitlines()
    assert lines[0].startswith("env,dt,work_J") and lines[1].startswith("Spider-v3,0.001,")
    assert bench_main(["contact", "--quick", "--out", str(out)]) == 0
    assert len((out / "contact" / "contact.csv").read_text().splitlines()) == 11
    assert (out / "energy" / "energy.png").stat().st_size > 0 and (out / "contact" / "contact.png").stat().st_size > 0


def test_ledger_runs_a_policy_on_the_env_observations():
    seen = []

    def policy(obs):
        seen.append(obs.shape)
        return np.zeros((obs.shape[0], 8))

    tot, _, _, _ = ledger("Spider-v3", None, 2, 0.1, 0, policy=policy)
    assert seen == [(2, 66)] * 2  # one decision per 0.05 s control step
    np.testing.assert_array_equal(tot["work"], 0.0)  # zero torque does no work
