"""One rule each, seen from the outside: the exit code the footer states, errors counted and
reported, walk coverage of leakscope's own engines, and the CLI's usage edges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import leakscope
from leakscope.options import CheckOptions
from leakscope.probe.walk import Root, WalkStats, walk
from leakscope.render import render
from tests.conftest import ROOT, fixture_target

pytestmark = pytest.mark.integration


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "leakscope", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_text_footer_and_process_agree_under_every_fail_on() -> None:
    target = fixture_target("cycle_until_gc")  # clean with an until-gc warning
    for fail_on, code in (("leak", 0), ("warning", 1)):
        done = _cli("check", target, "--fail-on", fail_on, "--no-isolate", "--micro-batches", "1")
        assert done.returncode == code, done.stderr
        assert done.stdout.rstrip().endswith(f"(exit {code})"), done.stdout[-300:]


def test_walk_errors_are_counted_and_reported_never_swallowed() -> None:
    from fixtures.uninspectable_attribute import Odd

    kept = torch.ones(2, requires_grad=True) * 2
    engine = types.SimpleNamespace(odd=Odd(), kept=[kept])
    stats = WalkStats()
    paths = [str(h.path) for h in walk([Root("engine", engine, "engine")], stats=stats)]
    assert paths == ["engine.kept[0]"]  # the rest of the walk goes on
    assert stats.errors == 1 and stats.first_error is not None
    assert stats.first_error.startswith("TypeError") and stats.first_error.endswith("at engine.odd")
    report = leakscope.check(
        fixture_target("uninspectable_attribute"), CheckOptions(micro_batches=1)
    )
    for result in report.results:
        assert result.verdict.value == "clean"
        assert any(
            w.startswith("1 object could not be inspected; first: TypeError")
            and w.endswith("at engine.odd")
            for w in result.warnings
        ), result.warnings


def test_the_built_in_engines_are_walked_like_user_code() -> None:
    from leakscope.models.engines import LeakyFSDPEngine

    engine = object.__new__(LeakyFSDPEngine)
    kept = torch.ones(2, requires_grad=True) * 2
    engine.__dict__["last_entropy"] = kept
    assert [str(h.path) for h in walk([Root("engine", engine, "engine")])] == [
        "engine.last_entropy"
    ]


def test_storage_growth_reads_as_storage_growth_in_github_and_sarif() -> None:
    report = leakscope.check(
        fixture_target("pending_generator"), CheckOptions(modes=(leakscope.Mode.FORWARD_ONLY,))
    )
    growth = [f for r in report.results for f in r.findings if f.holder.value == "storage growth"]
    assert growth, report
    github = render(report, "github")
    sarif = json.loads(render(report, "sarif"))
    messages = [r["message"]["text"] for run in sarif["runs"] for r in run["results"]]
    for text in (github, *messages):
        assert "storage growth" in text and "per micro-batch" in text
        assert "keeps this step's autograd graph alive" not in text


def test_debug_prints_each_traceback_once() -> None:
    done = _cli("check", "fixtures/bad/step_raises.py:Engine", "--debug", "--no-isolate")
    assert done.returncode == 3
    errors = done.stdout.count("error: ")
    assert errors >= 1
    assert (done.stdout + done.stderr).count("Traceback (most recent call last)") == errors


def test_bad_choice_is_a_one_line_usage_error_listing_the_choices() -> None:
    done = _cli("check", "--mode", "bogus")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("leakscope: error: ") and all(
        c in lines[0] for c in ("'train'", "'forward-only'", "'both'")
    )
    assert done.stdout == ""


def test_usage_line_and_dir() -> None:
    usage = _cli("check", "--help").stdout.splitlines()[0]
    assert usage.endswith("leakscope check [OPTIONS] [TARGET]..."), usage
    assert "check" in dir(leakscope) and "Report" in dir(leakscope)


def test_explain_without_a_target_reads_the_project_targets(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.leakscope]\ntargets = ["fixtures.verl_bug:Engine"]\n'
    )
    done = _cli("explain", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "fixtures.verl_bug:Engine" in done.stdout


def test_spare_lockstep_steps_build_micro_batches_through_the_adapter() -> None:
    from leakscope.adapters.registry import resolve_spec
    from leakscope.harness.distributed import Lockstep
    from leakscope.models.tiny import build_micro_batch
    from leakscope.results import Mode

    made: list[int] = []

    def micro_batch(size, index):  # type: ignore[no-untyped-def]
        made.append(index)
        return build_micro_batch(size, index, "cpu")

    import dataclasses

    spec = dataclasses.replace(
        resolve_spec(fixture_target("verl_fix")), make_micro_batch=micro_batch
    )
    Lockstep(spec)._spare_step(Mode.TRAIN, CheckOptions(device="cpu"))
    assert made == [0]


def test_an_unknown_holders_bytes_include_the_graph_branch_only_it_keeps() -> None:
    """fixtures/unknown_holder keeps the entropy (a branch off the logits the loss never uses)
    from a C++ hook: its saved activations count, not only the shared leaf and its gradient."""
    report = leakscope.check(
        fixture_target("unknown_holder"), CheckOptions(modes=(leakscope.Mode.TRAIN,))
    )
    (finding,) = report.results[0].findings
    assert str(finding.path) == "<unknown holder>" and "C++" in finding.hint
    assert finding.bytes_by_cause.get("activations", 0) > 0, finding.bytes_by_cause
    assert finding.bytes_by_cause.get("leaf+grad", 0) > 0, finding.bytes_by_cause
