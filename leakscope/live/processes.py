"""Every process of the job: activation through the environment, one report per process, one merged report.

# NOTE [Activation at start-up]
# torchrun, multiprocessing (spawn, forkserver) and Ray start new Python
# interpreters that the driver's patches never reach. ``leakscope watch`` puts
# a directory holding a ``sitecustomize.py`` at the front of ``PYTHONPATH`` and
# its options in ``LEAKSCOPE_WATCH``; every interpreter of the job imports
# that ``sitecustomize`` at start-up (``site`` does, unless ``-S`` or ``-I``),
# which starts a watch in that process (then runs the ``sitecustomize`` it
# shadows, if there is one). A process that made watched calls writes its
# report to ``LEAKSCOPE_WATCH_DIR`` when it has looked for the last time (and
# at exit otherwise); the driver reads them all and merges them, naming each
# process. Other processes write nothing. Where the environment does not travel
# (a remote Ray cluster), Ray's ``worker_process_setup_hook`` calls
# :func:`ray_setup_hook` instead (docs/watch.md).
#
# NOTE [A process that ends before its report]
# A child writes its report after its last look: at the call after its last
# watched one, or at exit. A Ray actor that made no call after its last
# watched one has neither: ``ray.shutdown()`` tears the local cluster down
# (SIGTERM to the worker, which then exits at once when its raylet is gone)
# and ``atexit`` never runs; a child that does exit cleanly may write after the
# driver's script has returned. So a child announces itself at its first
# watched call (``watching-PID`` in the report directory, its label inside);
# the driver waits for the report of every announced process that is still
# alive (up to ``CHILD_WAIT_S``), and names each one that ended without a
# report, rather than judging the job as if it had never called the step.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from leakscope.results import Report, WatchSummary

ENV_OPTIONS = "LEAKSCOPE_WATCH"
ENV_DIR = "LEAKSCOPE_WATCH_DIR"
ENV_DRIVER = "LEAKSCOPE_WATCH_DRIVER"
SITE_DIR = str(Path(__file__).resolve().parent / "_site")
#: how long the driver waits for the report of a child that made watched calls and is still alive
CHILD_WAIT_S = 30.0

_active: Any = None  # this process's watch when activated from the environment
#: this process's label, taken at its first watched call: at exit Ray has shut down and no longer names the actor
_label: str | None = None


def process_label() -> str:
    """How reports name this process: its rank (torchrun), Ray actor, or pid."""
    for var in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(var)
        if value is not None and value.isdigit():
            return f"rank {value}"
    ray = sys.modules.get("ray")
    # Only in a process where Ray is initialised: asking elsewhere would start a local Ray instance.
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        try:
            name = ray.get_runtime_context().get_actor_name()
        except Exception:
            name = None
        if name:
            return f"actor {name}"
    return f"pid {os.getpid()}"


@contextlib.contextmanager
def children_watched(options: Any) -> Iterator[str]:
    """The environment that makes every Python process the job starts watch itself; yields the report dir."""
    import tempfile

    report_dir = tempfile.mkdtemp(prefix="leakscope-watch-")
    saved = {k: os.environ.get(k) for k in (ENV_OPTIONS, ENV_DIR, ENV_DRIVER, "PYTHONPATH")}
    os.environ[ENV_OPTIONS] = options.to_json()
    os.environ[ENV_DIR] = report_dir
    os.environ[ENV_DRIVER] = str(os.getpid())
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = SITE_DIR + (os.pathsep + old if old else "")
    try:
        yield report_dir
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def activate() -> None:
    """Start watching in this process from ``LEAKSCOPE_WATCH`` (called by the ``sitecustomize``)."""
    global _active
    text = os.environ.get(ENV_OPTIONS)
    if not text or _active is not None or os.environ.get(ENV_DRIVER) == str(os.getpid()):
        return
    import atexit

    from leakscope.live.session import Watch, WatchOptions

    # In a child the driver decides when the job ends: detach after the report.
    watch = Watch(WatchOptions.from_json(text), stop_in_this_process=False)
    watch.on_report = _write_own
    watch.observer.on_first_call = _announce
    watch.start()
    _active = watch
    atexit.register(_at_exit)


def ray_setup_hook() -> None:
    """Ray's ``runtime_env={"worker_process_setup_hook": "leakscope.live.processes.ray_setup_hook"}``."""
    activate()


def _announce() -> None:
    """Tell the driver to expect this process's report (NOTE [A process that ends before its report])."""
    global _label
    _label = process_label()
    directory = os.environ.get(ENV_DIR, "")
    if directory:
        with contextlib.suppress(OSError):
            Path(directory, f"watching-{os.getpid()}").write_text(_label, encoding="utf-8")


def _write_own(report: Report) -> None:
    watch = _active
    if watch is None or not watch.observer.calls:
        return
    write_report(report, os.environ.get(ENV_DIR, ""), _label or process_label())


def _at_exit() -> None:
    global _active
    watch = _active
    if watch is not None:
        with contextlib.suppress(Exception):
            watch.stop()
        _active = None


def write_report(report: Report, directory: str, label: str, name: str | None = None) -> None:
    """Write one process's report (atomically: a reader never sees half a file)."""
    import json

    from leakscope.serialize import to_data

    if not directory:
        return
    path = Path(directory, f"report-{name or os.getpid()}.json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"label": label, "report": to_data(report)}), encoding="utf-8")
    os.replace(tmp, path)


def read_reports(directory: str, *, expect: int = 0, wait_s: float = 0.0) -> list[tuple[str, Report]]:
    """The reports written to ``directory`` (waiting up to ``wait_s`` for ``expect`` of them)."""
    import json

    from leakscope.serialize import from_data

    deadline = time.monotonic() + wait_s
    while True:
        files = sorted(Path(directory).glob("report-*.json")) if os.path.isdir(directory) else []
        if len(files) >= expect or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    out = []
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            out.append((str(data["label"]), from_data(Report, data["report"])))
        except Exception:
            continue
    return out


def unreported(directory: str, *, wait_s: float = 0.0) -> list[tuple[str, int, bool]]:
    """The processes that made watched calls and wrote no report, as (label, pid, still alive).

    Waits up to ``wait_s`` while any of them is still alive (it may be writing
    at exit); one that has ended without a report never will.
    """
    deadline = time.monotonic() + wait_s
    while True:
        missing = _announced_without_report(directory)
        if not any(_alive(pid) for _, pid in missing) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    # Again: a process that wrote its report and ended since the look above is not missing.
    out = []
    for marker, pid in _announced_without_report(directory):
        try:
            label = marker.read_text(encoding="utf-8").strip()
        except OSError:
            label = ""
        out.append((label or f"pid {pid}", pid, _alive(pid)))
    return out


def _announced_without_report(directory: str) -> list[tuple[Path, int]]:
    markers = sorted(Path(directory).glob("watching-*")) if os.path.isdir(directory) else []
    out = []
    for marker in markers:
        pid_text = marker.name.partition("-")[2]
        if pid_text.isdigit() and not Path(directory, f"report-{pid_text}.json").exists():
            out.append((marker, int(pid_text)))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an ended child its parent has not reaped yet is a zombie: ended
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def merged(own: Report, own_label: str, others: Sequence[tuple[str, Report]]) -> Report:
    """This process's report merged with the other processes' (see ``merge_reports``)."""
    import dataclasses

    from leakscope.harness.distributed import merge_reports

    parts = [(own_label, own)] if own.results or not others else []
    parts += list(others)
    if not parts:
        return own
    labels = [label for label, _ in parts]
    if len(parts) > 1:
        report = merge_reports([r for _, r in parts], labels)
    elif parts[0][1] is not own:
        # One other process did all the watched calls: name it, the driver did not make them.
        report = dataclasses.replace(parts[0][1], results=tuple(
            dataclasses.replace(r, target=f"{r.target} @ {labels[0]}") for r in parts[0][1].results
        ))
    else:
        report = own
    calls = [{**call, "process": label} for label, r in parts for call in (r.watch.calls if r.watch else ())]
    summary = own.watch or WatchSummary()
    return dataclasses.replace(
        report, watch=dataclasses.replace(summary, calls=tuple(calls), processes=tuple(labels))
    )


__all__ = [
    "CHILD_WAIT_S",
    "ENV_DIR",
    "ENV_OPTIONS",
    "SITE_DIR",
    "activate",
    "children_watched",
    "merged",
    "process_label",
    "ray_setup_hook",
    "read_reports",
    "unreported",
    "write_report",
]
