"""Physics of the order-2 PBAD step against the conventional baselines (the paper's Figure 2 claims)."""
import numpy as np
import pytest

from pbad_gym.model import chain
from pbad_gym.simulator import Simulator


def _energies(sim, seconds):
    e = [float(sum(sim.energy())[0])]
    for _ in range(int(round(seconds / sim.dt))):
        sim.step()
        e.append(float(sum(sim.energy())[0]))
    return np.array(e)


def test_pbad_at_large_dt_is_stable_and_dissipative():
    sim = Simulator(chain(10), dt=0.05)
    e = _energies(sim, 10.0)
    assert np.all(np.isfinite(sim.q)) and np.all(np.isfinite(e))
    assert np.max(np.diff(e)) <= 1e-12  # mechanical energy never rises
    # it ends hanging at rest: the whole potential drop of a 0.5 m chain, m g L/2, is dissipated
    assert e[0] - e[-1] == pytest.approx(sim.body.total_mass * 9.81 * 0.5, rel=0.02)


def test_semi_implicit_euler_blows_up_at_large_dt():
    sim = Simulator(chain(10), dt=0.05, integrator="semi_implicit_euler")
    with np.errstate(all="ignore"):
        e = _energies(sim, 2.0)
    scale = sim.body.total_mass * 9.81 * 0.5
    assert not np.all(np.isfinite(e)) or np.nanmax(e) > 10 * scale


def _final_q(integrator, dt, t_end=0.25, n_links=3):
    sim = Simulator(chain(n_links), dt=dt, integrator=integrator)
    for _ in range(int(round(t_end / dt))):
        sim.step()
    return sim.q[0].copy()


@pytest.fixture(scope="module")
def reference():
    return _final_q("rk4", 1e-4)


def test_rk4_converges_to_the_reference(reference):
    assert np.max(np.abs(_final_q("rk4", 1e-3) - reference)) < 1e-6


def test_pbad_order_two_is_first_order_accurate(reference):
    dts = np.array([0.0025, 0.00125, 0.000625, 0.0003125])
    errs = np.array([np.max(np.abs(_final_q("pbad", dt) - reference)) for dt in dts])
    orders = np.log2(errs[:-1] / errs[1:])  # observed order between successive halvings
    assert np.all(orders > 0.8) and 0.9 < orders[-1] < 1.1, (orders, errs)


def test_explicit_euler_gains_energy_where_pbad_loses_it():
    e_pbad = _energies(Simulator(chain(5), dt=0.002), 1.0)
    e_euler = _energies(Simulator(chain(5), dt=0.002, integrator="euler"), 1.0)
    assert e_pbad[-1] < e_pbad[0] and e_euler.max() > e_euler[0] + 1e-3


@pytest.mark.parametrize("omega, dt", [(10.0, 0.001), (20.0, 0.001), (10.0, 0.0005)])
def test_free_rotation_slows_as_the_affine_inertia_target_predicts(omega, dt):
    """A rotor spinning freely about a fixed axis (no force, no gravity) loses speed in the order-2 step: the
    affine target 2R_k − R_{k−1} advances the angle by Δ − Δ³ per step (Δ = ωΔt), so dω/dt = −Δt·ω³ and the
    kinetic energy after t is 1/(1 + 2ω₀²Δt·t) of the start (at ω₀ = 10 rad/s and 1 ms: 0.83 after 1 s). This is
    the step's numerical dissipation of rotation (docs/physics.md §2.4), first order in Δt."""
    from pbad_gym.model import Body, Capsule, Joint, Link

    shape = Capsule.fromto((0.0, 0.0, 0.0), (0.3, 0.0, 0.0), 0.02, 1000.0)
    body = Body([Link("arm", -1, Joint("hinge", axis=(0.0, 0.0, 1.0)), shapes=[shape])])
    sim = Simulator(body, dt, gravity=(0.0, 0.0, 0.0), backend="numpy", tol=1e-12)
    sim.reset(q=np.array([0.0]), qd=np.array([omega]))
    t = 0.5
    for _ in range(int(round(t / dt))):
        sim.step()
    ratio = (float(sim.qd[0, 0]) / omega) ** 2
    assert ratio == pytest.approx(1.0 / (1.0 + 2.0 * omega**2 * dt * t), rel=2e-3)
