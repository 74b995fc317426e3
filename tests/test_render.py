"""Renderers are pure functions of a Report: compared as whole outputs."""

from __future__ import annotations

import json

from leakscope.policy import FAIL_ON, exit_code
from leakscope.render import render
from leakscope.results import Cause, Finding, Holder, Mode, Report, Source, TargetResult, Verdict
from tests.conftest import holder_path

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
                ),
            ),
            retained_bytes=4096,
        ),
        TargetResult(target="pkg.mod:Broken", mode=Mode.FORWARD_ONLY, verdict=Verdict.ERROR, error="boom", traceback="TB"),
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
            {"target": "pkg.mod:Engine", "mode": "train", "verdict": "clean", "error": None,
             "findings": [], "retained_bytes": 0, "warnings": []},
            {"target": "pkg.mod:Leaky", "mode": "train", "verdict": "leak", "error": None,
             "findings": [{
                 "path": "output.model_output.log_probs", "holder": "returned",
                 "grad_fn": "SqueezeBackward1", "graph_nodes": 37, "retained_bytes": 4096,
                 "confirmed": True, "hint": "detach it", "cause": "leaf+grad",
                 "bytes_by_cause": {"leaf+grad": 4096},
                 "source": {"file": "engine.py", "line": 12, "function": "forward_step"},
                 "severity": "leak", "allowed_reason": None,
             }],
             "retained_bytes": 4096, "warnings": []},
            {"target": "pkg.mod:Broken", "mode": "forward-only", "verdict": "error", "error": "boom",
             "findings": [], "retained_bytes": 0, "warnings": []},
        ],
    }


def test_json_traceback_only_with_debug() -> None:
    assert "traceback" not in json.loads(render(REPORT, "json"))["results"][2]
    assert json.loads(render(REPORT, "json", debug=True))["results"][2]["traceback"] == "TB"


def test_text_report_is_exact() -> None:
    text = "\n".join(line.rstrip() for line in render(REPORT, "text", width=100).splitlines())
    assert text == "\n".join([
        "leakscope 0.1.0 · torch 2.13.0+cpu · Python 3.11.7",
        "",
        "pkg.mod:Engine [train] CLEAN",
        "",
        "pkg.mod:Leaky [train] LEAK  4.0 KiB retained per micro-batch",
        "",
        "  path                            holder     grad_fn            cause         bytes   confirmed",
        " ───────────────────────────────────────────────────────────────────────────────────────────────",
        "  output.model_output.log_probs   returned   SqueezeBackward1   leaf+grad   4.0 KiB   yes",
        "",
        "  output.model_output.log_probs",
        "    created at engine.py:12 in forward_step",
        "    fix: detach it",
        "",
        "pkg.mod:Broken [forward-only] ERROR",
        "  error: boom",
        "",
        "1 leak, 1 clean, 1 error (exit 3)",
    ])


def test_report_exit_code_worst_wins() -> None:
    assert exit_code(REPORT) == 3
    assert exit_code(Report(REPORT.results[:2], "0", "t", "p")) == 1
    assert exit_code(Report(REPORT.results[:1], "0", "t", "p")) == 0


def test_text_footer_states_the_exit_code_the_process_uses_under_every_fail_on() -> None:
    """The footer and the process agree: with --fail-on warning a warning fails the gate."""
    warned = Report(
        (TargetResult("pkg:E", Mode.TRAIN, Verdict.CLEAN, warnings=("the holder walk stopped",)),),
        "0", "t", "p",
    )
    for fail_on in FAIL_ON:
        code = exit_code(warned, fail_on)
        assert render(warned, "text", fail_on=fail_on).rstrip().endswith(f"(exit {code})")
    assert exit_code(warned, "warning") == 1 and exit_code(warned, "leak") == 0
