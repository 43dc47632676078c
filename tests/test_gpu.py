"""The CuPy path: the same engine code on device arrays. Skips cleanly where CuPy or a CUDA device is missing."""
import numpy as np
import pytest

from pbad_gym.arrays import gpu_available, to_numpy
from pbad_gym.model import chain
from pbad_gym.simulator import Simulator

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA device")]


@pytest.mark.parametrize("kw", [dict(), dict(order=3), dict(drag=(0.1, 5.0), gravity=(0, 0, 0), floating=True),
                                dict(contact=dict(stiffness=1e3), floating=True)])
def test_cupy_matches_numpy(kw):
    kw = dict(kw)
    body = chain(4, floating=kw.pop("floating", False))
    sims = [Simulator(body, dt=0.01, num_envs=8, device=d, **kw) for d in ("cpu", "cuda")]
    rng = np.random.default_rng(0)
    for _ in range(10):
        tau = 1e-3 * rng.standard_normal((8, body.nv))
        for s in sims:
            s.step(s.xp.asarray(tau))
    np.testing.assert_allclose(to_numpy(sims[1].q), sims[0].q, atol=1e-9)
