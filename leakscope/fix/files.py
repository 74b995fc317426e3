"""One-line edits as text: applied to a file's text, shown as a unified diff, written atomically.

Pure strings; no torch. The proof (:mod:`leakscope.fix.loading`) loads a module
from :func:`applied` text, ``leakscope fix --diff`` prints :func:`unified_diff`,
``--apply`` writes :func:`applied` text (:func:`leakscope.atomic.write_atomic`): one
rule for what an :class:`~leakscope.results.Edit` does to a file, used by all three.

# NOTE [An edit applies only to the line it was derived from]
# An Edit names a line, the column its text starts at, and that text (``before``,
# without indentation or trailing whitespace). It replaces exactly that text
# and keeps the indentation and the line ending. If the line no longer reads
# ``before`` (the file was edited since the check), the edit is refused with
# the line as it reads now, never applied somewhere else or fuzzily. An ``after``
# may be several lines (a statement wrapped in ``with torch.no_grad():``): each
# line after the first starts at the same indentation as the first, plus its own.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import tokenize
from collections.abc import Sequence
from pathlib import Path

from leakscope.errors import ExitCode, LeakscopeError, UsageError
from leakscope.results import Edit


class StaleEdit(LeakscopeError):
    """The file no longer has the line an edit was derived from (it changed since the check): the
    edit is not applied, so the leak remains (exit 1)."""

    exit_code = ExitCode.LEAK


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(text: str) -> list[str]:
    """``text``'s lines with their endings, broken where Python breaks source lines (NOTE [Files are
    the user's]): a form feed or a Unicode line separator inside a line stays in it."""
    return _LINE.findall(text)


def source_encoding(data: bytes) -> str:
    """The encoding Python reads a source file of ``data`` in (its coding cookie, a BOM, else UTF-8)."""
    try:
        return tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError:
        return "utf-8"


def read_source(path: Path) -> str:
    """The file's text in the encoding Python reads it in, line endings kept as they are; raises
    :class:`~leakscope.errors.UsageError` when it does not decode (never a traceback)."""
    data = path.read_bytes()
    encoding = source_encoding(data)
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise UsageError(
            f"cannot read {path} as {encoding} (its declared encoding): {exc}; fix its coding cookie"
        ) from None


def write_source(path: Path, text: str) -> None:
    """Write ``text`` over the source file ``path`` (NOTE [Files are the user's]): in the encoding the
    file had, atomically, keeping its mode and, where this process may, its owner and group."""
    from leakscope.atomic import write

    info = path.stat()
    data = text.encode(source_encoding(path.read_bytes()))
    write(path, data)
    with contextlib.suppress(OSError):  # only root (or the owner, for a group it is in) may
        now = path.stat()
        if (now.st_uid, now.st_gid) != (info.st_uid, info.st_gid):
            os.chown(path, info.st_uid, info.st_gid)


def applied(text: str, edits: Sequence[Edit], *, name: str = "the file") -> str:
    """``text`` with every edit applied (NOTE [An edit applies only to the line it was derived from]).

    Two edits of one line must agree; raises :class:`StaleEdit` when a line does not read
    ``before`` any more.
    """
    lines = source_lines(text)
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
        # an ``after`` of several lines: each one after the first indented as the first
        lines[number - 1] = indent + edit.after.replace("\n", (ending or "\n") + indent) + ending
    return "".join(lines)


def unified_diff(file: str, before: str, after: str) -> str:
    """``git diff`` style: ``--- a/FILE``, ``+++ b/FILE``, three lines of context."""
    diff = difflib.unified_diff(
        source_lines(before),
        source_lines(after),
        f"a/{file}",
        f"b/{file}",
        n=3,
    )
    out = []
    for line in diff:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def edited_texts(edits: Sequence[Edit]) -> dict[Path, str]:
    """Each edited file's text with its edits applied; raises what :func:`applied` raises."""
    by_file: dict[str, list[Edit]] = {}
    for edit in edits:
        by_file.setdefault(edit.file, []).append(edit)
    texts = {}
    for file, mine in by_file.items():
        path = Path(file)
        try:
            text = read_source(path)
        except OSError as exc:
            from leakscope.errors import TargetError

            raise TargetError(f"cannot read {file}: {exc.strerror or exc}") from None
        texts[path] = applied(text, mine, name=file)
    return texts


__all__ = [
    "edited_texts",
    "StaleEdit",
    "applied",
    "read_source",
    "source_encoding",
    "source_lines",
    "unified_diff",
    "write_source",
]
