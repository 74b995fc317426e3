"""Write a file whole or not at all: a temporary file beside it, then a rename (no torch).

Shared by every writer of a user-visible file: a report (``--output``,
NOTE [Reports are never lost] in ``leakscope/commands/common.py``) and a fix
written into the user's code (``leakscope fix --apply``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a new file in its directory and a rename: a reader (or a crash)
    sees the old file or the new one, never half of it.

    The temporary file is created exclusively (never an existing file or a link someone
    put there) with the permissions a new file gets (0o666 less the umask, applied by the
    kernel), or the permissions of the regular file it replaces.
    """
    import secrets
    import stat

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


__all__ = ["write_atomic"]
