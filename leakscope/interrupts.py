"""How the ``leakscope`` command ends on SIGINT and SIGTERM: exit 130 or 143, nothing of its own left (no torch).

# NOTE [Interrupts at any moment]
# Ctrl-C (SIGINT) or a CI runner's cancel (SIGTERM) may come while leakscope
# imports, starts the zygote, forks or spawns a child, waits on children, walks
# or writes the report. Three rules make each of those end within seconds, with
# the signal's exit status and no process of ours left running:
# - Both signals raise KeyboardInterrupt in the main thread (:func:`install`,
#   called first by the command's ``main``), so every ``with`` and ``finally``
#   on the way out runs: the pool kills each child's process group and the
#   zygote, the atomic writer removes its temporary file. ``main`` then exits
#   128 + the signal number (:func:`exit_code`), never dies of the signal itself.
# - A signal that lands between Python's last check for signals and a blocking
#   ``select`` would otherwise wait for the select's timeout (up to the check's
#   ``--timeout``, 600 s): the C-level handler writes to a wakeup descriptor
#   (:func:`wakeup`) that every wait of the isolated check also selects on.
# - Cleanup is not itself interrupted (:func:`deferred`): a second Ctrl-C while
#   children are being killed is remembered, not raised half-way, and the
#   cleanup's own waits are bounded (seconds), so it cannot make the exit hang.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from types import FrameType

#: the signals the command turns into KeyboardInterrupt, and the exit status of each
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []
_deferring = [0]


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, as the command raises it (NOTE [Interrupts at any moment]).

    A subclass, not KeyboardInterrupt itself: CPython 3.11 marks the process as "died of
    an unhandled KeyboardInterrupt" when exactly ``KeyboardInterrupt`` leaves an
    ``exec`` of a string (``dataclasses`` builds every ``__init__`` that way), even when
    a caller catches it later, and then ends the process with SIGINT (status -2) instead
    of the exit code ``main`` chose. Every ``except KeyboardInterrupt`` still catches it.
    """


def _handler(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if _deferring[0]:  # cleanup in progress: raised when it ends, if nothing else is on its way out
        return
    raise Interrupted


def install() -> dict[int, object]:
    """Turn SIGINT and SIGTERM into KeyboardInterrupt for the command (main thread only); the
    handlers they had, for :func:`restore`."""
    previous: dict[int, object] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    _received.clear()
    _deferring[0] = 0
    for sig in SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            previous[int(sig)] = signal.signal(sig, _handler)
    return previous


def restore(previous: dict[int, object]) -> None:
    """Put back the handlers :func:`install` replaced (a command run inside another program)."""
    for sig, handler in previous.items():
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(sig, handler)  # type: ignore[arg-type]
    if not _handled():
        _deferring[0] = 0


def received() -> bool:
    """Whether SIGINT or SIGTERM came since :func:`install`."""
    return bool(_received)


def exit_code() -> int:
    """128 + the first signal received (130 for SIGINT, 143 for SIGTERM); 130 when none was."""
    return 128 + (_received[0] if _received else int(signal.SIGINT))


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run a bounded cleanup without being interrupted half-way; a signal that came meanwhile
    is raised after it, unless an exception is already on its way out."""
    before = len(_received)
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1
    if not _deferring[0] and len(_received) > before and _handled():
        raise Interrupted


def ending() -> None:
    """The command is exiting: a signal from now on is remembered, not raised (its exit code is set)."""
    _deferring[0] += 1


#: seconds an interrupted command may take to exit once its own cleanup is done
EXIT_GRACE_S = 10.0


def exit_within(code: int, seconds: float = EXIT_GRACE_S) -> None:
    """Make sure the interrupted ``leakscope`` command ends with ``code`` within ``seconds``.

    Its own cleanup has run (children killed, temporary files gone); what is left is the
    interpreter's shutdown, which after a signal that landed inside a C call (torch's import
    under ``--no-isolate``, an engine's native code) can stall. Only for the command itself:
    a program that called ``main`` in process is never ended from here.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    program = getattr(spec, "name", None) == "leakscope.__main__" or os.path.basename(
        str(getattr(main, "__file__", ""))
    ) in ("leakscope", "leakscope.exe")
    if not program:
        return

    def end() -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()


def _handled() -> bool:
    """Whether our handler is installed for a signal we received (else the signal was someone else's)."""
    return any(signal.getsignal(sig) is _handler for sig in SIGNALS)


@contextlib.contextmanager
def wakeup() -> Iterator[int | None]:
    """A descriptor that becomes readable when a signal arrives, for a ``select`` to wait on too.

    None where it cannot be had (not the main thread, no ``socketpair``): the caller waits
    as before. The previous wakeup descriptor is restored after.
    """
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    try:
        reader, writer = socket.socketpair()
    except OSError:
        yield None
        return
    reader.setblocking(False)
    writer.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):
        reader.close()
        writer.close()
        yield None
        return
    try:
        yield reader.fileno()
    finally:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()


def drain(fd: int) -> None:
    """Empty the wakeup descriptor (what it carries is only a wake-up; Python raises the signal)."""
    with contextlib.suppress(BlockingIOError, InterruptedError, OSError):
        while os.read(fd, 4096):
            pass


__all__ = [
    "SIGNALS",
    "Interrupted",
    "deferred",
    "drain",
    "ending",
    "exit_code",
    "install",
    "received",
    "restore",
    "wakeup",
]
