"""One-line edits as text: applied to a file's text, shown as a unified diff, written atomically.

Pure strings; no torch. The proof (:mod:`leakscope.harness.proof`) loads a module
from :func:`applied` text, ``leakscope fix --diff`` prints :func:`unified_diff`,
``--apply`` writes :func:`applied` text (:func:`leakscope.atomic.write_atomic`): one
rule for what an :class:`~leakscope.results.Edit` does to a file, used by all three.

# NOTE [An edit applies only to the line it was derived from]
# An Edit names a line, the column its text starts at, and that text (``before``,
# without indentation or trailing whitespace). It replaces exactly that text
# and keeps the indentation and the line ending. If the line no longer reads
# ``before`` (the file was edited since the check), the edit is refused with
# the line as it reads now, never applied somewhere else or fuzzily.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from leakscope.errors import ExitCode, LeakscopeError, UsageError
from leakscope.results import Edit


class StaleEdit(LeakscopeError):
    """The file no longer has the line an edit was derived from (it changed since the check): the
    edit is not applied, so the leak remains (exit 1)."""

    exit_code = ExitCode.LEAK


def read_source(path: Path) -> str:
    """The file's text, line endings kept as they are."""
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def applied(text: str, edits: Sequence[Edit], *, name: str = "the file") -> str:
    """``text`` with every edit applied (NOTE [An edit applies only to the line it was derived from]).

    Two edits of one line must agree; raises :class:`StaleEdit` when a line does not read
    ``before`` any more.
    """
    lines = text.splitlines(keepends=True)
    by_line: dict[int, Edit] = {}
    for edit in edits:
        other = by_line.get(edit.line)
        if other is not None and (other.column, other.before, other.after) != (
            edit.column,
            edit.before,
            edit.after,
        ):
            raise UsageError(
                f"two different edits of {name}:{edit.line}; apply one, check again, then the other"
            )
        by_line[edit.line] = edit
    for number, edit in sorted(by_line.items()):
        if not 1 <= number <= len(lines):
            raise StaleEdit(
                f"{name} has {len(lines)} lines, so line {number} of the check is gone: the file changed since"
                " the check; run leakscope fix again"
            )
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        indent, code = body[: edit.column - 1], body[edit.column - 1 :].rstrip()
        if indent.strip() or code != edit.before:
            raise StaleEdit(
                f"{name}:{number} reads {body.strip()!r}, not {edit.before!r} as when it was checked:"
                " the file changed since the check; run leakscope fix again"
            )
        lines[number - 1] = f"{indent}{edit.after}{ending}"
    return "".join(lines)


def unified_diff(file: str, before: str, after: str) -> str:
    """``git diff`` style: ``--- a/FILE``, ``+++ b/FILE``, three lines of context."""
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{file}",
        f"b/{file}",
        n=3,
    )
    out = []
    for line in diff:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def edit_lines(edit: Edit) -> tuple[str, str]:
    """The edited line before and after, indented as at ``edit.column`` (with spaces: a report carries
    no file text, so a tab-indented line shows as spaces)."""
    indent = " " * (edit.column - 1)
    return f"{indent}{edit.before}", f"{indent}{edit.after}"


__all__ = ["StaleEdit", "applied", "edit_lines", "read_source", "unified_diff"]
