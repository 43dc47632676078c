"""The physics step converges on the walker it steps (scripts/step_convergence.py): the same resets and actions at
shrinking Δt approach the finest run at first order, the landing of the reset's drop included."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "step_convergence.py"


def _script():
    spec = importlib.util.spec_from_file_location("step_convergence", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_spider_v5_trajectories_converge_at_first_order(capsys):
    pytest.importorskip("numba")
    rows = _script().main(["--rows", "8", "--seconds", "0.4", "--dt", "0.002", "0.001", "0.0005",
                           "--reference", "0.000125"])
    errors = np.array([med for _, med, _ in rows])
    assert np.all(errors[:-1] > 1.6 * errors[1:])  # halving Δt at least nearly halves the error
    assert errors[1] < 0.02  # [m] at the released 0.001 s step over 0.4 s
    assert "order" in capsys.readouterr().out


def test_the_script_refuses_a_step_finer_than_its_reference():
    with pytest.raises(SystemExit):
        _script().main(["--dt", "0.0001", "--reference", "0.001"])
