"""The CLI over the library: exit codes, text and JSON on real engines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from leakscope import __version__
from leakscope.cli import app

pytestmark = pytest.mark.integration

runner = CliRunner()


def test_reference_engine_is_clean_and_exits_0() -> None:
    result = runner.invoke(app, ["check", "leakscope.models.engines:FSDPEngine"])
    assert result.exit_code == 0, result.output
    assert "leakscope.models.engines:FSDPEngine [train] CLEAN" in result.stdout
    assert "leakscope.models.engines:FSDPEngine [forward-only] CLEAN" in result.stdout


def test_no_target_checks_the_reference_engine() -> None:
    result = runner.invoke(app, ["check", "--mode", "train"])
    assert result.exit_code == 0
    assert "leakscope.models.engines:FSDPEngine [train] CLEAN" in result.stdout


def test_leaky_reference_engine_json_names_both_paths() -> None:
    result = runner.invoke(
        app, ["check", "leakscope.models.engines:LeakyFSDPEngine", "--format", "json"]
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    train, forward_only = doc["results"]
    assert (train["mode"], train["verdict"]) == ("train", "leak")
    assert [f["path"] for f in train["findings"]] == [
        "output.model_output.log_probs",
        "output.model_output.entropy",
    ]
    assert all(f["retained_bytes"] > 0 and f["confirmed"] for f in train["findings"])
    assert forward_only["verdict"] == "clean"


def test_text_report_has_table_and_fix() -> None:
    result = runner.invoke(
        app, ["check", "leakscope.models.engines:LeakyFSDPEngine", "--mode", "train"]
    )
    assert result.exit_code == 1
    assert "LEAK" in result.stdout
    assert "output.model_output.entropy" in result.stdout
    assert 'fix: detach output["model_output"]["log_probs"] before it is returned' in result.stdout


def test_missing_module_is_exit_3_one_line_and_valid_json() -> None:
    result = runner.invoke(
        app, ["check", "no_such_pkg.engines:Engine", "--format", "json", "--mode", "train"]
    )
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    (res,) = doc["results"]
    assert res["verdict"] == "error"
    assert res["error"].startswith("module 'no_such_pkg.engines' not found")
    assert "Traceback" not in result.stdout


def test_missing_attribute_suggests_close_match() -> None:
    result = runner.invoke(app, ["check", "leakscope.models.engines:FSDPEngin", "--mode", "train"])
    assert result.exit_code == 3
    assert "has no attribute 'FSDPEngin'; did you mean 'FSDPEngine'" in result.stdout
    assert "Traceback" not in result.output


def test_malformed_target_is_usage_error_with_json() -> None:
    result = runner.invoke(app, ["check", "leakscope.models.engines", "--format", "json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["results"] == [] and "pkg.module:Name" in doc["error"]


def test_output_file_receives_report(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "report.json"
    result = runner.invoke(
        app, ["check", "fixtures/verl_fix.py:Engine", "--format", "json", "-o", str(out)]
    )
    assert result.exit_code == 0
    assert result.stdout == ""
    assert json.loads(out.read_text())["results"][0]["verdict"] == "clean"


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"leakscope {__version__}"


def test_cli_import_is_torch_free() -> None:
    code = "import sys, leakscope, leakscope.cli; print('torch' in sys.modules, 'tensordict' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "leakscope", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.strip() == f"leakscope {__version__}"


def test_fail_on_warning_the_verdict_line_footer_and_exit_code_agree() -> None:
    """A cycle freed only by the GC is a warning: it fails --fail-on warning, and every line says so."""
    strict = runner.invoke(
        app, ["check", "fixtures.cycle_until_gc:Engine", "--mode", "train", "--fail-on", "warning"]
    )
    assert strict.exit_code == 1, strict.output
    assert (
        "fixtures.cycle_until_gc:Engine [train] WARNING  1 warning (fails --fail-on warning)"
        in strict.stdout
    )
    assert strict.stdout.rstrip().endswith("0 leak, 1 warning, 0 clean, 0 error (exit 1)")
    lenient = runner.invoke(app, ["check", "fixtures.cycle_until_gc:Engine", "--mode", "train"])
    assert lenient.exit_code == 0
    assert "fixtures.cycle_until_gc:Engine [train] CLEAN" in lenient.stdout
    assert lenient.stdout.rstrip().endswith("0 leak, 1 clean, 0 error (exit 0)")


def test_debug_writes_the_traceback_to_stderr_never_into_the_report() -> None:
    args = ["check", "fixtures/bad/step_raises.py:Engine", "--no-isolate", "--mode", "train"]
    debug = runner.invoke(app, [*args, "--debug"])
    assert debug.exit_code == 3
    assert "Traceback (most recent call last)" in debug.stderr
    assert "Traceback" not in debug.stdout
    plain = runner.invoke(app, args)
    assert plain.stdout == debug.stdout  # the report is the same with or without --debug
    assert "Traceback" not in plain.stderr
