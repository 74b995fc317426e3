"""The one protocol of leakscope's child processes: ``python -m MODULE REQUEST.json``.

An isolated check's worker (:mod:`leakscope.runner.worker`) and a fix's proof
children (:mod:`leakscope.fix.engine`, :mod:`leakscope.fix.script`) run alike:
the parent writes a JSON request naming a results file, starts the child in a
process group of its own with its stdout on the parent's stderr, and reads back
one JSON line per finished piece of work (:func:`read_records`), so whatever
finished before a crash or a timeout is kept. The child side is
:func:`run_child`: file descriptor 1 is pointed at stderr before any user code
runs (C extensions that write to fd 1 included), an exception becomes a
``fatal`` record, and the process ends with ``os._exit`` so atexit handlers and
non-daemon threads the engine left behind cannot keep it alive. Torch-free.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn

from leakscope.phase import listening, report

_FIX_EXIT = "an engine must return (loss, output) and never exit the process"

#: what a child does with a request: write records to ``out`` as it goes
Work = Callable[[dict[str, Any], IO[str]], None]


def write_record(out: IO[str], record: dict[str, object]) -> None:
    """One JSON line, flushed: the parent keeps it even if the child dies next."""
    out.write(json.dumps(record) + "\n")
    out.flush()


def run_child(request_path: str, work: Work, *, first_phase: str | None = None) -> NoReturn:
    """The child's ``main``: read the request, run ``work`` with its stdout on stderr and an
    exception as a record, then ``os._exit``. With ``first_phase`` (reported before ``work``
    starts) every phase is a record too: the parent shows each live (NOTE [Phases from the
    child]); without, nothing listens and a phase costs nothing."""
    os.dup2(2, 1)  # engine prints, even from C, land on stderr
    sys.stdout = sys.stderr
    # A segfault in native code prints the Python stack it happened in.
    faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    if request.get("cwd"):
        os.chdir(request["cwd"])
    status = 0
    with open(request["results"], "a", encoding="utf-8") as out, contextlib.ExitStack() as stack:
        try:
            if first_phase is not None:
                stack.enter_context(listening(lambda e: write_record(out, {"phase": e})))
                report(first_phase)
            work(request, out)
        except BaseException as exc:  # noqa: B036 - the parent turns this line into an error
            write_record(
                out, {"fatal": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            )
            status = 1
    sys.stderr.flush()
    os._exit(status)


def stderr_fd() -> int:
    """The parent's stderr, where a child's stdout goes (DEVNULL when it has none)."""
    try:
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else subprocess.DEVNULL
    except (OSError, ValueError):
        return subprocess.DEVNULL


def read_records(path: Path) -> list[dict[str, Any]]:
    """The child's JSON lines; a line cut short by a crash is dropped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def death_message(returncode: int) -> str:
    """Why a child that exited with ``returncode`` before reporting ended, and what to do."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        cause = (
            "a crash in native code (an extension or torch)"
            if name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")
            else "a kill from outside (out of memory?)"
        )
        return (
            f"the check process died of {name} before reporting: {cause}; "
            "the Python stack of the crash is on stderr; reproduce it without leakscope and fix it there"
        )
    return (
        f"the check process exited with status {returncode} before reporting: the engine called "
        f"os._exit({returncode}) or exited the process another way; {_FIX_EXIT}"
    )


__all__ = ["Work", "death_message", "read_records", "run_child", "stderr_fd", "write_record"]
