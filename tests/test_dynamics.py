import numpy as np
from conftest import random_q

from pbad_gym.dynamics import crba, energy, forward_dynamics, rnea
from pbad_gym.kinematics import forward_kinematics, integrate, point_jacobian


def _mass_matrix_from_jacobians(body, q):
    """Σ_i m_i J_comᵀ J_com + J_ωᵀ I_i^world J_ω, from point Jacobians (independent of CRBA)."""
    kin = forward_kinematics(body, q)
    M = np.zeros((q.shape[0], body.nv, body.nv))
    for i, lk in enumerate(body.links):
        _, J = point_jacobian(body, kin, np.array([i]), lk.com[None])
        J = J[:, 0]
        Jw = np.swapaxes(kin.w * body.subtree[body.dof_link][:, i][None, :, None], 1, 2)
        Iw = kin.R[:, i] @ lk.inertia @ np.swapaxes(kin.R[:, i], 1, 2)
        M += lk.mass * np.swapaxes(J, 1, 2) @ J + np.swapaxes(Jw, 1, 2) @ Iw @ Jw
    return M


def test_mass_matrix_spd_and_equal_to_jacobian_sum(body):
    q = random_q(body, 3, np.random.default_rng(0))
    M = crba(body, q)
    np.testing.assert_allclose(M, np.swapaxes(M, 1, 2), atol=1e-15)
    assert np.linalg.eigvalsh(M).min() > 0
    ref = _mass_matrix_from_jacobians(body, q)
    np.testing.assert_allclose(M, ref, rtol=1e-10, atol=1e-14 * np.abs(ref).max())


def test_rnea_inverts_forward_dynamics(body):
    rng = np.random.default_rng(1)
    q = random_q(body, 3, rng)
    qd, tau = rng.standard_normal((3, body.nv)), rng.standard_normal((3, body.nv))
    qdd = forward_dynamics(body, q, qd, tau)
    np.testing.assert_allclose(rnea(body, q, qd, qdd), tau, atol=1e-9)
    # and M q̈ + h = τ with M from CRBA
    h = rnea(body, q, qd, np.zeros_like(qd))
    np.testing.assert_allclose((crba(body, q) @ qdd[..., None])[..., 0] + h, tau, atol=1e-9)


def test_power_balance_checks_the_bias_forces(body):
    """dE/dt = q̇ᵀτ along the exact dynamics: fails if Coriolis/centrifugal or gravity terms are wrong."""
    rng = np.random.default_rng(2)
    q = random_q(body, 2, rng)
    qd, tau = rng.standard_normal((2, body.nv)), 0.01 * rng.standard_normal((2, body.nv))
    a = forward_dynamics(body, q, qd, tau)
    e = lambda qq, vv: sum(energy(body, qq, vv))  # noqa: E731

    def central(h):  # along the second-order Taylor trajectory; its O(h²) error is removed by Richardson below
        return (e(integrate(body, q, h * qd + 0.5 * h * h * a), qd + h * a)
                - e(integrate(body, q, -h * qd + 0.5 * h * h * a), qd - h * a)) / (2 * h)

    dE = (4 * central(1e-5) - central(2e-5)) / 3
    np.testing.assert_allclose(dE, np.sum(qd * tau, -1), rtol=1e-6, atol=1e-8)


def test_gravity_torque_of_a_horizontal_chain():
    from pbad_gym.model import chain

    b = chain(2, link_length=0.5)
    tau = rnea(b, np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 2)))
    m = b.links[0].mass
    # hinge about +y, links along +x, gravity −z: holding torque about +y is −(Σ m x) g
    np.testing.assert_allclose(tau[0], [-(m * 0.25 + m * 0.75) * 9.81, -m * 0.25 * 9.81], rtol=1e-12)
