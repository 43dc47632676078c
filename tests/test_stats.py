import pickle

import numpy as np
import pytest

from pbad_gym.agents.stats import RunningStats


def test_merge_equals_stats_of_concatenation():
    rng = np.random.default_rng(0)
    a, b = rng.normal(3.0, 2.0, (50, 4)), rng.normal(-1.0, 0.5, (70, 4))
    sa, sb, sab = RunningStats(4), RunningStats(4), RunningStats(4)
    sa.update(a)
    sb.update(b)
    sab.update(np.concatenate([a, b]))
    merged = sa + sb
    np.testing.assert_allclose(merged.mean, sab.mean, rtol=1e-12)
    np.testing.assert_allclose(merged.var, sab.var, rtol=1e-10)
    np.testing.assert_allclose(merged.mean, np.concatenate([a, b]).mean(0), rtol=1e-12)
    np.testing.assert_allclose(merged.var, np.concatenate([a, b]).var(0), rtol=1e-10)
    assert sa.count == 50  # __add__ leaves its operands alone
    sa.merge(sb)
    np.testing.assert_array_equal(sa.sum, merged.sum)


def test_normalize_dtype_clip_and_empty_identity():
    s = RunningStats((2,))
    x = np.array([[1.0, -2.0]], dtype=np.float32)
    np.testing.assert_allclose(s.normalize(x), x, rtol=1e-6)  # no samples: mean 0, var 1
    s.update(np.array([[0.0, 0.0], [2.0, 0.0]]))
    y = s.normalize(np.array([[1.0, 1e6]], dtype=np.float32), clip=5.0)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [[0.0, 5.0]], atol=1e-6)


def test_state_dict_roundtrip_and_shape_error():
    s = RunningStats(3)
    s.update(np.arange(12.0).reshape(4, 3))
    t = RunningStats.from_state_dict(pickle.loads(pickle.dumps(s.state_dict())))
    np.testing.assert_array_equal(t.mean, s.mean)
    np.testing.assert_array_equal(t.std, s.std)
    c = s.copy()
    c.update(np.ones((1, 3)))
    assert s.count == 4 and c.count == 5
    with pytest.raises(ValueError, match="shape"):
        s.update(np.ones((2, 4)))


def test_scalar_shape():
    s = RunningStats(())
    s.update(np.array([1.0, 3.0]))
    assert s.mean.shape == () and s.mean == 2.0 and s.var == 1.0
