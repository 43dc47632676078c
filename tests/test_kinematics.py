import numpy as np
import pytest
from conftest import random_q, rel_err

from pbad_gym.kinematics import (axis_angle, difference, forward_kinematics, integrate, point_jacobian, quat_exp,
                                 quat_log, quat_to_rot, skew)
from pbad_gym.model import chain


def test_planar_chain_positions_match_trigonometry():
    b = chain(3, link_length=0.5)
    th = np.array([[0.3, -0.7, 1.1]])
    kin = forward_kinematics(b, th)
    # hinge about +y: a rotation by θ maps +x to (cos θ, 0, −sin θ)
    cum = np.cumsum(th[0])
    x = np.concatenate([[0], 0.5 * np.cumsum(np.cos(cum))[:-1]])
    z = np.concatenate([[0], -0.5 * np.cumsum(np.sin(cum))[:-1]])
    np.testing.assert_allclose(kin.t[0, :, 0], x, atol=1e-14)
    np.testing.assert_allclose(kin.t[0, :, 2], z, atol=1e-14)
    np.testing.assert_allclose(kin.R[0, 2], axis_angle(np.array([0.0, 1, 0]), np.array(cum[2])), atol=1e-14)


def test_quaternion_helpers_round_trip():
    rng = np.random.default_rng(0)
    phi = rng.standard_normal((50, 3))
    phi *= (np.pi - 1e-3) * rng.random((50, 1)) / np.linalg.norm(phi, axis=1, keepdims=True)
    np.testing.assert_allclose(quat_log(quat_exp(phi)), phi, atol=1e-12)
    # exp of a rotation vector equals Rodrigues about its axis
    ang = np.linalg.norm(phi, axis=1)
    np.testing.assert_allclose(quat_to_rot(quat_exp(phi)), axis_angle(phi / ang[:, None], ang), atol=1e-12)
    np.testing.assert_allclose(quat_log(quat_exp(1e-12 * phi)), 1e-12 * phi, rtol=1e-8)


def test_integrate_difference_round_trip(body):
    rng = np.random.default_rng(1)
    q0 = random_q(body, 4, rng)
    dq = 0.8 * rng.standard_normal((4, body.nv))
    q1 = integrate(body, q0, dq)
    np.testing.assert_allclose(difference(body, q0, q1), dq, atol=1e-10)
    np.testing.assert_allclose(difference(body, q0, q0), 0, atol=1e-14)


def test_motion_axes_are_first_derivatives_of_link_poses(body):
    rng = np.random.default_rng(2)
    q = random_q(body, 3, rng)
    kin = forward_kinematics(body, q)
    eps = 1e-6
    for j in range(body.nv):
        e = np.zeros((3, body.nv))
        e[:, j] = eps
        kp, km = forward_kinematics(body, integrate(body, q, e)), forward_kinematics(body, integrate(body, q, -e))
        dR, dt = (kp.R - km.R) / (2 * eps), (kp.t - km.t) / (2 * eps)
        moved = body.subtree[body.dof_link[j]].astype(bool)
        w, v = kin.w[:, j], kin.v[:, j]
        expect_R = skew(w)[:, None] @ kin.R
        expect_t = np.cross(w[:, None], kin.t) + v[:, None]
        np.testing.assert_allclose(dR[:, moved], expect_R[:, moved], atol=1e-8)
        np.testing.assert_allclose(dt[:, moved], expect_t[:, moved], atol=1e-8)
        np.testing.assert_allclose(dR[:, ~moved], 0, atol=1e-8)
        np.testing.assert_allclose(dt[:, ~moved], 0, atol=1e-8)


def test_second_derivative_identities(body):
    """∂²t_i/∂δ_j∂δ_k = ω_j × (ω_k × t_i + v_k) and ∂²R_i = [ω_j][ω_k]R_i for j on a strict ancestor of k's link."""
    rng = np.random.default_rng(3)
    q = random_q(body, 2, rng)
    kin = forward_kinematics(body, q)
    eps = 1e-5
    dl, strict = body.dof_link, body.subtree - np.eye(body.L)
    pairs = [(j, k) for j in range(body.nv) for k in range(body.nv) if strict[dl[j], dl[k]]]
    assert pairs or body.L == 1
    for j, k in pairs[:12]:
        e = np.zeros((2, body.nv))
        e[:, j] = eps
        kp, km = forward_kinematics(body, integrate(body, q, e)), forward_kinematics(body, integrate(body, q, -e))
        i = dl[k]
        d_dt = (np.cross(kp.w[:, k], kp.t[:, i]) + kp.v[:, k] - np.cross(km.w[:, k], km.t[:, i]) - km.v[:, k]) / (
            2 * eps)
        expect = np.cross(kin.w[:, j], np.cross(kin.w[:, k], kin.t[:, i]) + kin.v[:, k])
        np.testing.assert_allclose(d_dt, expect, atol=1e-7)
        d_dR = (skew(kp.w[:, k]) @ kp.R[:, i] - skew(km.w[:, k]) @ km.R[:, i]) / (2 * eps)
        np.testing.assert_allclose(d_dR, skew(kin.w[:, j]) @ skew(kin.w[:, k]) @ kin.R[:, i], atol=1e-7)


def test_point_jacobian_matches_finite_differences(body):
    rng = np.random.default_rng(4)
    q = random_q(body, 2, rng)
    links = np.arange(body.L)
    p0 = rng.standard_normal((body.L, 3)) * 0.1
    P, J = point_jacobian(body, forward_kinematics(body, q), links, p0)
    eps = 1e-6
    for j in range(body.nv):
        e = np.zeros((2, body.nv))
        e[:, j] = eps
        Pp, _ = point_jacobian(body, forward_kinematics(body, integrate(body, q, e)), links, p0)
        Pm, _ = point_jacobian(body, forward_kinematics(body, integrate(body, q, -e)), links, p0)
        assert rel_err(J[..., j], (Pp - Pm) / (2 * eps)) < 1e-6 or np.abs(J[..., j]).max() < 1e-12


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kinematics_keeps_dtype(dtype):
    b = chain(3, floating=True)
    q = np.tile(b.q0(), (2, 1)).astype(dtype)
    kin = forward_kinematics(b, q)
    assert kin.R.dtype == dtype and kin.w.dtype == dtype
