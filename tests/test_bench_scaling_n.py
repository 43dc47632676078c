"""`pbad-bench scaling-n`: the bodies it times (n-legged spiders, their MJCF twins, chains in MJCF) and the run."""
import csv

import numpy as np
import pytest

from pbad_gym.model import chain, spider


def test_four_legged_spider_is_the_spider_and_more_legs_spread_evenly():
    a, b = spider(), spider(n_legs=4)
    np.testing.assert_array_equal(a.arrays(np, np.float64).contact_r, b.arrays(np, np.float64).contact_r)
    assert (a.nq, a.nv, a.name) == (b.nq, b.nv, b.name)
    eight = spider(n_legs=8, hip="hinge")
    assert spider(n_legs=8).nv == 6 + 3 * 8
    assert eight.nv == 6 + 2 * 8
    assert len(eight.contact_points()[0]) == 1 + 3 * 8
    m4, m8, m12 = (spider(n_legs=n, hip="hinge").total_mass for n in (4, 8, 12))
    assert m8 - m4 == pytest.approx(m12 - m8, rel=1e-12) and m8 > m4  # the torso plus identical legs
    hips = np.array([seg[2] for seg in eight.meta["segments"][:8]])
    angles = np.sort(np.mod(np.rad2deg(np.arctan2(hips[:, 1], hips[:, 0])), 360.0))
    np.testing.assert_allclose(angles, 45.0 + 45.0 * np.arange(8), atol=1e-9)


@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_spider_rejects_a_bad_leg_count(bad):
    with pytest.raises(ValueError, match="n_legs"):
        spider(n_legs=bad)


def test_chain_mjcf_has_pbad_chains_mass_matrix():
    """The MuJoCo twin of chain(n) is the same mechanism: MuJoCo's joint-space inertia equals PBAD's CRBA."""
    mujoco = pytest.importorskip("mujoco")
    from pbad_gym.bench.scaling_n import chain_xml
    from pbad_gym.dynamics import crba

    for n in (1, 5):
        model = mujoco.MjModel.from_xml_string(chain_xml(n, 0.001))
        data = mujoco.MjData(model)
        q = np.random.default_rng(n).uniform(-1.0, 1.0, n)
        data.qpos[:] = q
        mujoco.mj_forward(model, data)
        M = np.zeros((n, n))
        mujoco.mj_fullM(model, data, M)
        np.testing.assert_allclose(crba(chain(n), q[None])[0], M, rtol=1e-9, atol=1e-15)


def test_legged_mjcf_is_ant_v5_with_more_legs():
    mujoco = pytest.importorskip("mujoco")
    gymnasium = pytest.importorskip("gymnasium")
    pytest.importorskip("imageio")  # Gymnasium's MuJoCo envs import it
    from pbad_gym.bench.scaling_n import legged_xml

    ant = gymnasium.make("Ant-v5").unwrapped.model
    four = mujoco.MjModel.from_xml_string(legged_xml(4))
    assert (four.nv, four.nu) == (ant.nv, ant.nu)
    assert sum(four.body_mass) == pytest.approx(sum(ant.body_mass), rel=1e-12)
    twelve = mujoco.MjModel.from_xml_string(legged_xml(12))
    assert (twelve.nv, twelve.nu) == (6 + 2 * 12, 2 * 12)
    leg = (sum(ant.body_mass) - ant.body_mass[1]) / 4
    assert sum(twelve.body_mass) == pytest.approx(ant.body_mass[1] + 12 * leg, rel=1e-12)


def test_scaling_n_quick_run_writes_every_case(tmp_path):
    from pbad_gym.bench.common import mujoco_available
    from pbad_gym.cli import bench_main

    assert bench_main(["scaling-n", "--quick", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "scaling_n" / "scaling_n.csv")))
    engines = {r["engine"] for r in rows}
    assert {(r["family"], r["size"], r["dt"]) for r in rows if r["engine"] == "pbad"} == {
        ("chain", "5", "0.01"), ("chain", "5", "0.001"), ("chain", "10", "0.01"), ("chain", "10", "0.001"),
        ("legged", "4", "0.001"), ("legged", "4", "0.01"), ("legged", "6", "0.001"), ("legged", "6", "0.01")}
    assert len(engines) == (3 if mujoco_available() else 1)
    for r in rows:
        assert float(r["physics_steps_per_s"]) > 0
        assert float(r["sim_seconds_per_s"]) == pytest.approx(float(r["physics_steps_per_s"]) * float(r["dt"]))
        if r["engine"] == "pbad":
            assert float(r["tol"]) == 1e-7  # the environments' tolerance, for both families
            assert 1.0 <= float(r["lm_iterations_per_step"]) < 10.0
            assert float(r["converged"]) == 1.0
    assert (tmp_path / "scaling_n" / "scaling_n.png").stat().st_size > 10_000
    if mujoco_available():
        ratios = list(csv.DictReader(open(tmp_path / "scaling_n" / "ratios.csv")))
        assert [(r["family"], r["size"]) for r in ratios] == [("chain", "5"), ("chain", "10"), ("legged", "4"),
                                                              ("legged", "6")]
        assert all(float(v) > 0 for r in ratios for k, v in r.items() if k not in ("family", "size"))


def test_interleaved_takes_turns_and_reports_medians():
    """Every replay runs once per round, in order, until each has run three times and for min_wall seconds; the
    rate reported is each one's median, with the iterations and convergence of its last replay."""
    from pbad_gym.bench.scaling_n import interleaved

    calls = []

    def replay(name, rates):
        it = iter(rates)

        def once():
            calls.append(name)
            return next(it), len(calls), 1.0
        return once

    out = interleaved([replay("a", [5.0, 1.0, 3.0, 9.0]), replay("b", [2.0, 8.0, 4.0, 4.0])], min_wall=0.0)
    assert calls == ["a", "b"] * 3
    assert out == [(3.0, 5, 1.0), (4.0, 6, 1.0)]
