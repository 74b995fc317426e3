"""The one writer of a user-visible file: a report, a DOT graph, an emitted test, a fix (no torch).

Every output flag goes through it: ``-o``/``--output`` of every command and format,
``explain --dot``, ``watch --emit-test`` and ``fix --apply``'s edits
(NOTE [Reports are never lost] in ``leakscope/commands/common.py``).

# NOTE [One writer, by what the path is]
# What leakscope does with a path depends on what is there now (``lstat``, never
# following a link), decided once in :func:`kind_of`:
# - nothing, or a regular file: a new file in the same directory, flushed and
#   renamed over the path (:func:`write_atomic`): a reader sees the old file or
#   the new one, never half; a regular file keeps its permissions;
# - a FIFO, a character device (``/dev/null``, a terminal) or a symbolic link to
#   an open descriptor (``/dev/stdout`` is ``/proc/self/fd/1``, whatever that is:
#   a pipe, a terminal, the file the shell redirected to): written through,
#   opened for appending, never created, truncated or replaced. Replacing
#   ``/dev/stdout`` with a regular file (as root on a CI runner) or a FIFO a
#   reader waits on would lose the report and break the machine;
# - any other symbolic link: replaced by the new file, never followed. A link in
#   a shared ``/tmp`` must not make leakscope overwrite the file it points at;
#   the user who wants that file written names it (the link's target) instead;
# - a directory, a socket or a block device: refused, one line, before anything
#   runs (:func:`problem`).
"""

from __future__ import annotations

import contextlib
import enum
import os
import stat
from pathlib import Path

#: a file name to suggest for each flag
_EXAMPLES = {"--dot": "--dot graph.dot", "--emit-test": "--emit-test test_leak.py"}
#: directories whose links name open descriptors or devices, written through
_DESCRIPTOR_ROOTS = ("/proc/", "/dev/")


class Kind(enum.Enum):
    """What the writer does with a path (NOTE [One writer, by what the path is])."""

    #: a new regular file, renamed over whatever regular file or link is there
    REPLACE = "replace"
    #: opened and written as it is (a FIFO, a character device, ``/dev/stdout``)
    THROUGH = "through"
    #: not written: a directory, a socket, a block device
    REFUSED = "refused"


def kind_of(path: Path) -> tuple[Kind, str | None]:
    """How ``path`` is written, and for a refused one why not (one phrase)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return Kind.REPLACE, None
    except OSError as exc:
        return Kind.REFUSED, exc.strerror or str(exc)
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return Kind.REPLACE, None
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return Kind.THROUGH, None
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError as exc:
            return Kind.REFUSED, exc.strerror or str(exc)
        absolute = os.path.join(os.fspath(path.parent), target)
        try:
            followed = os.stat(path)
        except OSError:
            if os.path.normpath(absolute).startswith(_DESCRIPTOR_ROOTS):
                # /dev/stdout with stdout closed: never replace the system's link
                return Kind.REFUSED, "it names a closed descriptor or a missing device"
            return Kind.REPLACE, None  # a dangling link: replaced, its target never created
        if stat.S_ISFIFO(followed.st_mode) or stat.S_ISCHR(followed.st_mode):
            return Kind.THROUGH, None
        if os.path.normpath(absolute).startswith(_DESCRIPTOR_ROOTS) and not stat.S_ISDIR(
            followed.st_mode
        ):
            return Kind.THROUGH, None  # /dev/stdout into a file the shell opened: appended to
        return Kind.REPLACE, None
    if stat.S_ISDIR(mode):
        return Kind.REFUSED, "it is a directory"
    return Kind.REFUSED, "it is a socket" if stat.S_ISSOCK(mode) else "it is a block device"


def problem(path: Path, flag: str = "--output FILE") -> str | None:
    """Why ``path`` cannot be written (one phrase naming the fix), or None: checked before anything runs."""
    kind, why = kind_of(path)
    if kind is Kind.REFUSED:
        if why == "it is a directory":
            example = _EXAMPLES.get(flag.split()[0], "-o report.json")
            return f"{why}; give a file name, e.g. {example}"
        return f"{why}; give a regular file, a FIFO or /dev/stdout as {flag}"
    if kind is Kind.THROUGH:
        if not os.access(path, os.W_OK):
            return f"it is not writable; give another {flag}"
        return None
    try:
        info = path.lstat()
    except OSError:
        info = None
    if (
        info is not None
        and stat.S_ISREG(info.st_mode)
        and (not info.st_mode & 0o222 or not os.access(path, os.W_OK))
    ):
        return f"the file is read-only; make it writable or give another {flag}"
    directory = path.parent
    if not directory.is_dir():
        return f"the directory {directory} does not exist; create it first"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"the directory {directory} is not writable; give another {flag}"
    return None


def write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` by the rules of NOTE [One writer, by what the path is].

    Raises :class:`OSError` when the write fails (the caller says so in one line) and
    :class:`IsADirectoryError` for a path the writer refuses.
    """
    kind, why = kind_of(path)
    if kind is Kind.REFUSED:
        raise IsADirectoryError(0, why or "not a file leakscope writes", os.fspath(path))
    if kind is Kind.THROUGH:
        _write_through(path, data)
    else:
        write_atomic(path, data)


def _write_through(path: Path, data: bytes) -> None:
    """Append ``data`` to what ``path`` names now, creating and replacing nothing."""
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)  # no O_CREAT: if it went away since, this fails, it creates nothing
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode) or stat.S_ISBLK(info.st_mode):  # swapped since kind_of
            raise IsADirectoryError(0, "not a file leakscope writes", os.fspath(path))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a new file in its directory and a rename: a reader (or a crash)
    sees the old file or the new one, never half of it. A link at ``path`` is replaced, not followed.

    The temporary file is created exclusively (never an existing file or a link someone
    put there) with the permissions a new file gets (0o666 less the umask, applied by the
    kernel), or the permissions of the regular file it replaces.
    """
    import secrets

    try:
        info = path.lstat()
        keep = stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None
    except OSError:
        keep = None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            if keep is not None:
                os.fchmod(f.fileno(), keep)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["Kind", "kind_of", "problem", "write", "write_atomic"]
