"""The generated kernel entry points (kernels/numba/entries.py, kernels/cuda/kernel.py) are what codegen writes today
from the BodyArrays / StepConstants fields: a field added to either without regenerating fails here."""
import inspect

from pbad_gym.kernels.numba import codegen
from pbad_gym.kernels.numba.constants import StepConstants
from pbad_gym.model.body_arrays import BodyArrays


def test_generated_files_are_current():
    assert codegen.stale() == [], "run: python -m pbad_gym.kernels.numba.codegen"


def test_entry_points_take_every_field_in_order():
    from pbad_gym.kernels.numba import entries

    fields = list(BodyArrays._fields) + list(StepConstants._fields)
    for name in ("step_batch", "step_batch_serial", "finish_batch"):
        params = list(inspect.signature(getattr(entries, name).py_func).parameters)
        assert params[:len(fields)] == fields, name
    params = list(inspect.signature(entries.kinematics_batch.py_func).parameters)
    assert params[:len(BodyArrays._fields)] == list(BodyArrays._fields)


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    target = tmp_path / "entries.py"
    target.write_text("# edited by hand\n")
    monkeypatch.setattr(codegen, "TARGETS", {target: "cpu"})
    assert codegen.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().out
    assert codegen.main([]) == 0
    assert codegen.main(["--check"]) == 0
