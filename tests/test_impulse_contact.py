"""Impulse ground contact (docs/physics.md §5): resting without sinking, Coulomb stopping distance, slopes, rolling,
per-trajectory independence with padded contact counts, warm start, and agreement of the LCP methods.

The step is driven through :func:`pbad_gym.integrators.impulse.impulse_step` by a small local loop that keeps
(q_prev, q) the way the Simulator does (velocity = (q_k ⊖ q_{k−1})/Δt)."""
import numpy as np
import pytest

from pbad_gym.integrators.impulse import ImpulseContact, impulse_step, initial_state, make_impulse_contact
from pbad_gym.energies import ForceModel, GroundContact
from pbad_gym.integrators import pbad_step
from pbad_gym.kinematics import difference, integrate, quat_to_rot
from pbad_gym.model import Body, Box, Joint, Link, Sphere

G = 9.81


def _sphere(radius=0.1):
    return Body([Link("s", -1, Joint("free"), shapes=[Sphere(radius=radius)])])


def _box():
    return Body([Link("box", -1, Joint("free"), shapes=[Box(half_size=(0.1, 0.1, 0.05), density=500.0)])])


def _state(body, z, v=None, rot=None, batch=1):
    """q (B, nq) at height z (scalar or (B,)), q_prev reproducing velocity v (B, nv)."""
    q = np.tile(body.q0(), (batch, 1))
    q[:, 2] = z
    if rot is not None:
        q[:, 3:7] = rot
    v = np.zeros((batch, body.nv)) if v is None else np.asarray(v, float).reshape(batch, body.nv)
    return integrate(body, q, -DT * v), q


DT = 0.01


def simulate(body, q_prev, q, steps, params=None, gravity=(0.0, 0.0, -G), **kw):
    """Local stepping loop: returns q_prev, q, the per-step info dicts and the final state."""
    forces = ForceModel(gravity=np.asarray(gravity, float))
    params = ImpulseContact() if params is None else params
    state, infos = None, []
    tau = np.zeros((q.shape[0], body.nv))
    for _ in range(steps):
        q_next, info, state = impulse_step(body, q_prev, q, tau, DT, forces, params, state, **kw)
        q_prev, q = q, q_next
        infos.append(info)
    return q_prev, q, infos, state


def velocity(body, q_prev, q):
    return difference(body, q_prev, q) / DT


# --- resting ----------------------------------------------------------------------------------------------------
def test_dropped_sphere_comes_to_rest_without_sinking():
    body = _sphere(0.1)
    params = ImpulseContact(slop=1e-3)
    q_prev, q = _state(body, 0.6)
    depths = []
    forces = ForceModel()
    state = None
    for _ in range(150):
        q_next, info, state = impulse_step(body, q_prev, q, np.zeros((1, 6)), DT, forces, params, state)
        q_prev, q = q, q_next
        depths.append(0.1 - q[0, 2])
    assert max(depths) <= params.slop + 1e-9  # speculative contact: it lands on the surface, never sinks
    v = velocity(body, q_prev, q)
    assert np.abs(v).max() < 1e-8 and info["contacts"][0] == 1
    # the impulse per step carries the weight: λ_n = m g Δt
    assert info["impulse"][0, 0, 0] == pytest.approx(body.total_mass * G * DT, rel=1e-6)


def test_baumgarte_pushes_out_a_penetrating_sphere_to_the_slop():
    body = _sphere(0.1)
    params = ImpulseContact(baumgarte=0.2, slop=1e-3)
    q_prev, q = _state(body, 0.1 - 0.02)  # 2 cm deep
    q_prev, q, infos, _ = simulate(body, q_prev, q, 60, params)
    depth = 0.1 - q[0, 2]
    assert 0.0 <= depth <= params.slop + 1e-6
    assert np.abs(velocity(body, q_prev, q)).max() < 1e-6
    # the first correction removes β of the excess depth, not more (no pop)
    q1_prev, q1, _, _ = simulate(body, *_state(body, 0.08), 1, params)
    gained = q1[0, 2] - 0.08
    assert gained == pytest.approx(0.2 * (0.02 - 1e-3), rel=1e-6)


# --- friction ---------------------------------------------------------------------------------------------------
def test_sliding_box_stops_after_v2_over_2_mu_g():
    body = _box()
    v0, mu = 10.0, 0.5
    v = np.zeros(6)
    v[0] = v0
    q_prev, q = _state(body, 0.05, v)
    q_prev, q, infos, _ = simulate(body, q_prev, q, 230, ImpulseContact(mu=mu))
    expected = v0 ** 2 / (2 * mu * G)
    err = (q[0, 0] - expected) / expected
    assert abs(err) < 0.05, f"stopping distance {q[0, 0]:.4f} vs {expected:.4f} ({100 * err:+.2f} %)"
    assert abs(err) < 0.01  # measured −0.49 %: the semi-implicit sum Δt Σ v_{k+1} falls short by v0Δt/2
    assert np.abs(velocity(body, q_prev, q)).max() < 1e-6
    assert abs(q[0, 2] - 0.05) < 1e-6  # no sinking, no tipping


@pytest.mark.parametrize("theta_deg, slides", [(35.0, True), (20.0, False)])
def test_box_on_slope_slides_only_when_steeper_than_atan_mu(theta_deg, slides):
    body = _box()
    mu, th = 0.5, np.radians(theta_deg)
    gravity = G * np.array([np.sin(th), 0.0, -np.cos(th)])  # a slope of θ, seen in the slope's frame
    q_prev, q, infos, _ = simulate(body, *_state(body, 0.05), 100, ImpulseContact(mu=mu), gravity=gravity)
    v = velocity(body, q_prev, q)[0]
    if slides:
        a = G * (np.sin(th) - mu * np.cos(th))
        assert v[0] == pytest.approx(a * 100 * DT, rel=0.02)
    else:
        assert abs(q[0, 0]) < 1e-6 and np.abs(v).max() < 1e-6


def test_skidding_sphere_rolls_at_five_sevenths():
    """The contact point is the sphere's lowest point: friction spins it up until it rolls, v = 5/7 v0 (a centre
    contact would have no lever arm and simply brake the sphere). Slow, so that PBAD's own damping of fast spin
    (about φ²/… per step for a rotation φ per step) stays below the tolerance."""
    body = _sphere(0.1)
    v0 = 0.2
    v = np.zeros(6)
    v[0] = v0
    q_prev, q, infos, _ = simulate(body, *_state(body, 0.1, v), 10, ImpulseContact(mu=0.5))
    vel = velocity(body, q_prev, q)[0]
    assert vel[0] == pytest.approx(5.0 / 7.0 * v0, rel=5e-3)
    omega_world = quat_to_rot(q[:, 3:7])[0] @ vel[3:]
    assert omega_world[1] == pytest.approx(vel[0] / 0.1, rel=1e-6)  # rolling without slip
    assert abs(infos[-1]["impulse"][0, 0, 1]) < 0.5 * 0.5 * infos[-1]["impulse"][0, 0, 0]  # sticking, inside the cone


# --- batches ------------------------------------------------------------------------------------------------------
def _mixed_batch(body):
    """Four boxes: resting flat (4 contacts), airborne (0), tilted about x landing on an edge (2, then 4), sliding."""
    z = np.array([0.05, 1.0, 0.12, 0.05])
    rot = np.tile([1.0, 0.0, 0.0, 0.0], (4, 1))
    half = np.radians(15.0) / 2
    rot[2] = [np.cos(half), np.sin(half), 0.0, 0.0]
    v = np.zeros((4, 6))
    v[3, 0] = 1.5
    v[2, 1] = 0.3
    q = np.tile(body.q0(), (4, 1))
    q[:, 2], q[:, 3:7] = z, rot
    return integrate(body, q, -DT * v), q


def test_batch_with_different_contact_counts_equals_one_at_a_time():
    body = _box()
    q_prev, q = _mixed_batch(body)
    _, qb, infos, _ = simulate(body, q_prev, q, 40)
    counts = np.stack([i["contacts"] for i in infos])
    assert counts[0, 0] == 4 and counts[0, 1] == 0 and counts[:, 1].min() == 0 and counts[:, 2].min() < 4
    assert len({tuple(c) for c in counts}) > 1  # the padding changes over the run
    for k in range(4):
        _, qk, _, _ = simulate(body, q_prev[k:k + 1], q[k:k + 1], 40)
        np.testing.assert_allclose(qb[k], qk[0], rtol=0, atol=1e-10)


def test_no_contact_is_the_plain_pbad_step():
    body = _box()
    q_prev, q = _state(body, 1.0, np.array([0.3, 0.0, 0.5, 0.2, 0.1, 0.0]))
    forces = ForceModel()
    q_imp, info, state = impulse_step(body, q_prev, q, np.zeros((1, 6)), DT, forces)
    q_pbad, _ = pbad_step(body, q_prev, q, np.zeros((1, 6)), DT, forces)
    np.testing.assert_array_equal(q_imp, q_pbad)
    assert info["contacts"][0] == 0 and not state.impulse.any()


def test_warm_start_reduces_lcp_iterations_on_a_resting_box():
    body = _box()
    runs = {}
    for warm in (1.0, 0.0):
        q_prev, q, infos, _ = simulate(body, *_state(body, 0.05), 30, ImpulseContact(warm_start=warm))
        runs[warm] = np.array([int(i["lcp_iterations"][0]) for i in infos])
        assert abs(q[0, 2] - 0.05) < 1e-6
    warm, cold = runs[1.0][5:].mean(), runs[0.0][5:].mean()
    assert cold >= 5 and warm <= 0.2 * cold, (warm, cold)


@pytest.mark.parametrize("method, order", [("amgs", "default"), ("block_pgs", "default"), ("psor", "random"),
                                           ("pgs", "error")])
def test_lcp_methods_agree_on_the_outcome(method, order):
    body = _box()
    q_prev, q = _mixed_batch(body)
    ref_prev, ref, _, _ = simulate(body, q_prev, q, 40, lcp_method="pgs", lcp_iterations=200)
    out_prev, out, infos, _ = simulate(body, q_prev, q, 40, lcp_method=method, lcp_order=order,
                                       lcp_iterations=200)
    np.testing.assert_allclose(out[:, :3], ref[:, :3], atol=1e-4)
    np.testing.assert_allclose(velocity(body, out_prev, out), velocity(body, ref_prev, ref), atol=1e-3)
    assert all(bool(np.all(i["lcp_converged"])) for i in infos[5:])


# --- options ------------------------------------------------------------------------------------------------------
def test_options_are_validated():
    body = _box()
    q_prev, q = _state(body, 0.05)
    tau = np.zeros((1, 6))
    with pytest.raises(ValueError, match="lcp_method"):
        impulse_step(body, q_prev, q, tau, DT, ForceModel(), lcp_method="gauss")
    with pytest.raises(ValueError, match="block_pgs"):
        impulse_step(body, q_prev, q, tau, DT, ForceModel(), lcp_method="block_pgs", lcp_order="error")
    with pytest.raises(ValueError, match="lcp_iterations"):
        impulse_step(body, q_prev, q, tau, DT, ForceModel(), lcp_iterations=0)
    with pytest.raises(ValueError, match="contact=None"):
        impulse_step(body, q_prev, q, tau, DT, ForceModel(contact=GroundContact()))
    with pytest.raises(ValueError, match="mu"):
        ImpulseContact(mu=-1.0)
    with pytest.raises(ValueError, match="baumgarte"):
        ImpulseContact(baumgarte=1.5)
    with pytest.raises(ValueError, match="effective_mass"):
        ImpulseContact(effective_mass="diag")
    with pytest.raises(ValueError, match="state.impulse"):
        impulse_step(body, q_prev, q, tau, DT, ForceModel(), state=initial_state(body, 2))
    assert make_impulse_contact({"mu": 0.3}).mu == 0.3 and make_impulse_contact(None) == ImpulseContact()


@pytest.mark.parametrize("meff", ["exact", "mass"])
def test_effective_mass_choices_agree_for_a_free_box(meff):
    body = _box()
    v = np.zeros(6)
    v[0] = 2.0
    _, ref, _, _ = simulate(body, *_state(body, 0.05, v), 30)
    _, out, _, _ = simulate(body, *_state(body, 0.05, v), 30, ImpulseContact(effective_mass=meff))
    np.testing.assert_allclose(out, ref, atol=1e-8)


def test_simulator_impulse_contact_model_stops_a_sliding_box():
    from pbad_gym.model import Body, Box, Joint, Link
    from pbad_gym.simulator import Simulator

    body = Body([Link("box", -1, Joint("free"), shapes=[Box(half_size=(0.1, 0.1, 0.05), density=500.0)])])
    q = body.q0().copy()
    q[2] = 0.05
    qd = np.zeros(body.nv)
    qd[0] = 10.0
    for method in ("pgs", "amgs"):
        sim = Simulator(body, dt=0.01, contact_model="impulse", contact=dict(mu=0.5), lcp_method=method)
        sim.reset(q=q, qd=qd)
        for _ in range(250):
            info = sim.step()
        assert info["lcp_converged"].all() and info["contacts"][0] == 4
        assert sim.q[0, 0] == pytest.approx(100.0 / (2 * 0.5 * 9.81), rel=0.05)
        assert abs(sim.qd[0, 0]) < 1e-6


def test_simulator_rejects_bad_contact_model_options():
    from pbad_gym.model import chain
    from pbad_gym.simulator import Simulator

    with pytest.raises(ValueError, match="contact_model"):
        Simulator(chain(2), dt=0.01, contact_model="spring")
    with pytest.raises(ValueError):
        Simulator(chain(2), dt=0.01, contact_model="impulse", lcp_method="lemke")
