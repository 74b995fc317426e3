"""``leakscope fix``'s report: what was proven for each leaking finding, as text or JSON (pure strings).

Text: one block per finding (its status, the edit, why it is verified or not), then a
summary line with the exit code. ``--diff``: a plain unified patch of the verified edits, which
``git apply`` and ``patch -p1`` read. JSON: a versioned
document with the same per-finding data and the check's whole report
(docs/fix.md describes both).
"""

from __future__ import annotations

import dataclasses
import json

from leakscope.holders import shorten
from leakscope.render.escape import terminal
from leakscope.render.json_report import report_dict
from leakscope.results import FixReport, FixResult, FixStatus

SCHEMA_VERSION = 1


def exit_code(fixes: FixReport) -> int:
    """0: nothing to fix, or every leak's fix verified (and with ``--apply``, written); 1: a leak
    remains without one; 3: a target could not be checked."""
    if any(r.verdict.value == "error" for r in fixes.report.results):
        return 3
    if fixes.apply:
        return 0 if all(f.applied for f in fixes.fixes) else 1
    return 0 if all(f.status is FixStatus.VERIFIED for f in fixes.fixes) else 1


def _status(fix: FixResult, apply: bool) -> str:
    if fix.status is FixStatus.VERIFIED:
        return (
            "verified, applied"
            if fix.applied
            else ("verified, not applied" if apply else "verified")
        )
    if fix.status is FixStatus.UNVERIFIED:
        return "suggestion (not verified)"
    return "no one-line edit"


def summary_line(fixes: FixReport) -> str:
    """``3 verified (3 applied), 1 not verified, 2 without a one-line edit; 1 error (exit 1)``."""
    counts = {s: sum(1 for f in fixes.fixes if f.status is s) for s in FixStatus}
    applied = sum(1 for f in fixes.fixes if f.applied)
    errors = sum(1 for r in fixes.report.results if r.verdict.value == "error")
    parts = [
        f"{counts[FixStatus.VERIFIED]} verified" + (f" ({applied} applied)" if fixes.apply else ""),
        f"{counts[FixStatus.UNVERIFIED]} not verified",
        f"{counts[FixStatus.NONE]} without a one-line edit",
    ]
    line = ", ".join(parts)
    if errors:
        line += f"; {errors} could not be checked"
    if not fixes.fixes and not errors:
        line = "nothing to fix: no leak"
    return f"{line} (exit {exit_code(fixes)})"


def render_text(fixes: FixReport) -> str:
    """Each leaking finding, its fix's status and reason (``--diff`` is :func:`render_patch`)."""
    lines: list[str] = []
    for result in fixes.report.results:
        if result.verdict.value == "error":
            lines.append(f"{result.target} [{result.mode.value}] ERROR")
            lines.append(f"  error: {result.error}")
            lines.append("")
    for fix in fixes.fixes:
        lines.append(f"{fix.target} [{fix.mode}] {shorten(fix.path)}: {_status(fix, fixes.apply)}")
        if fix.edit is not None:
            edit = fix.edit
            lines.append(f"  at {edit.file}:{edit.line}: {edit.before}")
            lines.extend(
                f"  {' ' * len(f'at {edit.file}:{edit.line}:')} {after}"
                for after in edit.after.split("\n")
            )
            lines.append(f"  {fix.reason}")
            if fix.status is not FixStatus.VERIFIED:
                lines.append(f"  fix: {fix.hint}")
        else:
            if fix.reason != "no one-line edit":
                lines.append(f"  {fix.reason}")
            lines.append(f"  fix: {fix.hint}")
        lines.append("")
    if any(f.status is not FixStatus.NONE for f in fixes.fixes):  # an edit was run, not only worded
        lines.append(
            f"{fixes.compared}, {fixes.tolerance}" if fixes.gradients_compared else fixes.compared
        )
    lines.append(summary_line(fixes))
    return "\n".join(terminal(line) for line in lines) + "\n"


def render_patch(fixes: FixReport) -> str:
    """The verified edits (what ``--apply`` writes) as one unified patch, each edit once, paths
    ``a/FILE`` and ``b/FILE`` as ``git diff`` writes them: ``git apply`` and ``patch -p1`` read it
    as it is. Empty when no edit is verified. Not escaped: it is the file's own text, and a
    patch with its bytes changed would not apply (stdout of ``--diff`` is a patch, not a report)."""
    seen: set[str] = set()
    parts = []
    for fix in fixes.fixes:
        if fix.status is FixStatus.VERIFIED and fix.diff and fix.diff not in seen:
            seen.add(fix.diff)
            parts.append(fix.diff if fix.diff.endswith("\n") else fix.diff + "\n")
    return "".join(parts)


def fix_dict(fix: FixResult) -> dict[str, object]:
    """One finding's fix as plain JSON data."""
    return {
        "target": fix.target,
        "mode": fix.mode,
        "path": fix.path,
        "status": fix.status.value,
        "reason": fix.reason,
        "hint": fix.hint,
        "edit": dataclasses.asdict(fix.edit) if fix.edit is not None else None,
        "diff": fix.diff,
        "applied": fix.applied,
    }


def render_json(fixes: FixReport, *, debug: bool = False) -> str:
    """The fix report as an indented JSON document (``schema_version`` 1) with a trailing newline."""

    doc = {
        "schema_version": SCHEMA_VERSION,
        "leakscope_version": fixes.report.leakscope_version,
        "tolerance": fixes.tolerance,
        "apply": fixes.apply,
        "exit_code": exit_code(fixes),
        "fixes": [fix_dict(f) for f in fixes.fixes],
        "report": report_dict(fixes.report, debug=debug),
    }
    return json.dumps(doc, indent=2) + "\n"


__all__ = [
    "SCHEMA_VERSION",
    "exit_code",
    "fix_dict",
    "render_json",
    "render_patch",
    "render_text",
    "summary_line",
]
