"""CI formats (JUnit, SARIF, GitHub annotations): all rendered from the same Report.

A hand-built report pins whole outputs; a real report of ``fixtures/verl_bug.py``
proves the formats hold for what the detector actually produces.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import leakscope
from leakscope.holders import CYCLE as CYCLE_PATH
from leakscope.options import CheckOptions
from leakscope.policy import AllowEntry
from leakscope.render import FORMATS, render
from leakscope.results import Cause, Finding, Holder, Mode, Report, Source, TargetResult, Verdict
from tests.conftest import holder_path

pytestmark = pytest.mark.unit

SCHEMA = json.loads(
    (Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8")
)

LEAK = Finding(
    path=holder_path("output", "model_output", "entropy"),
    holder=Holder.RETURNED,
    grad_fn="NegBackward0",
    graph_nodes=37,
    retained_bytes=12288,
    confirmed=True,
    hint="detach the returned tree",
    cause=Cause.ACTIVATIONS,
    bytes_by_cause={"activations": 8192, "leaf+grad": 4096},
    source=Source("fixtures/_common.py", 26, "entropy_of"),
)
ALLOWED = Finding(
    path=holder_path("output", "model_output", "log_probs"),
    holder=Holder.RETURNED,
    grad_fn="SqueezeBackward1",
    graph_nodes=35,
    retained_bytes=4096,
    confirmed=True,
    hint="detach, 100% of it",
    cause=Cause.LEAF_GRAD,
    bytes_by_cause={"leaf+grad": 4096},
    source=Source("fixtures/_common.py", 21, "log_probs_of"),
    severity="allowed",
    allowed_reason="needed by the KL term",
)
CYCLE = Finding(
    path=CYCLE_PATH,
    holder=Holder.CYCLE,
    grad_fn="-",
    graph_nodes=0,
    retained_bytes=4096,
    confirmed=True,
    hint="break the cycle",
    cause=Cause.UNTIL_GC,
    source=Source("fixtures/_common.py", 35, "forward_step"),
    severity="warning",
)
REPORT = Report(
    results=(
        TargetResult(
            "fixtures.verl_bug:Engine",
            Mode.TRAIN,
            Verdict.LEAK,
            findings=(LEAK, ALLOWED),
            retained_bytes=12288,
            seconds=1.5,
        ),
        TargetResult("fixtures.verl_bug:Engine", Mode.FORWARD_ONLY, Verdict.CLEAN, seconds=0.25),
        TargetResult(
            "fixtures.cycle_until_gc:Engine",
            Mode.TRAIN,
            Verdict.CLEAN,
            findings=(CYCLE,),
            seconds=0.5,
        ),
        TargetResult(
            "nope:Engine",
            Mode.TRAIN,
            Verdict.ERROR,
            error="module 'nope' not found; check the name",
        ),
    ),
    leakscope_version="0.1.0",
    torch_version="2.13.0+cpu",
    python_version="3.11.7",
)


def test_every_format_is_registered() -> None:
    assert FORMATS == ("text", "json", "junit", "sarif", "github", "html")
    for fmt in FORMATS:
        assert render(REPORT, fmt).endswith("\n")


def test_github_annotations_whole_output() -> None:
    assert render(REPORT, "github") == (
        "::error file=fixtures/_common.py,line=26,title=leakscope returned::fixtures.verl_bug:Engine [train]: "
        "output.model_output.entropy (returned, NegBackward0) keeps this step's autograd graph alive: "
        "12.0 KiB, cause activations. Fix: detach the returned tree\n"
        "::notice file=fixtures/_common.py,line=21,title=leakscope returned (allowed)::fixtures.verl_bug:Engine "
        "[train]: output.model_output.log_probs (returned, SqueezeBackward1) keeps this step's autograd graph "
        "alive (allowed): 4.0 KiB, cause leaf+grad. Fix: detach, 100%25 of it. Allowed: needed by the KL term\n"
        "::warning file=fixtures/_common.py,line=35,title=leakscope cycle::fixtures.cycle_until_gc:Engine [train]: "
        "<reference cycle> (cycle, -) keeps this step's autograd graph alive until the cyclic garbage collector "
        "runs: 4.0 KiB, cause until-gc. Fix: break the cycle\n"
        "::error title=leakscope error::nope:Engine [train]: module 'nope' not found; check the name\n"
        "leakscope: 1 leak, 2 clean, 1 error (exit 3)\n"
    )


def test_github_escapes_property_delimiters() -> None:
    from leakscope.render.github import command

    assert (
        command("error", "a\nb: 50%", file="a,b:c.py", line=3)
        == "::error file=a%2Cb%3Ac.py,line=3::a%0Ab: 50%25"
    )


def _junit(report: Report, **kwargs: Any) -> ET.Element:
    return ET.fromstring(render(report, "junit", **kwargs).encode())


def test_junit_one_testcase_per_target_and_mode() -> None:
    root = _junit(REPORT)
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "4",
        "failures": "1",
        "errors": "1",
        "skipped": "0",
        "time": "2.250",
    }
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {
        "leakscope_version": "0.1.0",
        "torch_version": "2.13.0+cpu",
        "python_version": "3.11.7",
    }
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name"), c.get("time")) for c in cases] == [
        ("fixtures.verl_bug:Engine", "train", "1.500"),
        ("fixtures.verl_bug:Engine", "forward-only", "0.250"),
        ("fixtures.cycle_until_gc:Engine", "train", "0.500"),
        ("nope:Engine", "train", "0.000"),
    ]
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("type") == "leak"
    assert failure.get("message") == (
        "fixtures.verl_bug:Engine [train]: graph retained by 1 reference, 12.0 KiB per micro-batch: "
        "output.model_output.entropy (1 allowed)"
    )
    assert failure.text is not None
    assert "created at fixtures/_common.py:26 in entropy_of" in failure.text
    assert "allowed: needed by the KL term" in failure.text
    assert list(cases[1]) == []
    assert [c.tag for c in cases[2]] == ["system-out"]
    error = cases[3].find("error")
    assert (
        error is not None
        and error.get("message")
        == "nope:Engine [train]: error: module 'nope' not found; check the name"
    )


def test_junit_fail_on_warning_makes_the_warning_a_failure() -> None:
    suite = _junit(REPORT, fail_on="warning").find("testsuite")
    assert suite is not None and suite.get("failures") == "2"
    failure = suite.findall("testcase")[2].find("failure")
    assert failure is not None and failure.get("type") == "warning"


def _validate_sarif(doc: dict[str, Any]) -> None:
    validator_cls = jsonschema.validators.validator_for(SCHEMA)
    validator_cls.check_schema(SCHEMA)
    validator_cls(SCHEMA).validate(doc)


def test_sarif_is_valid_and_locates_each_finding() -> None:
    doc = json.loads(render(REPORT, "sarif"))
    _validate_sarif(doc)
    run = doc["runs"][0]
    assert doc["version"] == "2.1.0"
    assert run["tool"]["driver"]["name"] == "leakscope"
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["returned", "reference-cycle"]
    results = run["results"]
    assert [(r["ruleId"], r["ruleIndex"], r["level"]) for r in results] == [
        ("returned", 0, "error"),
        ("returned", 0, "note"),
        ("reference-cycle", 1, "warning"),
    ]
    first = results[0]
    assert first["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "fixtures/_common.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 26},
    }
    assert first["message"]["text"].endswith("Fix: detach the returned tree")
    assert first["properties"]["retainedBytes"] == 12288
    assert results[1]["suppressions"] == [
        {"kind": "external", "justification": "needed by the KL term"}
    ]
    assert "suppressions" not in first
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"] == [
        {
            "level": "error",
            "message": {"text": "nope:Engine [train]: module 'nope' not found; check the name"},
        }
    ]


def test_sarif_schema_rejects_a_broken_log() -> None:
    doc = json.loads(render(REPORT, "sarif"))
    doc["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        _validate_sarif(doc)


@pytest.fixture(scope="session")
def real_report() -> Report:
    """verl 6698 in train mode, with one finding allowlisted."""
    options = CheckOptions(
        modes=(Mode.TRAIN,),
        allowlist=(AllowEntry("output.model_output.entropy", "kept for the KL term"),),
    )
    return leakscope.check("fixtures.verl_bug:Engine", options)


def test_real_report_in_every_ci_format(real_report: Report) -> None:
    [result] = real_report.results
    assert result.verdict is Verdict.LEAK
    assert [(str(f.path), f.severity) for f in result.findings] == [
        ("output.model_output.log_probs", "leak"),
        ("output.model_output.entropy", "allowed"),
    ]
    sarif = json.loads(render(real_report, "sarif"))
    _validate_sarif(sarif)
    located = [r["locations"][0]["physicalLocation"] for r in sarif["runs"][0]["results"]]
    # The line in the engine's forward_step that made each retained tensor.
    assert located == [
        {
            "artifactLocation": {"uri": "fixtures/verl_bug.py", "uriBaseId": "%SRCROOT%"},
            "region": {"startLine": 25},
        },
        {
            "artifactLocation": {"uri": "fixtures/verl_bug.py", "uriBaseId": "%SRCROOT%"},
            "region": {"startLine": 26},
        },
    ]
    github = render(real_report, "github").splitlines()
    assert github[0].startswith(
        "::error file=fixtures/verl_bug.py,line=25,title=leakscope returned::"
    )
    assert github[1].startswith(
        "::notice file=fixtures/verl_bug.py,line=26,title=leakscope returned (allowed)::"
    )
    assert github[2] == "leakscope: 1 leak, 0 clean, 0 error (exit 1)"
    case = _junit(real_report).find("testsuite/testcase")
    assert case is not None and case.find("failure") is not None
    doc = json.loads(render(real_report, "json"))
    assert [f["severity"] for f in doc["results"][0]["findings"]] == ["leak", "allowed"]
    assert doc["results"][0]["findings"][1]["allowed_reason"] == "kept for the KL term"
