"""pbad-bench search: its CMA-ES maximises, its decoders, and a --quick run end to end."""
import csv

import numpy as np

from pbad_gym.bench.search import cma_search, linear_policy, oscillator
from pbad_gym.cli import bench_main


def test_cma_search_maximises_and_gives_non_finite_scores_the_worst_fitness():
    target = np.array([0.3, -0.2, 0.5])

    def score(X, it):
        s = -np.sum((X - target) ** 2, axis=1)
        s[0] = np.nan  # a diverged candidate must not be ranked as the median
        return s

    best_x, best, hist = cma_search(score, np.zeros(3), 0.3, 10, 40, seed=1)
    assert np.allclose(best_x, target, atol=0.02) and best > -1e-3
    assert hist[-1][0] > hist[0][0]


def test_decoders():
    amp, f, phase = oscillator(np.array([1.5, -0.1, 0.5, 0.25, 0.5]), 2, 0.5, 2.5)
    np.testing.assert_allclose(amp, [1.0, 0.0])
    assert f == 1.5
    np.testing.assert_allclose(phase, [np.pi / 2, np.pi])
    W, b = linear_policy(np.arange(8.0), 3, 2)
    assert W.shape == (2, 3) and np.array_equal(b, [6.0, 7.0])


def test_quick_search_runs_without_writing_files_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert bench_main(["search", "--quick", "--no-mujoco", "--envs", "Spider-v3", "Swimmer-v1", "--out",
                       str(tmp_path / "res")]) == 0
    with open(tmp_path / "res" / "search" / "search.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["env"] for r in rows] == ["Spider-v3", "Swimmer-v1"]
    assert all(np.isfinite(float(r["reevaluated_mean"])) for r in rows)
    assert float(rows[0]["reevaluated_sem"]) >= 0 and float(rows[0]["sem_at_dt_over_10"]) >= 0
    assert rows[1]["reevaluated_sem"] == ""  # (walkers only)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]


def _spy_make_vec(monkeypatch):
    """A list that records (rows, keywords) of every vector env the search makes from now on."""
    from pbad_gym.bench import search

    made = []
    real = search._make_vec

    def spy(env_id, n, **kw):
        made.append((n, kw))
        return real(env_id, n, **kw)

    monkeypatch.setattr(search, "_make_vec", spy)
    return made


def test_reevaluation_rows_are_their_own(tmp_path, monkeypatch):
    """--reeval-rows re-evaluates the best gait on that many fresh resets, at Δt and Δt/10."""
    made = _spy_make_vec(monkeypatch)
    assert bench_main(["search", "--quick", "--no-mujoco", "--tasks", "walk", "--envs", "Spider-v5",
                       "--reeval-rows", "3", "--out", str(tmp_path)]) == 0
    assert [n for n, _ in made] == [4, 3, 3]  # the population's env, then the re-evaluations at Δt and Δt/10
    import pytest

    with pytest.raises(SystemExit, match="--reeval-rows"):
        bench_main(["search", "--quick", "--reeval-rows", "1", "--out", str(tmp_path)])


def test_gait_speed_refuses_an_env_whose_time_limit_cuts_the_episode():
    """At Δt/10 an episode of the same seconds takes 10x the steps: a time limit would freeze the displacement
    early and divide it by the whole episode time (this understated every Δt/10 speed once)."""
    import gymnasium
    import pytest

    import pbad_gym  # noqa: F401
    from pbad_gym.bench.search import gait_speed

    x = np.array([[0.5] * 8 + [0.3] + [0.0] * 8])
    env = gymnasium.make_vec("pbad_gym/Spider-v2", num_envs=1, max_episode_steps=10)  # 1 s = 20 steps of 0.05 s
    with pytest.raises(ValueError, match="max_episode_steps"):
        gait_speed(env, x, 1.0, 0, 0.25, 3.0)
    env = gymnasium.make_vec("pbad_gym/Spider-v2", num_envs=1, max_episode_steps=None)
    assert np.isfinite(gait_speed(env, x, 1.0, 0, 0.25, 3.0)).all()


def test_set_passes_keywords_to_the_walkers_and_to_their_finer_physics(monkeypatch):
    from argparse import Namespace

    from pbad_gym.bench import search

    record = _spy_make_vec(monkeypatch)
    args = Namespace(set=["integrator=bdf2", "penalty_springs=implicit", "dt=0.005", "frame_skip=10"], seed=0,
                     fmin=0.25, fmax=3.0, sigma=0.3, ant_timestep=None)
    search.walk_search("pbad_gym/Spider-v4", args, 1, 2, 0.1)
    made = [kw for _, kw in record]
    assert made[0] == dict(integrator="bdf2", penalty_springs="implicit", dt=0.005, frame_skip=10)
    assert made[-1]["integrator"] == "bdf2" and made[-1]["dt"] == 0.0005 and made[-1]["frame_skip"] == 100
    import pytest

    with pytest.raises(SystemExit, match="--set"):
        search.env_settings(Namespace(set=["integrator"]))


def test_planar_gait_speed_carries_the_forward_speed_and_the_sideways_one():
    import gymnasium

    from pbad_gym.bench.search import gait_speed

    env = gymnasium.make_vec("pbad_gym/Spider-v4", num_envs=2, vectorization_mode="vector_entry_point",
                             max_episode_steps=None, dt=0.005, frame_skip=10, integrator="bdf2",
                             penalty_springs="implicit")
    X = np.random.default_rng(0).uniform(0, 1, (2, 17))
    forward, fell = gait_speed(env, X, 0.5, 7, 0.25, 3.0, falls=True)
    v, fell_too = gait_speed(env, X, 0.5, 7, 0.25, 3.0, falls=True, planar=True)
    assert v.shape == (2, 2) and np.all(v[:, 1] != 0)
    np.testing.assert_array_equal(v[:, 0], forward)
    np.testing.assert_array_equal(fell_too, fell)
