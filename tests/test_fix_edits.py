"""The pieces of ``leakscope fix`` that need no proof run: the edit at a return (NOTE [Detached at the
return]), files kept as the user wrote them (NOTE [Files are the user's]), the leaves a step's backward
reaches (NOTE [Every gradient the step's backward reaches]) and the regression test for a graph the job
itself holds (NOTE [From a real job to a gate])."""

from __future__ import annotations

import ast
import dataclasses
import os
import stat
from pathlib import Path

import pytest
import torch

from leakscope.diagnose.storefix import StoreSite, rewrite
from leakscope.fix.files import applied, read_source, source_lines, unified_diff, write_source
from leakscope.fix.loading import outside
from leakscope.harness.gradients import graph_leaves
from leakscope.holders import HolderPath
from leakscope.render import regression
from leakscope.results import (
    Cause,
    Edit,
    Finding,
    Holder,
    Mode,
    Report,
    Source,
    TargetResult,
    Verdict,
)
from tests.conftest import holder_path

pytestmark = pytest.mark.unit

WHERE = Source("engine.py", 30, "forward_step")


def _return(code: str, path: HolderPath) -> str | None:
    return rewrite(StoreSite("return", code, WHERE), path)


@pytest.mark.parametrize(
    ("code", "path", "after"),
    [
        # verl's engine: the container in the returned literal, every tensor in it detached (verl#6699)
        (
            'return loss, {"model_output": model_output, "metrics": metrics}',
            holder_path("output", "model_output", "log_probs"),
            'return loss, {"model_output": {k: v.detach() if hasattr(v, "detach") else v for k, v in'
            ' model_output.items()}, "metrics": metrics}',
        ),
        # verl 0.8.0: the container reached through a name, rebuilt key by key down to it
        (
            "return loss, output",
            holder_path("output", "model_output", "entropy"),
            'return loss, {**output, "model_output": {k: v.detach() if hasattr(v, "detach") else v'
            ' for k, v in output["model_output"].items()}}',
        ),
        # the tensor itself in the literal
        (
            'return loss, {"logits": logits, "n": n}',
            holder_path("output", "logits"),
            'return loss, {"logits": logits.detach(), "n": n}',
        ),
        (
            "return loss, dict(probs=probs.softmax(-1))",
            holder_path("output", "probs"),
            "return loss, dict(probs=(probs.softmax(-1)).detach())",
        ),
        ("return loss, [a, b]", holder_path("output", 1), "return loss, [a, b.detach()]"),
        ("return loss, out", holder_path("output"), "return loss, out.detach()"),
        # the loss (the first element) is never touched; a list entry inside a name: rebuilt
        (
            "return loss, outs",
            holder_path("output", 0),
            'return loss, [v.detach() if hasattr(v, "detach") else v for v in outs]',
        ),
    ],
)
def test_a_returned_tensor_is_detached_at_the_return(
    code: str, path: HolderPath, after: str
) -> None:
    got = _return(code, path)
    assert got == after
    ast.parse(got)  # still one valid statement


@pytest.mark.parametrize(
    ("code", "path"),
    [
        ("return loss", holder_path("output")),  # not (loss, output)
        ("return loss, {'f': lambda: x}", holder_path("output", "f")),  # a closure
        ("return loss, self.out", holder_path("engine", "out")),  # not a returned holder
        ("return (loss,", holder_path("output")),  # one line of a statement that goes on
    ],
)
def test_no_return_edit_where_none_can_be_derived(code: str, path: HolderPath) -> None:
    assert _return(code, path) is None


# -- files are the user's ----------------------------------------------------------------------------


def test_a_form_feed_does_not_shift_lines() -> None:
    text = "import torch\n\x0c\nclass E:\r\n    def f(self):\r\n        self.kept = x  # keep\r\n"
    assert len(source_lines(text)) == 5  # str.splitlines would count 6
    edit = Edit("e.py", 5, 9, "self.kept = x  # keep", "self.kept = x.detach()  # keep")
    after = applied(text, [edit])
    assert after == text.replace("self.kept = x  #", "self.kept = x.detach()  #")
    assert unified_diff("e.py", text, after).count("\n-") == 1


def test_a_latin1_file_keeps_its_encoding_line_endings_mode_and_owner(tmp_path: Path) -> None:
    file = tmp_path / "engine.py"
    text = '# -*- coding: latin-1 -*-\r\n\x0c\r\n"""caf\xe9"""\r\nself.kept = x\r\n'
    file.write_bytes(text.encode("latin-1"))
    file.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(file, 12345, 23456)
    assert read_source(file) == text
    edit = Edit(str(file), 4, 1, "self.kept = x", "self.kept = x.detach()")
    write_source(file, applied(read_source(file), [edit]))
    assert file.read_bytes() == text.replace("= x\r", "= x.detach()\r").encode("latin-1")
    info = file.stat()
    assert stat.S_IMODE(info.st_mode) == 0o640
    if os.geteuid() == 0:
        assert (info.st_uid, info.st_gid) == (12345, 23456)


def test_a_file_that_does_not_decode_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    from leakscope.errors import UsageError

    file = tmp_path / "bad.py"
    file.write_bytes(b"x = '\xff'\n")
    with pytest.raises(UsageError, match=r"cannot read .*bad.py as utf-8"):
        read_source(file)


def test_edits_stay_under_the_project(tmp_path: Path) -> None:
    assert not outside(str(tmp_path / "pkg" / "engine.py"), str(tmp_path))
    assert outside("/usr/lib/python3/engine.py", str(tmp_path))
    assert not outside("/usr/lib/python3/engine.py", None)  # --allow-outside


# -- every leaf the step's backward reaches ---------------------------------------------------------------


class _Wrapper:
    """A plain object holding a module, as a critic wrapper does."""

    def __init__(self) -> None:
        self.net = torch.nn.Linear(2, 1)


def test_the_graph_names_every_leaf_its_backward_reaches() -> None:
    torch.manual_seed(0)
    model, critic = torch.nn.Linear(3, 2), _Wrapper()
    coefficient = torch.ones((), requires_grad=True)
    x = torch.randn(4, 3)
    loss = model(x).sum() * coefficient + critic.net(model(x)).sum()
    found = {id(t) for t in graph_leaves([loss])}
    expected = {id(p) for p in (*model.parameters(), *critic.net.parameters(), coefficient)}
    assert found == expected
    assert graph_leaves([loss.detach()]) == []


# -- the regression test for a graph the job holds ----------------------------------------------------


def _watch_report(holder: Holder, path: HolderPath) -> Report:
    finding = Finding(path, holder, "AddBackward0", 3, 4096, True, "", Cause.ACTIVATIONS)
    result = TargetResult("train_lib:Stepper.step", Mode.TRAIN, Verdict.LEAK, None, (finding,))
    return Report((result,), "0", "2", "3.11")


@pytest.mark.parametrize(
    ("holder", "path"),
    [
        (Holder.CALLER, holder_path("caller:train.py:main", "losses", 0)),
        (Holder.GLOBAL, holder_path("global:train", "kept", 0)),
    ],
)
def test_a_graph_the_job_holds_gets_a_test_that_watches_the_job(
    holder: Holder, path: HolderPath
) -> None:
    report = _watch_report(holder, path)
    assert regression.leaking_classes(report, "train.py") == {}  # a class check would pass
    text = regression.render(
        report,
        script="train.py",
        args=["--steps", "5"],
        methods=["train_lib:Stepper.step"],
        cwd="..",
    )
    ast.parse(text)
    namespace: dict[str, object] = {"__file__": "/p/tests/test_leaks.py"}
    exec(compile(text.split("\n\ndef ")[0], "test_leaks.py", "exec"), namespace)
    assert namespace["JOB"] == {
        "cwd": "..",
        "script": "train.py",
        "args": ["--steps", "5"],
        "methods": ["train_lib:Stepper.step"],
        "held": [str(path)],
    }
    assert "def test_the_job_keeps_no_autograd_graph() -> None:" in text
    assert "test_keeps_no_autograd_graph(leakscope" not in text
    # a job run with -m cannot be re-run from the test: none written, one line why
    assert regression.job_note(report, None) is not None
    assert regression.job_note(report, "train.py") is None


def test_an_engine_held_graph_keeps_the_class_test_only() -> None:
    report = _watch_report(Holder.ENGINE, holder_path("engine", "entropies", 0))
    text = regression.render(report, script="train.py")
    assert "JOB = " not in text and "import subprocess" not in text
    assert '"train_lib:Stepper": ["engine.entropies[0]"]' in text


_SCRIPT = """import torch as T

def evaluate(model, steps):
    predictions = []
    hidden = T.zeros(1)
    total = 0
    for step in range(steps):
        predictions.append(model(T.randn(8, 16)))
        out, hidden = model(step, hidden)
        total += out
        x = (  # a statement that goes on
            out
        )
"""


@pytest.mark.parametrize(
    ("line", "after", "carry"),
    [
        # a line that made the graph and stores it: run it under torch.no_grad() (the module's own name)
        (8, "with T.no_grad():\n    predictions.append(model(T.randn(8, 16)))", False),
        # a carried state: detached where the line reads it
        (9, "out, hidden = model(step, hidden.detach())", True),
        # a running sum is the stored-at line's edit, and one line of a longer statement has none
        (10, None, False),
        (11, None, False),
    ],
)
def test_an_edit_from_the_line_that_made_the_graph(
    tmp_path: Path, line: int, after: str | None, carry: bool
) -> None:
    from leakscope.fix.candidates import from_created_line
    from leakscope.results import Finding, Holder, Source

    file = tmp_path / "train.py"
    file.write_text(_SCRIPT, encoding="utf-8")
    finding = Finding(
        path=holder_path("caller:train.py:evaluate", "predictions", 0),
        holder=Holder.CALLER,
        grad_fn="AddBackward0",
        graph_nodes=3,
        retained_bytes=100,
        confirmed=True,
        hint="",
        source=Source(str(file), line, "evaluate"),
    )
    derived = from_created_line(finding)
    if after is None:
        assert derived is None
        return
    assert derived is not None
    edit, is_carry = derived
    assert (edit.line, edit.column, edit.after, is_carry) == (line, 9, after, carry)
    edited = applied(_SCRIPT, [edit]).splitlines()
    assert edited[line - 1 : line - 1 + len(after.splitlines())] == [
        " " * 8 + part for part in after.splitlines()
    ]
    # no torch imported by a name: no torch.no_grad() to write
    file.write_text(_SCRIPT.replace("import torch as T", "from torch import nn"), encoding="utf-8")
    assert from_created_line(finding) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # a target network's Polyak update: the statement runs under no_grad, one level in
        (
            "target.copy_(tau * p + (1 - tau) * target)  # sync",
            "with T.no_grad():\n    target.copy_(tau * p + (1 - tau) * target)  # sync",
        ),
        (
            "ema.mul_(0.99).add_(p, alpha=0.01)",
            "with T.no_grad():\n    ema.mul_(0.99).add_(p, alpha=0.01)",
        ),
        # not an in-place update: the judge's edit stands
        ("self.values.append(v)", None),
        ("x = y.add_(z)", None),
        ("t.__iadd__(z)", None),
    ],
)
def test_an_in_place_update_is_wrapped_in_no_grad(
    tmp_path: Path, before: str, after: str | None
) -> None:
    """NOTE [Updates that belong under no_grad]: the judge's edit of an in-place update of a tensor is
    replaced by the statement under ``torch.no_grad()`` (the module's own name for torch), two lines
    that keep the line's indentation when applied."""
    from leakscope.fix.candidates import under_no_grad
    from leakscope.results import Finding, Holder

    file = tmp_path / "engine.py"
    file.write_text(f"import torch as T\n\nfor p in ps:\n        {before}\n", encoding="utf-8")
    edit = Edit(str(file), 4, 9, before, "judge's")
    finding = Finding(
        path=holder_path("engine", "targets", 0),
        holder=Holder.ENGINE,
        grad_fn="CopyBackwards",
        graph_nodes=3,
        retained_bytes=100,
        confirmed=True,
        hint="",
        edit=edit,
    )
    wrapped = under_no_grad(finding)
    if after is None:
        assert wrapped is None
        return
    assert wrapped is not None and wrapped.after == after
    lines = applied(file.read_text(encoding="utf-8"), [wrapped]).splitlines()
    assert lines[3:5] == [" " * 8 + part for part in after.splitlines()]
    # no torch imported by a name: no torch.no_grad() to write
    file.write_text(f"from torch import nn\n\nfor p in ps:\n        {before}\n", encoding="utf-8")
    assert under_no_grad(finding) is None


def test_the_footer_says_what_the_proofs_compared() -> None:
    """A job that runs no backward compares no gradient: the footer says so, with no tolerance, never
    "compared over the job's first 3 backward calls"."""
    from leakscope.fix.prover import TargetProof
    from leakscope.fix.report import fix_report, what_was_compared
    from leakscope.fix.script import NO_BACKWARD
    from leakscope.fix.verdict import EditProof
    from leakscope.harness.gradients import GradientCheck
    from leakscope.render.fixes import render_text
    from leakscope.results import FixResult, FixStatus, Report

    usual = "losses and gradients compared over the job's first 3 backward calls, same seeds"
    none_ran = TargetProof((EditProof(gradients=GradientCheck(subject=NO_BACKWARD)),))
    ran = TargetProof((EditProof(gradients=GradientCheck(compared=15)),))
    failed = TargetProof((EditProof(error="the edited module does not import"),))
    assert what_was_compared([none_ran], usual) == (f"no gradient compared: {NO_BACKWARD}", False)
    assert what_was_compared([none_ran, ran], usual) == (usual, True)
    assert what_was_compared([failed], usual)[0].startswith("no gradient compared: no proof got")
    compared, any_compared = what_was_compared([none_ran], usual)
    report = fix_report(
        Report((), "0.1.0", "2.13.0+cpu", "3.11.7"),
        {},
        apply=False,
        tolerance="rtol=1e-05, atol=1e-07",
        compared=compared,
        gradients_compared=any_compared,
    )
    assert report.compared == compared and not report.gradients_compared
    verified = FixResult("job", "train", "predictions[0]", FixStatus.VERIFIED, "verified: ...", "")
    text = render_text(dataclasses.replace(report, fixes=(verified,)))
    assert f"\nno gradient compared: {NO_BACKWARD}\n" in text
    assert "backward calls" not in text and "rtol=" not in text
