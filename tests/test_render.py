"""Renderers are pure functions of a Report: compared as whole outputs."""

from __future__ import annotations

import json

import pytest

from leakscope.policy import FAIL_ON, exit_code
from leakscope.render import render
from leakscope.results import Cause, Finding, Holder, Mode, Report, Source, TargetResult, Verdict
from tests.conftest import holder_path

pytestmark = pytest.mark.unit

REPORT = Report(
    results=(
        TargetResult(target="pkg.mod:Engine", mode=Mode.TRAIN, verdict=Verdict.CLEAN),
        TargetResult(
            target="pkg.mod:Leaky",
            mode=Mode.TRAIN,
            verdict=Verdict.LEAK,
            findings=(
                Finding(
                    path=holder_path("output", "model_output", "log_probs"),
                    holder=Holder.RETURNED,
                    grad_fn="SqueezeBackward1",
                    graph_nodes=37,
                    retained_bytes=4096,
                    confirmed=True,
                    hint="detach it",
                    cause=Cause.LEAF_GRAD,
                    bytes_by_cause={"leaf+grad": 4096},
                    source=Source("engine.py", 12, "forward_step"),
                    kind="growing",
                    stored_at=Source("engine.py", 14, "forward_step"),
                    store_op="return",
                    called_from=(Source("engine.py", 30, "step"),),
                ),
            ),
            retained_bytes=4096,
            kind="growing",
        ),
        TargetResult(
            target="pkg.mod:Broken",
            mode=Mode.FORWARD_ONLY,
            verdict=Verdict.ERROR,
            error="boom",
            traceback="TB",
        ),
    ),
    leakscope_version="0.1.0",
    torch_version="2.13.0+cpu",
    python_version="3.11.7",
)


def test_json_document_is_exact() -> None:
    assert json.loads(render(REPORT, "json")) == {
        "schema_version": 1,
        "leakscope_version": "0.1.0",
        "torch_version": "2.13.0+cpu",
        "python_version": "3.11.7",
        "results": [
            {
                "target": "pkg.mod:Engine",
                "mode": "train",
                "verdict": "clean",
                "error": None,
                "findings": [],
                "retained_bytes": 0,
                "kind": None,
                "settings": [],
                "warnings": [],
            },
            {
                "target": "pkg.mod:Leaky",
                "mode": "train",
                "verdict": "leak",
                "error": None,
                "findings": [
                    {
                        "path": "output.model_output.log_probs",
                        "holder": "returned",
                        "grad_fn": "SqueezeBackward1",
                        "graph_nodes": 37,
                        "retained_bytes": 4096,
                        "confirmed": True,
                        "hint": "detach it",
                        "cause": "leaf+grad",
                        "bytes_by_cause": {"leaf+grad": 4096},
                        "source": {"file": "engine.py", "line": 12, "function": "forward_step"},
                        "severity": "leak",
                        "allowed_reason": None,
                        "kind": "growing",
                        "stored_at": {"file": "engine.py", "line": 14, "function": "forward_step"},
                        "store_op": "return",
                        "called_from": [{"file": "engine.py", "line": 30, "function": "step"}],
                        "node_cost": None,
                        "edit": None,
                    }
                ],
                "retained_bytes": 4096,
                "kind": "growing",
                "settings": [],
                "warnings": [],
            },
            {
                "target": "pkg.mod:Broken",
                "mode": "forward-only",
                "verdict": "error",
                "error": "boom",
                "findings": [],
                "retained_bytes": 0,
                "kind": None,
                "settings": [],
                "warnings": [],
            },
        ],
    }


def test_json_traceback_only_with_debug() -> None:
    assert "traceback" not in json.loads(render(REPORT, "json"))["results"][2]
    assert json.loads(render(REPORT, "json", debug=True))["results"][2]["traceback"] == "TB"


def test_text_report_is_exact() -> None:
    text = "\n".join(line.rstrip() for line in render(REPORT, "text", width=120).splitlines())
    assert text == "\n".join(
        [
            "leakscope 0.1.0 · torch 2.13.0+cpu · Python 3.11.7",
            "",
            "pkg.mod:Engine [train] CLEAN",
            "",
            "pkg.mod:Leaky [train] LEAK  4.0 KiB per micro-batch, growing",
            "",
            "  path                            holder     grad_fn            cause       kind        bytes   confirmed",
            " ─────────────────────────────────────────────────────────────────────────────────────────────────────────",
            "  output.model_output.log_probs   returned   SqueezeBackward1   leaf+grad   growing   4.0 KiB   yes",
            "",
            "  output.model_output.log_probs",
            "    created at engine.py:12 in forward_step",
            "      called from engine.py:30 in step",
            "    stored at engine.py:14 in forward_step (return)",
            "    fix: detach it",
            "",
            "pkg.mod:Broken [forward-only] ERROR",
            "  error: boom",
            "",
            "1 leak, 1 clean, 1 error (exit 3)",
        ]
    )


def test_report_exit_code_worst_wins() -> None:
    assert exit_code(REPORT) == 3
    assert exit_code(Report(REPORT.results[:2], "0", "t", "p")) == 1
    assert exit_code(Report(REPORT.results[:1], "0", "t", "p")) == 0


def test_text_footer_states_the_exit_code_the_process_uses_under_every_fail_on() -> None:
    """The footer and the process agree: with --fail-on warning a warning fails the gate."""
    warned = Report(
        (TargetResult("pkg:E", Mode.TRAIN, Verdict.CLEAN, warnings=("the holder walk stopped",)),),
        "0",
        "t",
        "p",
    )
    for fail_on in FAIL_ON:
        code = exit_code(warned, fail_on)
        assert render(warned, "text", fail_on=fail_on).rstrip().endswith(f"(exit {code})")
    assert exit_code(warned, "warning") == 1 and exit_code(warned, "leak") == 0


WARNED = Report(
    (
        TargetResult("pkg:E", Mode.TRAIN, Verdict.CLEAN, warnings=("the holder walk stopped",)),
        TargetResult("pkg:F", Mode.TRAIN, Verdict.CLEAN),
    ),
    "0",
    "t",
    "p",
)


def test_verdict_line_footer_and_exit_code_agree_under_every_fail_on() -> None:
    """Under --fail-on warning a warning fails the gate: its verdict line says WARNING, the footer counts it."""
    strict = "\n".join(
        line.rstrip() for line in render(WARNED, "text", fail_on="warning").splitlines()
    )
    assert strict == "\n".join(
        [
            "leakscope 0 · torch t · Python p",
            "",
            "pkg:E [train] WARNING  1 warning (fails --fail-on warning)",
            "  warning: the holder walk stopped",
            "",
            "pkg:F [train] CLEAN",
            "",
            "0 leak, 1 warning, 1 clean, 0 error (exit 1)",
        ]
    )
    # The look-alike: the default gate passes it, and every line says so.
    lenient = render(WARNED, "text", fail_on="leak")
    assert "pkg:E [train] CLEAN\n" in lenient and lenient.rstrip().endswith(
        "0 leak, 2 clean, 0 error (exit 0)"
    )
    for fmt in ("github", "html"):
        assert "0 leak, 1 warning, 1 clean, 0 error (exit 1)" in render(
            WARNED, fmt, fail_on="warning"
        )
        assert "0 leak, 2 clean, 0 error (exit 0)" in render(WARNED, fmt, fail_on="leak")
    junit = render(WARNED, "junit", fail_on="warning")
    assert 'message="pkg:E [train]: 1 warning, failing --fail-on warning" type="warning"' in junit


def test_tracebacks_are_never_part_of_a_text_report() -> None:
    """--debug writes them to stderr (the CLI); the report on stdout is the same with or without."""
    assert "TB" not in render(REPORT, "text", debug=True)
    assert render(REPORT, "text", debug=True) == render(REPORT, "text")


def test_without_a_terminal_a_long_path_is_never_wrapped() -> None:
    deep = holder_path("engine", *[f"layer_{i}" for i in range(14)], "cache")
    finding = Finding(deep, Holder.ENGINE, "SqueezeBackward1", 3, 4096, True, "detach it")
    report = Report(
        (
            TargetResult(
                "pkg:E", Mode.TRAIN, Verdict.LEAK, findings=(finding,), retained_bytes=4096
            ),
        ),
        "0",
        "t",
        "p",
    )
    path = str(deep)
    assert 120 < len(path) < 160
    rows = [line for line in render(report, "text").splitlines() if path in line]
    assert len(rows) == 2  # the table row and the finding's own line: each path whole, on one line
    # On a terminal (width given) the table folds to fit, as before.
    folded = render(report, "text", width=120)
    assert sum(1 for line in folded.splitlines() if path in line) == 1
