"""Explicit command-line flags beat [tool.leakscope], in every command (issue 13, problem 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakscope.cli import app

pytestmark = pytest.mark.integration

runner = CliRunner()
LEAKY = "leakscope.models.engines:LeakyFSDPEngine"


@pytest.fixture
def forward_only_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose pyproject says forward-only, one micro-batch, and another model."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.leakscope]\nmode = "forward-only"\nmicro-batches = 1\nmodel = "full-finetune"\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_check_mode_flag_beats_config(forward_only_project: Path) -> None:
    result = runner.invoke(
        app, ["check", LEAKY, "--mode", "train", "--model", "peft-checkpoint", "-f", "json"]
    )
    doc = json.loads(result.stdout)
    assert [r["mode"] for r in doc["results"]] == ["train"]
    assert result.exit_code == 1 and doc["results"][0]["verdict"] == "leak"
    # the config's micro-batches = 1 still applies where no flag was given: no growth run
    assert "growth" not in doc["results"][0]


def test_estimate_flags_beat_config_and_it_runs_its_own_micro_batches(
    forward_only_project: Path,
) -> None:
    result = runner.invoke(
        app,
        [
            "estimate",
            LEAKY,
            "--mode",
            "train",
            "--model",
            "peft-checkpoint",
            "-f",
            "json",
            "--at",
            "hidden=64,tokens=64,micro-batches=4",
        ],
    )
    doc = json.loads(result.stdout)
    (res,) = doc["results"]
    # before: forward-only only (the config's mode), CLEAN, exit 0 — a false clean
    assert res["mode"] == "train" and res["verdict"] == "leak" and result.exit_code == 1
    # estimate's own growth run, whatever micro-batches the config says
    assert len(res["growth"]["retained_bytes"]) == 3
    assert res["projection"]["micro_batches"] == 4


def test_explain_flags_beat_config(forward_only_project: Path) -> None:
    # config: forward-only (clean for this engine); --mode train must win and draw the leak
    result = runner.invoke(app, ["explain", LEAKY, "--mode", "train", "--model", "peft-checkpoint"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{LEAKY} [train] output.model_output.")
    # without the flag the config's mode applies
    fallback = runner.invoke(app, ["explain", LEAKY, "--model", "peft-checkpoint"])
    assert fallback.exit_code == 0 and "[forward-only]" in fallback.stdout
