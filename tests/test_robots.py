import numpy as np
import pytest

from pbad_gym.kinematics import forward_kinematics
from pbad_gym.model import spider, swimmer


def test_swimmer_layout():
    b = swimmer()
    assert (b.L, b.nq, b.nv) == (4, 10, 9)
    assert [lk.joint.type for lk in b.links] == ["free", "hinge", "hinge", "hinge"]
    assert list(b.meta["actuated"]) == [6, 7, 8]
    # four capsules of 1 m, radius 0.1, density 1000: pi r^2 L rho + 4/3 pi r^3 rho each
    m = np.pi * 0.01 * 1000 + 4 / 3 * np.pi * 0.001 * 1000
    np.testing.assert_allclose(b.mass, m)
    kin = forward_kinematics(b, b.q0()[None])
    np.testing.assert_allclose(kin.t[0, :, 0], [0.0, -1.0, -2.0, -3.0], atol=1e-12)  # head first, trailing along -x
    # hinge axes vertical: the swimmer undulates in the horizontal plane
    np.testing.assert_allclose(kin.w[0, 6:], [[0, 0, 1]] * 3, atol=1e-12)


def test_spider_layout():
    b = spider()
    assert (b.L, b.nq, b.nv) == (9, 19, 18)
    assert [lk.joint.type for lk in b.links] == ["free"] + ["universal", "hinge"] * 4
    assert list(b.meta["actuated"]) == list(range(6, 18))
    assert len(b.contact_points()[0]) == 13
    assert 170 < b.total_mass < 200  # Ant-v5-like proportions at density 1000
    kin = forward_kinematics(b, b.q0()[None])
    feet = np.array([kin.t[0, link] + kin.R[0, link] @ p for link, p, _ in b.meta["feet"]])
    # feet symmetric on the diagonals, below the torso by the stand height minus their radius
    np.testing.assert_allclose(np.abs(feet[:, 0]), np.abs(feet[0, 0]), atol=1e-12)
    np.testing.assert_allclose(feet[:, 2], -(b.meta["stand_height"] - 0.08), atol=1e-12)
    # hips carry ranges: the unactuated spider stands on its limits
    assert all(lk.joint.range is not None for lk in b.links[1:])


@pytest.mark.parametrize("kwargs", [{"n_links": 1}, {"link_length": 0.0}, {"radius": -1.0}])
def test_swimmer_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        swimmer(**kwargs)


def test_spider_rejects_bad_arguments():
    with pytest.raises(ValueError, match="shin_length"):
        spider(shin_length=0.0)
