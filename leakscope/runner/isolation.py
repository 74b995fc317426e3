"""Check each target in its own child process, so one bad target cannot harm the others.

# NOTE [Why a process per target]
# leakscope imports and runs user code. An engine can print to stdout, call
# ``os._exit``, crash in native code, hang, push a saved-tensor hook and never
# pop it, change the default dtype, or leave a process group up. In one process
# any of these would kill the run, corrupt the JSON report, or change the
# verdict of the next target. A child process per target contains all of it:
# the parent never imports torch, points the child's stdout at stderr, kills
# the child's whole process group on timeout, and turns any way the child can
# die into an ``error`` result naming the cause. The cost is one interpreter
# start plus one ``import torch`` per target, which an in-process check pays
# once anyway (numbers in docs/isolation.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from leakscope import __version__
from leakscope.errors import UsageError
from leakscope.options import CheckOptions
from leakscope.phase import listened, report
from leakscope.results import Mode, Report, TargetResult, Verdict

_FIX_EXIT = "an engine must return (loss, output) and never exit the process"


def check_isolated(
    targets: Sequence[Any], options: CheckOptions, *, on_result: Callable[[TargetResult], None] | None = None
) -> Report:
    """Like :func:`leakscope.api.check`, each target in a fresh child process.

    Targets must be strings, or importable objects (named by module and
    qualified name); ``options.timeout`` bounds each target's process.
    Raises :class:`~leakscope.errors.UsageError` for options the child rejects.
    """
    results: list[TargetResult] = []
    torch_version: str | None = None
    for target in targets:
        name = target_string(target)
        if name is None:
            label = f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', type(target).__name__)}"
            results.extend(
                _error(label, mode, f"{label} is not importable by name, so it cannot be checked in a child "
                       "process; define it at module level, or check it with isolate=False")
                for mode in options.modes
            )
            continue
        child_results, version = run_child(name, options)
        results.extend(child_results)
        for result in child_results:
            if on_result is not None:
                on_result(result)
        torch_version = torch_version or version
    return Report(
        results=tuple(results),
        leakscope_version=__version__,
        torch_version=torch_version or _installed_torch_version(),
        python_version=platform.python_version(),
    )


def target_string(target: Any) -> str | None:
    """``target`` as a ``pkg.mod:Name`` string a child process can resolve, or None."""
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def run_child(target: str, options: CheckOptions) -> tuple[list[TargetResult], str | None]:
    """Check ``target`` in a child process; every way it can fail becomes an error result."""
    from leakscope.serialize import result_from_data, to_data

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="leakscope-") as tmp:
        request_path = Path(tmp, "request.json")
        results_path = Path(tmp, "results.jsonl")
        request = {"target": target, "options": to_data(options), "results": str(results_path)}
        request_path.write_text(json.dumps(request), encoding="utf-8")
        report("starting a check process", target=target)
        with _relaying_phases(results_path, target):
            returncode, timed_out = _run([sys.executable, "-m", "leakscope.runner.worker", str(request_path)], options.timeout)
        records = _read_records(results_path)
    seconds = time.perf_counter() - started
    version = next((r["torch_version"] for r in records if "torch_version" in r), None)
    usage = next((r["usage_error"] for r in records if "usage_error" in r), None)
    if usage is not None:  # bad options (``--device cuda`` without a GPU): exit 2, as in process
        raise UsageError(usage)
    results = [result_from_data(r["result"]) for r in records if "result" in r]
    fatal = next((r for r in records if "fatal" in r), None)
    done = {r.mode for r in results}
    missing = [mode for mode in options.modes if mode not in done]
    if missing:
        if timed_out:
            message = (
                f"timed out after {options.timeout:g} s and was killed: the engine's build or step did not "
                "return; fix the hang (a blocking call, a wait on other ranks, an endless loop) or raise --timeout"
            )
        elif fatal is not None:
            message = f"leakscope's check process failed: {fatal['fatal']}; please report it with --debug output"
        else:
            message = _death_message(returncode)
        detail = fatal.get("traceback") if fatal is not None else None
        results.extend(_error(target, mode, message, detail, seconds) for mode in missing)
    results.sort(key=lambda r: options.modes.index(r.mode) if r.mode in options.modes else len(options.modes))
    return results, version


def _run(argv: list[str], timeout: float | None) -> tuple[int, bool]:
    """Run the child in its own process group; kill the whole group when done or late."""
    # stdout=2: whatever the child writes to its stdout goes to our stderr,
    # never into the report (the child also redirects it itself).
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=_stderr_fd(), start_new_session=True)
    timed_out = False
    try:
        try:
            proc.wait(timeout=timeout if timeout else None)
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        # Also ends anything the engine spawned (data workers, servers).
        _kill_group(proc.pid)
        proc.wait()
    return proc.returncode, timed_out


# NOTE [Phases from the child]
# The child appends each phase it enters (leakscope.phase.report) to the
# records file as {"phase": {...}}, next to its results. While it runs, a
# thread here reads the new lines every 0.1 s and reports them in this process
# under the parent's name for the target, so the CLI's status line shows the
# phase even when the child hangs in it: the last one read is where it hangs.
# Nothing is read when nothing listens.
@contextlib.contextmanager
def _relaying_phases(path: Path, target: str) -> Iterator[None]:
    if not listened():
        yield
        return
    stop = threading.Event()

    def pump() -> None:
        offset = 0
        while True:
            stopping = stop.wait(0.1)
            offset = _relay(path, offset, target)
            if stopping:
                return

    thread = threading.Thread(target=pump, name="leakscope-phases", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _relay(path: Path, offset: int, target: str) -> int:
    """Report the phases in the complete lines after ``offset``; the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        event = record.get("phase") if isinstance(record, dict) else None
        if isinstance(event, dict):
            fields = {key: str(event[key]) for key in ("mode", "phase", "step") if key in event}
            report(fields.get("phase"), step=fields.get("step"), mode=fields.get("mode"), target=target)
    return offset + end


def _stderr_fd() -> int:
    try:
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else subprocess.DEVNULL
    except (OSError, ValueError):
        return subprocess.DEVNULL


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_records(path: Path) -> list[dict[str, Any]]:
    """The child's JSON lines; a line cut short by a crash is dropped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _death_message(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        cause = "a crash in native code (an extension or torch)" if name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT") else "a kill from outside (out of memory?)"
        return (
            f"the check process died of {name} before reporting: {cause}; "
            "the Python stack of the crash is on stderr; reproduce it without leakscope and fix it there"
        )
    return (
        f"the check process exited with status {returncode} before reporting: the engine called "
        f"os._exit({returncode}) or exited the process another way; {_FIX_EXIT}"
    )


def _error(target: str, mode: Mode, message: str, detail: str | None = None, seconds: float = 0.0) -> TargetResult:
    return TargetResult(
        target=target, mode=mode, verdict=Verdict.ERROR, error=message, traceback=detail, seconds=round(seconds, 3)
    )


def _installed_torch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"
