"""The CLI as a pre-merge gate: config file, flags over config, allowlist, --fail-on, --quiet, progress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from leakscope.cli import app

pytestmark = pytest.mark.integration


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, ["check", *args])


def _config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.leakscope]\n" + body, encoding="utf-8")
    return str(path)


def test_config_error_is_one_line_exit_2_and_json_stays_valid(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 'fail-on = "never"\n')
    result = _run("--config", cfg)
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"leakscope: error: {cfg} [tool.leakscope]: fail-on: 'never' is not one of: leak, warning\n"
    )
    assert result.stdout == ""
    doc = json.loads(_run("--config", cfg, "--format", "json").stdout)
    assert doc["error"].endswith("fail-on: 'never' is not one of: leak, warning")


def test_cwd_pyproject_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path, 'mode = "sideways"\n')
    monkeypatch.chdir(tmp_path)
    result = _run("x:y")
    assert result.exit_code == 2
    assert result.stderr == (
        "leakscope: error: pyproject.toml [tool.leakscope]: mode: 'sideways' is not one of: train, forward-only, both\n"
    )


def test_config_targets_and_mode_flags_override(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        'targets = ["fixtures.verl_bug:Engine"]\nmode = "forward-only"\nconfirm = false\nmicro-batches = 1\n',
    )
    clean = _run("--config", cfg, "--format", "json")
    assert clean.exit_code == 0, clean.output
    doc = json.loads(clean.stdout)
    assert [(r["target"], r["mode"], r["verdict"]) for r in doc["results"]] == [
        ("fixtures.verl_bug:Engine", "forward-only", "clean"),
    ]
    leak = _run("--config", cfg, "--mode", "train", "--format", "github")
    assert leak.exit_code == 1
    lines = leak.stdout.splitlines()
    assert [line.split("::")[1] for line in lines[:2]] == [
        "error file=fixtures/verl_bug.py,line=25,title=leakscope returned",
        "error file=fixtures/verl_bug.py,line=26,title=leakscope returned",
    ]
    assert lines[-1] == "leakscope: 1 leak, 0 clean, 0 error (exit 1)"


def test_allowlist_passes_the_gate_and_stays_in_the_report(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        'targets = ["fixtures.verl_bug:Engine"]\nmode = "train"\nconfirm = false\nmicro-batches = 1\n'
        '[[tool.leakscope.allowlist]]\npath = "output.model_output.*"\nreason = "a test keeps them on purpose"\n',
    )
    result = _run("--config", cfg, "--format", "json")
    assert result.exit_code == 0, result.output
    [res] = json.loads(result.stdout)["results"]
    assert res["verdict"] == "clean"
    assert [(f["path"], f["severity"], f["allowed_reason"]) for f in res["findings"]] == [
        ("output.model_output.log_probs", "allowed", "a test keeps them on purpose"),
        ("output.model_output.entropy", "allowed", "a test keeps them on purpose"),
    ]


def test_fail_on_warning_quiet_and_output_file(tmp_path: Path) -> None:
    target = "fixtures.cycle_until_gc:Engine"
    fast = _config(tmp_path, "micro-batches = 1\n")
    default = _run(target, "--config", fast, "--mode", "train", "--quiet")
    assert (default.exit_code, default.stdout) == (0, "")
    report = tmp_path / "report.sarif"
    strict = _run(
        target,
        "--config",
        fast,
        "--mode",
        "train",
        "--fail-on",
        "warning",
        "-q",
        "-f",
        "sarif",
        "-o",
        str(report),
    )
    assert (strict.exit_code, strict.stdout) == (1, "")
    [finding] = json.loads(report.read_text(encoding="utf-8"))["runs"][0]["results"]
    assert (finding["ruleId"], finding["level"]) == ("reference-cycle", "warning")


def test_progress_only_when_asked_outside_a_terminal(tmp_path: Path) -> None:
    targets = (
        "fixtures.verl_fix:Engine",
        "fixtures.verl_bug:Engine",
        "--config",
        _config(tmp_path, "micro-batches = 1\n"),
    )
    quiet = _run(*targets, "--mode", "forward-only", "--format", "json")
    assert quiet.exit_code == 0
    assert quiet.stderr == ""
    forced = _run(*targets, "--mode", "forward-only", "--format", "json", "--progress")
    assert forced.exit_code == 0
    assert forced.stderr.splitlines() == [
        "leakscope: [1/2] fixtures.verl_fix:Engine [forward-only] clean",
        "leakscope: [2/2] fixtures.verl_bug:Engine [forward-only] clean",
    ]
    assert json.loads(forced.stdout)["results"][1]["verdict"] == "clean"
