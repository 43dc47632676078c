import numpy as np
import pytest

from pbad_gym.model import Body, Box, Capsule, Joint, Link, Sphere, chain


def test_chain_layout():
    b = chain(5, link_length=0.2, radius=0.02)
    assert (b.nq, b.nv, len(b.links)) == (5, 5, 5)
    assert b.links[0].parent == -1 and b.links[3].parent == 2
    assert all(lk.joint.type == "hinge" for lk in b.links)
    np.testing.assert_allclose(b.links[2].joint.axis, [0, 1, 0])
    np.testing.assert_allclose(b.links[2].placement[1], [0.2, 0, 0])
    np.testing.assert_allclose(b.links[0].com, [0.1, 0, 0], atol=1e-12)
    np.testing.assert_array_equal(b.q0(), np.zeros(5))


def test_floating_chain_has_free_base():
    b = chain(4, floating=True)
    assert b.links[0].joint.type == "free" and (b.nq, b.nv) == (7 + 3, 6 + 3)
    np.testing.assert_array_equal(b.q0()[:7], [0, 0, 0, 1, 0, 0, 0])


def test_capsule_mass_moments_match_quadrature():
    cap = Capsule(radius=0.03, length=0.2, density=900.0)
    m, diag = cap.principal()
    # Monte-Carlo-free check: fine voxel quadrature of the capsule (z along the axis)
    n = 160
    xs = np.linspace(-0.03, 0.03, n)
    zs = np.linspace(-0.13, 0.13, 4 * n)
    dx, dz = xs[1] - xs[0], zs[1] - zs[0]
    X, Y, Z = np.meshgrid(xs, xs, zs, indexing="ij")
    zc = np.clip(Z, -0.1, 0.1)
    inside = X**2 + Y**2 + (Z - zc) ** 2 <= 0.03**2
    dm = 900.0 * dx * dx * dz * inside
    assert m == pytest.approx(dm.sum(), rel=5e-3)
    assert diag[2] == pytest.approx(np.sum(dm * (X**2 + Y**2)), rel=1e-2)
    assert diag[0] == pytest.approx(np.sum(dm * (Y**2 + Z**2)), rel=1e-2)


def test_capsule_of_zero_length_is_a_sphere_and_box_formula():
    cap = Capsule(radius=0.1, length=0.0)
    sph = Sphere(radius=0.1)
    np.testing.assert_allclose(cap.principal()[1], sph.principal()[1])
    assert cap.principal()[0] == pytest.approx(sph.principal()[0])
    m, d = Box(half_size=(0.1, 0.2, 0.3), density=10.0).principal()
    assert m == pytest.approx(10.0 * 0.2 * 0.4 * 0.6)
    assert d[0] == pytest.approx(m * (0.4**2 + 0.6**2) / 12)


def test_link_inertia_is_about_the_com_with_offset_shapes():
    lk = Link("a", shapes=[Sphere(radius=0.1, pos=(0.3, 0, 0)), Sphere(radius=0.1, pos=(-0.3, 0, 0))])
    m1, d1 = Sphere(radius=0.1).principal()
    np.testing.assert_allclose(lk.com, 0, atol=1e-15)
    assert lk.mass == pytest.approx(2 * m1)
    np.testing.assert_allclose(np.diag(lk.inertia), [2 * d1[0], 2 * d1[0] + 2 * m1 * 0.09, 2 * d1[0] + 2 * m1 * 0.09])


@pytest.mark.parametrize("make, match", [
    (lambda: Joint("screw"), "unknown joint type"),
    (lambda: Joint("hinge", axis=(0, 0, 0)), "axis"),
    (lambda: Joint("hinge", axis=(np.nan, 0, 1)), "axis"),
    (lambda: Joint("universal", axis=(0, 0, 1), axis2=(0, 0, 2)), "parallel"),
    (lambda: Joint("hinge", range=(1.0, -1.0)), "range"),
    (lambda: Link("a", mass=-1.0, inertia=np.eye(3)), "mass must be positive"),
    (lambda: Link("a", mass=1.0, inertia=-np.eye(3)), "inertia"),
    (lambda: Link("a"), "give shapes"),
    (lambda: Sphere(radius=0.1, density=0.0), "density"),
    (lambda: chain(0), "n_links"),
])
def test_invalid_models_raise_clear_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_cycles_and_bad_parents_are_rejected():
    sh = [Sphere(radius=0.1)]
    with pytest.raises(ValueError, match="cycle"):
        Body([Link("a", 1, shapes=sh), Link("b", 0, shapes=sh)])
    with pytest.raises(ValueError, match="parent index"):
        Body([Link("a", 5, shapes=sh)])
    with pytest.raises(ValueError, match="unique"):
        Body([Link("a", -1, shapes=sh), Link("a", 0, shapes=sh)])


def test_links_listed_before_their_parents_still_work():
    sh = [Sphere(radius=0.1, pos=(0.1, 0, 0))]
    b = Body([Link("child", 1, placement=(np.eye(3), [0.2, 0, 0]), shapes=sh), Link("root", -1, shapes=sh)])
    from pbad_gym.kinematics import forward_kinematics

    kin = forward_kinematics(b, np.array([[0.0, np.pi / 2]]))
    # root turns 90° about z (hinge default axis): the child's origin goes to (0, 0.2, 0)
    np.testing.assert_allclose(kin.t[0, 0], [0, 0.2, 0], atol=1e-12)
