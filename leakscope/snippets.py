"""Source lines captured when a check or watch runs, so that no renderer ever reads a file.

A finding names where its tensor was created and stored (:class:`~leakscope.results.Source`).
The HTML report shows the lines around them; they are read here, once, while the
check runs, and travel in the report (``Finding.snippets``, the JSON report's
``snippets``), so ``leakscope render`` of a saved report opens no file but the report.

# NOTE [Snippets read only the checked project]
# A ``Source.file`` is whatever name a code object carries, and an engine can compile
# code under any name (``compile(src, "/proc/self/environ", "exec")``); a report is
# a CI artifact others read. So a snippet is read only from a regular ``.py`` file
# whose real path (symbolic links resolved) lies under one of the roots: the working
# directory (the checked project; report paths are relative to it) and the target's
# own directory. Never /proc, /sys or /dev, never a FIFO or device (opened
# non-blocking, checked to be a regular file), never a file over
# :data:`MAX_FILE_BYTES`; each line is cut at :data:`MAX_LINE_CHARS`. What cannot
# be read under these rules is simply not captured: the page says so.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from leakscope.results import Finding, Report, Snippet, Source

#: lines shown before and after a snippet's line
CONTEXT_LINES = 3
#: a source file larger than this is not read
MAX_FILE_BYTES = 4 * 1024 * 1024
#: a longer line is cut (and ends with an ellipsis)
MAX_LINE_CHARS = 400
#: never read below these, whatever the roots
_NEVER = ("/proc", "/sys", "/dev")


def read_snippets(report: Report, roots: Iterable[str | os.PathLike[str]]) -> Report:
    """``report`` with every finding's ``source`` and ``stored_at`` lines captured (NOTE [Snippets read only the checked project])."""
    allowed = _roots(roots)
    cache: dict[str, list[str] | None] = {}
    results = []
    changed = False
    for result in report.results:
        findings = tuple(_with_snippets(f, allowed, cache) for f in result.findings)
        if findings != result.findings:
            changed = True
            result = dataclasses.replace(result, findings=findings)
        results.append(result)
    return dataclasses.replace(report, results=tuple(results)) if changed else report


def snippet_for(finding: Finding, source: Source) -> Snippet | None:
    """The captured snippet of ``source`` (one of ``finding``'s), or None."""
    for snippet in finding.snippets:
        if snippet.file == source.file and snippet.line == source.line:
            return snippet
    return None


def _with_snippets(
    finding: Finding, roots: Sequence[str], cache: dict[str, list[str] | None]
) -> Finding:
    snippets = list(finding.snippets)
    for source in (finding.source, finding.stored_at):
        if source is None or any(s.file == source.file and s.line == source.line for s in snippets):
            continue
        snippet = _snippet(source, roots, cache)
        if snippet is not None:
            snippets.append(snippet)
    return (
        finding
        if len(snippets) == len(finding.snippets)
        else dataclasses.replace(finding, snippets=tuple(snippets))
    )


def _snippet(
    source: Source, roots: Sequence[str], cache: dict[str, list[str] | None]
) -> Snippet | None:
    if source.file not in cache:
        cache[source.file] = _read_lines(source.file, roots)
    lines = cache[source.file]
    if lines is None or not 1 <= source.line <= len(lines):
        return None
    first = max(1, source.line - CONTEXT_LINES)
    last = min(len(lines), source.line + CONTEXT_LINES)
    shown = tuple(_cut(line) for line in lines[first - 1 : last])
    return Snippet(file=source.file, line=source.line, first_line=first, lines=shown)


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def _roots(roots: Iterable[str | os.PathLike[str]]) -> list[str]:
    out = []
    for root in roots:
        real = os.path.realpath(root)
        if os.path.isdir(real) and real not in out:
            out.append(real)
    return out


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def allowed(file: str, roots: Sequence[str]) -> str | None:
    """The real path of ``file`` when a snippet may be read from it (relative names: to the working directory)."""
    if "\x00" in file or not file.endswith(".py"):
        return None
    real = os.path.realpath(Path.cwd() / file)
    if not real.endswith(".py") or any(_inside(real, never) for never in _NEVER):
        return None
    return real if any(_inside(real, root) for root in roots) else None


def _read_lines(file: str, roots: Sequence[str]) -> list[str] | None:
    real = allowed(file, roots)
    if real is None:
        return None
    try:
        fd = os.open(
            real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        return None
    return data.decode("utf-8", errors="replace").splitlines()


__all__ = [
    "CONTEXT_LINES",
    "MAX_FILE_BYTES",
    "MAX_LINE_CHARS",
    "allowed",
    "read_snippets",
    "snippet_for",
]
