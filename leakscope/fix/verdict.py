"""Whether a proven edit is a fix: the decision, from what the re-run and the step comparison showed.

NOTE [A fix is proven, not worded] (leakscope/fix/__init__.py) says how the
evidence is gathered; here it is judged, from descriptions only (no torch): a fix
is **verified** when the re-run with the edit no longer finds the holder in any
mode it was found in, finds no new one, errored nowhere, and one train step's
gradients are unchanged within the stated tolerance. Anything else keeps the
edit a suggestion, with the reason in words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from leakscope.fix.loading import in_project, outside
from leakscope.harness.gradients import GradientCheck
from leakscope.results import Cause, Edit, Finding, Report, Severity, TargetResult, Verdict


@dataclasses.dataclass(frozen=True)
class EditGroup:
    """One edit and every finding it fixes (the same edit often fixes a holder in both modes, or two
    holders of one object)."""

    target: str
    edit: Edit
    #: ``(mode, path)`` of each finding the edit is for
    findings: tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class EditProof:
    """What the proof child saw for one edit group: the re-run's results and the step comparison."""

    results: tuple[TargetResult, ...] = ()
    gradients: GradientCheck | None = None
    #: the edit could not even be tried (the file changed, the edited module does not import)
    error: str | None = None


def leaking(result: TargetResult) -> list[Finding]:
    """The findings ``fix`` is about: leaks, not warnings or allowed ones."""
    return [f for f in result.findings if f.severity is Severity.LEAK]


def edit_groups(report: Report, root: str | None = None) -> list[EditGroup]:
    """Each distinct edit of each target, with the findings it is for, in report order; an edit of a
    file that is not the user's (an installed package's line), or outside the project directory
    ``root`` (None: anywhere), is never proposed."""
    groups: dict[tuple[str, Edit], list[tuple[str, str]]] = {}
    for result in report.results:
        for finding in leaking(result):
            if (
                finding.edit is not None
                and in_project(finding.edit.file)
                and not outside(finding.edit.file, root)
            ):
                groups.setdefault((result.target, _bare(finding.edit)), []).append(
                    (result.mode.value, str(finding.path))
                )
    return [
        EditGroup(target, edit, tuple(dict.fromkeys(found)))
        for (target, edit), found in groups.items()
    ]


def _bare(edit: Edit) -> Edit:
    return dataclasses.replace(edit, verified=False, proof=None)


def _number(x: float) -> str:
    return f"{x:.3g}"


def decide(
    group: EditGroup, proof: EditProof, original: Mapping[str, Sequence[str]]
) -> tuple[bool, str]:
    """``(verified, reason)`` for one edit group. ``original``: the leak paths of the check, by mode."""
    if proof.error is not None:
        return False, f"cannot verify: {proof.error}"
    by_mode = {r.mode.value: r for r in proof.results}
    for result in proof.results:
        if result.verdict is Verdict.ERROR:
            return (
                False,
                f"cannot verify: the edited code could not be checked ({result.mode.value}): {result.error}",
            )
    for mode, path in group.findings:
        rerun = by_mode.get(mode)
        if rerun is None and proof.results:
            continue  # a watched job that, edited, runs no step of that mode (under torch.no_grad())
        if rerun is None:
            return False, f"cannot verify: the re-run has no {mode} result"
        if any(str(f.path) == path for f in leaking(rerun)):
            return (
                False,
                f"not verified: with the edit the re-run still finds a graph at {path} ({mode}, {rerun.verdict.value})",
            )
    for result in proof.results:
        known = set(original.get(result.mode.value, ()))
        new = [str(f.path) for f in leaking(result) if str(f.path) not in known]
        if new:
            return (
                False,
                f"not verified: with the edit the re-run finds a new holder, {new[0]} ({result.mode.value})",
            )
    grads = proof.gradients
    if grads is None:
        return False, "cannot verify: no train step was compared"
    tolerance = f"rtol={grads.rtol:g}, atol={grads.atol:g}"
    if grads.error is not None:
        return False, f"cannot verify: {grads.error}"
    if grads.changed is not None:
        if grads.changed_by is None:
            return (
                False,
                f"not verified: the edit changes the {grads.changed} (it is there on one side only)",
            )
        return False, (
            f"not verified: the edit changes the {grads.changed} (max |diff| {_number(grads.changed_by)},"
            f" beyond {tolerance})"
        )
    paths = ", ".join(dict.fromkeys(path for _, path in group.findings))
    if (
        grads.compared == 0
    ):  # a job with no backward, with the edit as without (leakscope.fix.script)
        return True, f"verified: with the edit no graph is held at {paths}, and {grads.subject}"
    return True, (
        f"verified: with the edit no graph is held at {paths}, and {grads.subject}"
        f" are unchanged ({grads.compared} tensors within {tolerance}; max |diff| {_number(grads.max_diff)})"
    )


def no_edit_reason(finding: Finding, root: str | None = None) -> str:
    """Why a finding has no edit to prove, in words."""
    if finding.edit is not None and not in_project(finding.edit.file):
        return (
            f"no one-line edit in your code: the line that stored it is in an installed package"
            f" ({finding.edit.file}:{finding.edit.line}), which leakscope never edits: upgrade the"
            " library, or call it on detached values, or under torch.no_grad() where only numbers are used"
        )
    if finding.edit is not None and outside(finding.edit.file, root):
        return (
            f"not edited: {finding.edit.file}:{finding.edit.line} is outside the project being checked"
            f" ({root}); give --allow-outside to prove and write edits there"
        )
    return f"no one-line edit: {_why_none(finding)}"


def _why_none(finding: Finding) -> str:
    """Why the judge derived no edit for ``finding``, in one clause, from the holder's kind (its path,
    cause and store) and the hint the judge wrote for it."""
    path, hint = str(finding.path), finding.hint
    if path == "<unknown holder>":
        return "no holder of the graph was found, so there is no line to change"
    if path == "<reference cycle>" or finding.cause is Cause.UNTIL_GC:
        return (
            "a reference cycle keeps the graph until the garbage collector runs; the change (keep the"
            " collector on, or break the cycle) is not one line"
        )
    if "__traceback__" in path:
        return (
            "a stored exception's traceback keeps its frames' locals; the change (keep str(e), or clear"
            " its frames) is not one line"
        )
    if ".gi_frame" in path or ".cr_frame" in path:
        return (
            "a suspended generator or coroutine keeps its frame's locals; the change (close it, or"
            " await it) is not one line"
        )
    if "keeps a graph node" in hint:
        return "a graph node itself is kept (a grad_fn, a GradientEdge), and no detach releases a node's graph"
    if "_hooks[" in path:
        return "a hook's closure keeps the tensor, and no detach on the line that registers the hook removes it"
    if "lru_cache" in hint:
        return (
            "functools.lru_cache keeps what the cached function returned, and the step's loss is"
            " computed from it, so detaching its return would cut a gradient"
        )
    if finding.path.grad_slot():  # NOTE [A gradient that keeps a graph]
        return (
            "a leaf's .grad holds a graph (a backward with create_graph=True made it); the change is"
            " at that backward, or clearing .grad after use, not at a store"
        )
    if "[<" in path:
        return (
            "it is kept under a key that is an object (a tensor key), not a name or a number, so no"
            " store is matched to one line"
        )
    if finding.stored_at is None and finding.store_op is None:
        return (
            "no line was traced storing it (the store did not happen in the micro-batch whose stores"
            " are traced), so there is no line to rewrite"
        )
    if "only after the loss is computed" in hint:
        return (
            "the step's loss is computed from the stored tensor, so detaching it where it is stored"
            " would cut a gradient; detach it after the loss line instead"
        )
    if finding.store_op == "return":
        return (
            "the returned container keeps it inside an object no single expression rebuilds detached"
            " (a tuple, a namespace)"
        )
    return "no rewrite of the line that stored it is known to keep every gradient"


__all__ = ["EditGroup", "EditProof", "decide", "edit_groups", "leaking", "no_edit_reason"]
