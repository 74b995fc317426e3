"""``leakscope fix``: every one-line edit is proven (re-run with it, one train step's gradients compared)
before it is offered as verified, and only verified edits are ever written.

Every fixture of the corpus is fixed, re-checked and its gradients recomputed by
tests/test_fix_corpus.py; here: the proofs that refuse a wrong edit, edits as text, the renderers,
exit codes and usage errors.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from leakscope.cli import app
from leakscope.fix.engine import prove_target
from leakscope.fix.files import StaleEdit, applied, unified_diff
from leakscope.fix.report import fix_report
from leakscope.fix.verdict import EditGroup, decide
from leakscope.options import CheckOptions
from leakscope.render import render
from leakscope.render.fixes import exit_code as fix_exit_code
from leakscope.results import (
    Cause,
    Edit,
    Finding,
    FixStatus,
    Holder,
    Mode,
    Report,
    Source,
    TargetResult,
    Verdict,
)
from tests.conftest import FIXTURES, ROOT, fixture_target, holder_path

pytestmark = pytest.mark.integration

#: fast enough for the suite, and still each holder's single step (the growth run is not needed to
#: find these holders)
FAST = ("--mode", "train", "--micro-batches", "1", "--no-confirm", "--jobs", "2")
SARIF_SCHEMA = json.loads(
    (ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8")
)


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    return env


def _leakscope(*args: str, cwd: Path, timeout: float = 900) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "leakscope", *args, "--format", "json"],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"leakscope printed no JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
        )


def test_a_detach_that_would_cut_a_gradient_is_proven_to_change_it() -> None:
    """The obvious fix for loss_reads_stored, detaching where the tensor is stored, is proven wrong: the
    holder goes away, but the entropy bonus loses its gradient."""
    file = "fixtures/loss_reads_stored.py"
    number = next(
        i
        for i, line in enumerate((ROOT / file).read_text().splitlines(), 1)
        if "self.scaled = " in line
    )
    before = "self.scaled = logits / self.temperature  # the bug: kept with its graph, and read by the loss below"
    edit = Edit(file, number, 13, before, "self.scaled = (logits / self.temperature).detach()")
    target = fixture_target("loss_reads_stored")
    group = EditGroup(target, edit, (("train", "engine.scaled"),))
    text = (ROOT / file).read_text()
    proof = prove_target(
        target,
        [group],
        {"train": ["engine.scaled"]},
        CheckOptions(modes=(Mode.TRAIN,), micro_batches=1, confirm=False),
    )
    assert (ROOT / file).read_text() == text
    (result,) = proof.proofs[0].results
    assert result.verdict is Verdict.CLEAN  # the holder is gone...
    verified, reason = decide(group, proof.proofs[0], {"train": ["engine.scaled"]})
    assert not verified  # ...but a gradient changed
    assert reason.startswith("not verified: the edit changes the gradient of module."), reason
    assert "beyond rtol=1e-05, atol=1e-07" in reason


def test_a_detach_that_removes_a_wrapped_critics_gradient_is_never_verified() -> None:
    """critic_wrapper's value head sits on a plain object (``self.critic.net``): the obvious detach where
    the values are stored removes the critic's whole gradient, and the proof, which compares every leaf
    the step's backward reaches, says so by name."""
    file = "fixtures/critic_wrapper.py"
    lines = (ROOT / file).read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if "self.values.append(" in line)
    before = lines[number - 1].strip()
    edit = Edit(
        file,
        number,
        13,
        before,
        "self.values.append(self.critic.net(features).squeeze(-1).detach())",
    )
    target = fixture_target("critic_wrapper")
    group = EditGroup(target, edit, (("train", "engine.values[0]"),))
    proof = prove_target(
        target,
        [group],
        {"train": ["engine.values[0]"]},
        CheckOptions(modes=(Mode.TRAIN,), micro_batches=1, confirm=False),
    )
    (result,) = proof.proofs[0].results
    assert result.verdict is Verdict.CLEAN  # the holder is gone...
    verified, reason = decide(group, proof.proofs[0], {"train": ["engine.values[0]"]})
    assert not verified  # ...and the critic lost its gradient
    assert reason.startswith("not verified: the edit changes the gradient of engine.critic.net."), (
        reason
    )


# -- edits as text ------------------------------------------------------------------------------------

EDIT = Edit("engine.py", 2, 9, "self.kept = x  # keep", "self.kept = x.detach()")


def test_an_edit_replaces_its_line_keeping_indentation_and_line_endings() -> None:
    text = "class E:\r\n        self.kept = x  # keep   \r\n    pass"
    assert applied(text, [EDIT]) == "class E:\r\n        self.kept = x.detach()\r\n    pass"
    diff = unified_diff(
        "engine.py", "a\n        self.kept = x  # keep\n", "a\n        self.kept = x.detach()\n"
    )
    assert diff == (
        "--- a/engine.py\n+++ b/engine.py\n@@ -1,2 +1,2 @@\n a\n"
        "-        self.kept = x  # keep\n+        self.kept = x.detach()\n"
    )


def test_an_edit_of_two_lines_keeps_the_indentation_and_line_endings_of_its_line() -> None:
    """A statement wrapped in ``with torch.no_grad():`` (NOTE [Updates that belong under no_grad]):
    the statement one level in, under the first line's indentation, each line ending as the file's."""
    wrap = Edit(
        "engine.py", 2, 9, "t.copy_(p)  # sync", "with torch.no_grad():\n    t.copy_(p)  # sync"
    )
    text = "for t, p in pairs:\r\n        t.copy_(p)  # sync\r\nend"
    assert applied(text, [wrap]) == (
        "for t, p in pairs:\r\n        with torch.no_grad():\r\n            t.copy_(p)  # sync\r\nend"
    )
    assert applied("        t.copy_(p)  # sync", [dataclasses.replace(wrap, line=1)]) == (
        "        with torch.no_grad():\n            t.copy_(p)  # sync"
    )
    report = _report(wrap, verified=True, proof="verified")
    (change,) = json.loads(render(report, "sarif"))["runs"][0]["results"][0]["fixes"][0][
        "artifactChanges"
    ]
    assert change["replacements"][0]["insertedContent"]["text"] == (
        "with torch.no_grad():\n            t.copy_(p)  # sync"
    )


@pytest.mark.parametrize(
    "text",
    [
        "class E:\n        self.kept = y\n",  # the line changed
        "class E:\n",  # the file got shorter
        "class E:\n    x = 1; self.kept = x  # keep\n",  # the text moved off its column
    ],
)
def test_an_edit_is_refused_when_its_line_changed_since_the_check(text: str) -> None:
    with pytest.raises(StaleEdit, match="changed since the check; run leakscope fix again"):
        applied(text, [EDIT], name="engine.py")


def _report(edit: Edit, verified: bool = False, proof: str | None = None) -> Report:
    finding = Finding(
        path=holder_path("engine", "kept"),
        holder=Holder.ENGINE,
        grad_fn="MulBackward0",
        graph_nodes=3,
        retained_bytes=256,
        confirmed=True,
        hint=f"at engine.py:2 in keep: {edit.after}",
        cause=Cause.ACTIVATIONS,
        source=Source("engine.py", 1, "keep"),
        stored_at=Source("engine.py", 2, "keep"),
        store_op="attribute",
        edit=Edit(edit.file, edit.line, edit.column, edit.before, edit.after, verified, proof),
    )
    result = TargetResult(
        "pkg.engine:Engine", Mode.TRAIN, Verdict.LEAK, findings=(finding,), retained_bytes=256
    )
    return Report((result,), "0.1.0", "2.13.0+cpu", "3.11.7")


def test_apply_refuses_a_file_that_changed_after_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "engine.py").write_text("class E:\n        self.kept = x  # keep\n")
    report = _report(EDIT)
    verdicts = {("pkg.engine:Engine", EDIT): (True, "verified: proven")}
    (tmp_path / "engine.py").write_text("class E:\n        self.kept = x * 2  # edited meanwhile\n")
    result = fix_report(report, verdicts, apply=True, tolerance="rtol=1e-05, atol=1e-07")
    (fix,) = result.fixes
    assert fix.status is FixStatus.VERIFIED and not fix.applied
    assert "not applied: engine.py:2 reads 'self.kept = x * 2  # edited meanwhile'" in fix.reason
    assert (
        tmp_path / "engine.py"
    ).read_text() == "class E:\n        self.kept = x * 2  # edited meanwhile\n"
    assert fix_exit_code(result) == 1


def test_without_apply_nothing_is_written_and_a_verified_fix_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "engine.py").write_text("class E:\n        self.kept = x  # keep\n")
    result = fix_report(
        _report(EDIT),
        {("pkg.engine:Engine", EDIT): (True, "verified: proven")},
        apply=False,
        tolerance="",
    )
    (fix,) = result.fixes
    assert (fix.status, fix.applied, fix_exit_code(result)) == (FixStatus.VERIFIED, False, 0)
    assert fix.diff.endswith("-        self.kept = x  # keep\n+        self.kept = x.detach()\n")
    assert (tmp_path / "engine.py").read_text() == "class E:\n        self.kept = x  # keep\n"
    (finding,) = result.report.results[0].findings
    assert (
        finding.edit is not None
        and finding.edit.verified
        and finding.edit.proof == "verified: proven"
    )


# -- code review: SARIF fixes, GitHub suggestions, the HTML diff ----------------------------------------


def test_sarif_carries_a_fix_for_a_verified_edit_only_and_validates() -> None:
    verified = json.loads(render(_report(EDIT, True, "verified: proven"), "sarif"))
    jsonschema.validators.validator_for(SARIF_SCHEMA)(SARIF_SCHEMA).validate(verified)
    (result,) = verified["runs"][0]["results"]
    assert result["fixes"] == [
        {
            "description": {"text": "verified: proven"},
            "artifactChanges": [
                {
                    "artifactLocation": {"uri": "engine.py", "uriBaseId": "%SRCROOT%"},
                    "replacements": [
                        {
                            "deletedRegion": {
                                "startLine": 2,
                                "startColumn": 9,
                                "endLine": 2,
                                "endColumn": 9 + len(EDIT.before),
                            },
                            "insertedContent": {"text": "self.kept = x.detach()"},
                        }
                    ],
                }
            ],
        }
    ]
    for unproven in (
        _report(EDIT),
        _report(EDIT, False, "not verified: the edit changes the gradient of module.w"),
    ):
        assert "fixes" not in json.loads(render(unproven, "sarif"))["runs"][0]["results"][0]


def test_github_suggests_a_verified_edit_on_the_line_it_rewrites() -> None:
    lines = render(_report(EDIT, True, "verified: proven"), "github").splitlines()
    assert lines[1] == (
        "::notice file=engine.py,line=2,title=leakscope verified fix::pkg.engine:Engine [train]: verified fix for"
        " engine.kept: verified: proven%0A```suggestion%0A        self.kept = x.detach()%0A```"
    )
    assert "suggestion" not in render(_report(EDIT, False, "not verified: why"), "github")


def test_html_shows_the_diff_beside_the_stored_at_snippet_escaped() -> None:
    hostile = Edit("engine.py", 2, 9, "self.kept = x  # <b>", "self.kept = x.detach()  # <script>")
    page = render(_report(hostile, False, "not verified: <img src=x>"), "html")
    assert '<div class="fix-pair"><figure class="snippet missing">' in page
    assert (
        '<figure class="snippet edit unverified"><figcaption><span class="snippet-title">suggested edit, not verified'
        in page
    )
    assert "x.detach()  # &lt;script&gt;</span>" in page and "# <script>" not in page
    assert '<p class="muted proof">not verified: &lt;img src=x&gt;</p>' in page
    assert 'class="snippet edit verified"' in render(
        _report(EDIT, True, "verified: proven"), "html"
    )


def test_check_fix_once_then_render_sarif_and_github_from_the_saved_report(tmp_path: Path) -> None:
    """CI checks once (``check --fix -f json -o``) and renders later: the saved report keeps what was
    proven, so the SARIF fix and the GitHub suggestion come from ``leakscope render`` alone."""
    saved = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakscope",
            "check",
            fixture_target("cached_logits"),
            "--fix",
            "-f",
            "json",
            "-o",
            str(saved),
            *FAST,
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # still a leak until the fix is applied
    rendered = {
        fmt: subprocess.run(
            [sys.executable, "-m", "leakscope", "render", str(saved), "-f", fmt],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        for fmt in ("sarif", "github")
    }
    sarif = json.loads(rendered["sarif"])
    jsonschema.validators.validator_for(SARIF_SCHEMA)(SARIF_SCHEMA).validate(sarif)
    (result,) = sarif["runs"][0]["results"]
    (change,) = result["fixes"][0]["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "fixtures/cached_logits.py"
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 24, "startColumn": 9, "endLine": 24, "endColumn": 34},
            "insertedContent": {"text": "self.last_logits = logits.detach()"},
        }
    ]
    assert result["fixes"][0]["description"]["text"].startswith("verified: ")
    assert (
        "::notice file=fixtures/cached_logits.py,line=24,title=leakscope verified fix::"
        in rendered["github"]
    )
    assert (
        "%0A```suggestion%0A        self.last_logits = logits.detach()%0A```" in rendered["github"]
    )


# -- the command line ---------------------------------------------------------------------------------


def test_fix_usage_and_target_errors_exit_2_and_3_with_json() -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["fix", "no-colon", "--format", "json"])
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"].startswith(
        "target 'no-colon' is not of the form"
    )
    missing = runner.invoke(
        app, ["fix", "fixtures.no_such_module:Engine", "--format", "json", "--mode", "train"]
    )
    doc = json.loads(missing.stdout)
    assert missing.exit_code == 3 == doc["exit_code"] and doc["fixes"] == []
    assert doc["report"]["results"][0]["error"].startswith(
        "module 'fixtures.no_such_module' not found"
    )


def test_fix_report_exit_codes() -> None:
    empty = fix_report(Report((), "0.1.0", "2.13.0+cpu", "3.11.7"), {}, apply=True, tolerance="")
    assert fix_exit_code(empty) == 0
    no_edit = dataclass_without_edit()
    assert [f.status for f in no_edit.fixes] == [FixStatus.NONE] and fix_exit_code(no_edit) == 1
    assert no_edit.fixes[0].reason == (
        "no one-line edit: no rewrite of the line that stored it is known to keep every gradient"
    )


def dataclass_without_edit() -> Any:
    import dataclasses

    report = _report(EDIT)
    finding = dataclasses.replace(report.results[0].findings[0], edit=None)
    result = dataclasses.replace(report.results[0], findings=(finding,))
    return fix_report(dataclasses.replace(report, results=(result,)), {}, apply=False, tolerance="")


def test_a_file_target_is_proven_under_the_name_the_resolver_gives_it(tmp_path: Path) -> None:
    """``path/to/file.py:Name`` is loaded by path, past every import finder: the proof loads the edited
    text under the same name first. Without --apply the file is left as it was."""
    (tmp_path / "sub").mkdir()
    shutil.copy(FIXTURES / "watch" / "history_engine.py", tmp_path / "sub" / "history_engine.py")
    before = (tmp_path / "sub" / "history_engine.py").read_bytes()
    code, doc = _leakscope("fix", "sub/history_engine.py:HistoryEngine", *FAST, cwd=tmp_path)
    (fix,) = doc["fixes"]
    assert (code, fix["status"], fix["applied"]) == (0, "verified", False), fix
    assert fix["edit"] == {
        "file": "sub/history_engine.py",
        "line": 30,
        "column": 9,
        "before": "self.entropies.append(entropy)",
        "after": "self.entropies.append(entropy.detach())",
        "verified": True,
        "proof": fix["reason"],
    }
    assert (tmp_path / "sub" / "history_engine.py").read_bytes() == before
