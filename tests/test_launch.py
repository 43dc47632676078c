"""The kernel's launch choice (serial or parallel per batch, by measurement) and its benchmark."""
import numpy as np
import pytest

pytest.importorskip("numba")

from pbad_gym.kernels.numba import threads  # noqa: E402
from pbad_gym.kernels.numba.threads import LaunchChooser  # noqa: E402


def _run(chooser, serial_s, parallel_s, calls, jitter=None):
    rng = np.random.default_rng(0)
    picks = []
    for _ in range(calls):
        p = chooser.choose("k")
        t = parallel_s if p else serial_s
        chooser.record("k", p, t * (1.0 if jitter is None else rng.uniform(1 - jitter, 1 + jitter)))
        picks.append(p)
    return np.array(picks)


@pytest.mark.parametrize("serial_s, parallel_s, want_parallel", [(1.0, 0.3, True), (0.2, 1.0, False)])
def test_chooser_settles_on_the_faster_launch(serial_s, parallel_s, want_parallel):
    picks = _run(LaunchChooser(), serial_s, parallel_s, 1000, jitter=0.5)
    settled = picks[20:]
    share = settled.mean() if want_parallel else 1 - settled.mean()
    assert share > 0.99  # only the rare probes of the slower kind


def test_chooser_follows_a_host_whose_load_changes():
    c = LaunchChooser()
    assert _run(c, 1.0, 0.3, 200)[-50:].mean() > 0.9  # idle: parallel wins
    later = _run(c, 1.0, 3.0, 600)  # a busy neighbour: parallel now stalls
    assert later[-100:].mean() < 0.05


def test_chooser_does_not_flip_flop_on_equal_noisy_timings():
    picks = _run(LaunchChooser(), 1.0, 1.0, 2000, jitter=0.3)[20:]
    assert np.count_nonzero(np.diff(picks.astype(int))) < 150


def test_launch_policy_is_validated_and_restored():
    with pytest.raises(ValueError, match="launch policy"):
        threads.set_launch_policy("sometimes")
    assert threads.launch_policy() == "auto"


def test_serial_and_parallel_launches_give_the_same_numbers():
    import gymnasium

    import pbad_gym  # noqa: F401

    out = []
    try:
        for policy in ("serial", "parallel", "auto"):
            threads.set_launch_policy(policy)
            env = gymnasium.make_vec("pbad_gym/Spider-v3", num_envs=8, vectorization_mode="vector_entry_point")
            env.reset(seed=2)
            rng = np.random.default_rng(0)
            for _ in range(3):
                obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape))
            out.append(obs)
    finally:
        threads.set_launch_policy("auto")
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[0], out[2])


def test_threads_benchmark_writes_its_table(tmp_path):
    from pbad_gym.cli import bench_main

    assert bench_main(["threads", "--batches", "4", "--seconds", "0.05", "--no-policy", "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "threads" / "threads.csv").read_text().splitlines()
    assert len(lines) == 3 and lines[1].startswith("idle,4,") and lines[2].startswith("loaded (2 busy),4,")
    assert lines[0].endswith("default_over_one_thread,always_parallel_over_one_thread")


def _python(code, **env):
    import os
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def test_import_sets_passive_openmp_waits_unless_the_user_chose():
    out = _python("import pbad_gym, os; print(os.environ['OMP_WAIT_POLICY'])")
    assert out.stdout.strip() == "PASSIVE" and "spin" not in out.stderr
    out = _python("import pbad_gym, os; print(os.environ['OMP_WAIT_POLICY'])", OMP_WAIT_POLICY="ACTIVE")
    assert out.stdout.strip() == "ACTIVE"


def test_torch_imported_first_is_told_once():
    pytest.importorskip("torch")
    out = _python("import torch; import pbad_gym")
    assert out.stderr.count("imported before pbad_gym") == 1
    assert "imported before" not in _python("import pbad_gym; import torch").stderr


def test_a_parallel_launch_leaves_torch_its_thread_count():
    torch = pytest.importorskip("torch")
    import gymnasium

    import pbad_gym  # noqa: F401

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        threads.set_launch_policy("parallel")
        env = gymnasium.make_vec("pbad_gym/Swimmer-v1", num_envs=16, vectorization_mode="vector_entry_point")
        env.reset(seed=0)
        env.step(env.action_space.sample())
        assert torch.get_num_threads() == 1
    finally:
        threads.set_launch_policy("auto")
        torch.set_num_threads(before)
