"""The fix report: the check's report with each edit marked verified or not (from the proofs), a diff
per edit, and with ``--apply`` the verified edits written (NOTE [An edit applies only to the line it
was derived from] in ``leakscope/fix/files.py``). Torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from leakscope.errors import LeakscopeError
from leakscope.fix.files import applied, read_source, unified_diff, write_source
from leakscope.fix.prover import TargetProof
from leakscope.fix.verdict import EditGroup, decide, edit_groups, leaking, no_edit_reason
from leakscope.results import Edit, FixReport, FixResult, FixStatus, Report, Severity

Verdicts = dict[tuple[str, Edit], tuple[bool, str]]


def verdicts_of(
    report: Report,
    prove: Callable[[str, list[EditGroup], dict[str, list[str]]], TargetProof],
    root: str | None = None,
    proven_into: list[TargetProof] | None = None,
) -> Verdicts:
    """``(verified, reason)`` for each ``(target, edit)`` of the report, proven target by target with
    ``prove`` (:func:`prove_target`). Edits verified one by one but not together are not verified.
    ``root``: only files under this directory are edited (None: anywhere). ``proven_into``: each
    target's proof is appended there too (:func:`what_was_compared` reads them)."""
    groups = edit_groups(report, root)
    verdicts: Verdicts = {}
    for target in dict.fromkeys(g.target for g in groups):
        mine = [g for g in groups if g.target == target]
        original: dict[str, list[str]] = {}
        for result in report.results:
            if result.target == target:
                original.setdefault(result.mode.value, []).extend(
                    str(f.path) for f in leaking(result)
                )
        proven = prove(target, mine, original)
        if proven_into is not None:
            proven_into.append(proven)
        for group, proof in zip(mine, proven.proofs, strict=True):
            verdicts[(target, group.edit)] = decide(group, proof, original)
        if proven.combined is not None:
            indices, proof = proven.combined
            joined = EditGroup(
                target, mine[indices[0]].edit, tuple(f for i in indices for f in mine[i].findings)
            )
            ok, why = decide(joined, proof, original)
            if not ok:
                for i in indices:
                    verdicts[(target, mine[i].edit)] = (
                        False,
                        f"verified alone, but not with the other verified edits of {target} applied too: {why}",
                    )
    return verdicts


def what_was_compared(proven: Sequence[TargetProof], usual: str) -> tuple[str, bool]:
    """The fix report's footer: ``(what the proofs compared, whether any compared a tensor)``. ``usual``
    when one did; else the sentence a proof gave instead (a job that runs no backward), else that no
    proof got as far as comparing (each one's reason is on its fix)."""
    checks = [
        proof.gradients
        for target in proven
        for proof in (*target.proofs, *([target.combined[1]] if target.combined else []))
        if proof.gradients is not None
    ]
    if any(c.compared > 0 for c in checks):
        return usual, True
    instead = next((c.subject for c in checks if c.error is None and c.changed is None), None)
    if instead is not None:
        return f"no gradient compared: {instead}", False
    return "no gradient compared: no proof got as far as its comparison (each fix says why)", False


def fix_report(
    report: Report,
    verdicts: Verdicts,
    *,
    apply: bool,
    tolerance: str,
    root: str | None = None,
    compared: str | None = None,
    gradients_compared: bool = True,
) -> FixReport:
    """The fix report: the check's report with each edit marked, a diff per edit against the file as it
    reads now, and with ``apply`` the verified edits written (NOTE [An edit applies only to the line it
    was derived from]); one :class:`FixResult` per leaking finding, in report order."""
    diffs: dict[Edit, str] = {}
    patch: list[str] = []
    verified_by_file: dict[str, list[Edit]] = {}
    for (_, edit), (ok, _why) in verdicts.items():
        if ok and edit not in verified_by_file.get(edit.file, []):
            verified_by_file.setdefault(edit.file, []).append(edit)
    for file, edits in verified_by_file.items():
        try:
            text = read_source(Path(file))
            patch.append(unified_diff(file, text, applied(text, _one_per_line(edits), name=file)))
        except (OSError, LeakscopeError):
            pass
    for _, edit in verdicts:
        try:
            text = read_source(Path(edit.file))
            diffs[edit] = unified_diff(edit.file, text, applied(text, [edit], name=edit.file))
        except (OSError, LeakscopeError):
            diffs[edit] = ""
    written: dict[Edit, str | None] = {}  # edit -> None when written, else why not
    if apply:
        by_file: dict[str, list[Edit]] = {}
        for (_, edit), (ok, _why) in verdicts.items():
            if ok and edit not in by_file.get(edit.file, []):
                by_file.setdefault(edit.file, []).append(edit)
        for file, edits in by_file.items():
            chosen: dict[int, Edit] = {}
            for edit in edits:
                if edit.line in chosen:
                    written[edit] = (
                        f"not applied: another verified edit rewrites {file}:{edit.line}; apply it, then run fix again"
                    )
                else:
                    chosen[edit.line] = edit
            try:
                path = Path(file)
                write_source(path, applied(read_source(path), list(chosen.values()), name=file))
                written.update({edit: None for edit in chosen.values()})
            except LeakscopeError as exc:
                written.update({edit: f"not applied: {exc.message}" for edit in chosen.values()})
            except OSError as exc:
                written.update(
                    {
                        edit: f"not applied: cannot write {file}: {exc.strerror or exc}"
                        for edit in chosen.values()
                    }
                )
    fixes: list[FixResult] = []
    results = []
    # One fix per edit (or per holder without one) of a target: the same line found in train and in
    # forward-only is one fix, counted and printed once.
    seen: set[tuple[str, object]] = set()
    for result in report.results:
        findings = []
        for finding in result.findings:
            derived = finding.edit
            verdict = verdicts.get((result.target, derived)) if derived is not None else None
            if derived is not None and verdict is not None:
                finding = dataclasses.replace(
                    finding,
                    edit=dataclasses.replace(derived, verified=verdict[0], proof=verdict[1]),
                )
            findings.append(finding)
            if finding.severity is not Severity.LEAK:
                continue
            key = (result.target, derived if derived is not None else str(finding.path))
            if key in seen:
                continue
            seen.add(key)
            if derived is None or verdict is None:
                fixes.append(
                    FixResult(
                        result.target,
                        result.mode.value,
                        str(finding.path),
                        FixStatus.NONE,
                        no_edit_reason(finding, root),
                        finding.hint,
                    )
                )
                continue
            ok, reason = verdict
            not_written = written.get(derived, "not applied") if apply and ok else None
            if not_written:
                reason = f"{reason}; {not_written}"
            fixes.append(
                FixResult(
                    result.target,
                    result.mode.value,
                    str(finding.path),
                    FixStatus.VERIFIED if ok else FixStatus.UNVERIFIED,
                    reason,
                    finding.hint,
                    edit=finding.edit,
                    diff=diffs.get(derived, ""),
                    applied=apply and ok and not not_written,
                )
            )
        results.append(dataclasses.replace(result, findings=tuple(findings)))
    return FixReport(
        dataclasses.replace(report, results=tuple(results)),
        tuple(fixes),
        tolerance,
        apply,
        "".join(patch),
        compared if compared is not None else FixReport.compared,
        gradients_compared,
    )


def _one_per_line(edits: Sequence[Edit]) -> list[Edit]:
    """The first edit of each line (two verified edits of one line: the first is written, the other
    waits for the next run)."""
    chosen: dict[int, Edit] = {}
    for edit in edits:
        chosen.setdefault(edit.line, edit)
    return list(chosen.values())


__all__ = ["Verdicts", "fix_report", "verdicts_of", "what_was_compared"]
