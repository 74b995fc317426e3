"""Every process of the job: activation through the environment, what each one records, one merged report.

# NOTE [Activation at start-up]
# torchrun, multiprocessing (spawn, forkserver) and Ray start new Python
# interpreters that the job process's patches never reach. ``leakscope watch``
# puts a directory holding a ``sitecustomize.py`` at the front of
# ``PYTHONPATH`` and its options in ``LEAKSCOPE_WATCH``; every interpreter of
# the job imports that ``sitecustomize`` at start-up (``site`` does, unless
# ``-S`` or ``-I``), which starts a watch in that process (then runs the
# ``sitecustomize`` it shadows, if there is one: NOTE [The sitecustomize it
# shadows]). A process that made watched calls writes its report to
# ``LEAKSCOPE_WATCH_DIR`` when it has looked for the last time (and at exit
# otherwise); ``leakscope watch`` reads them all and merges them, naming each
# process. Other processes write nothing. Where the environment does not travel
# (a remote Ray cluster), Ray's ``worker_process_setup_hook`` calls
# :func:`ray_setup_hook` instead (docs/watch.md).
#
# NOTE [A process that ends before its report]
# A process writes its report after its last look: at the call after its last
# watched one, or at exit. It may never get there: the job calls ``os._exit``,
# a signal or a crash in C ends it, or (a Ray actor) ``ray.shutdown()`` tears
# the local cluster down and ``atexit`` never runs. So from its first watched
# call on, a process keeps ``state-PID.json`` in the report directory up to
# date: its label, the phase it is in (``in watched call #1``, ``looking for
# held graphs before watched call #2``), and the report of the looks made so
# far, rewritten as each phase starts (the report only when a look was added).
# It removes the file once its report is written. ``leakscope watch`` waits for
# the report of every process that has a state file and is still alive (up to
# ``CHILD_WAIT_S``), and reports each one that ended without one: the looks it
# had made, and an error that names the phase it was in. The job's own process
# is watched the same way by its parent (:mod:`leakscope.live.job`).
#
# The report directory is made by ``leakscope watch`` for one run (``mkdtemp``:
# a new name, readable by this user only) and removed when the run ends, however
# it ends: nothing in it is ever from another run.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from leakscope.live.session import Watch, WatchOptions
from leakscope.phase import listening
from leakscope.results import Report, WatchSummary
from leakscope.serialize import from_data, to_data

ENV_OPTIONS = "LEAKSCOPE_WATCH"
ENV_DIR = "LEAKSCOPE_WATCH_DIR"
ENV_DRIVER = "LEAKSCOPE_WATCH_DRIVER"
SITE_DIR = str(Path(__file__).resolve().parent / "_site")
#: how long ``leakscope watch`` waits for the report of a child that made watched calls and is still alive
CHILD_WAIT_S = 30.0

_active: Watch | None = None  # this process's watch when activated from the environment
_progress: Progress | None = None
_listening: contextlib.ExitStack | None = None


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
def children_watched(options: WatchOptions, report_dir: str) -> Iterator[None]:
    """The environment that makes every Python process the job starts watch itself and report to ``report_dir``."""
    saved = {k: os.environ.get(k) for k in (ENV_OPTIONS, ENV_DIR, ENV_DRIVER, "PYTHONPATH")}
    os.environ[ENV_OPTIONS] = options.to_json()
    os.environ[ENV_DIR] = report_dir
    os.environ[ENV_DRIVER] = str(os.getpid())
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = SITE_DIR + (os.pathsep + old if old else "")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Progress:
    """This process's phase and the report of its looks so far, kept in ``state-PID.json``
    (NOTE [A process that ends before its report]).

    A :mod:`leakscope.phase` listener: each phase reported rewrites the file.
    Nothing is written before :meth:`begin` (a process that never makes a
    watched call leaves no trace), nor after :meth:`end`.
    """

    def __init__(self, watch: Watch, directory: str, *, begun: bool = False) -> None:
        self.watch = watch
        self.directory = directory
        self.label = ""
        self.phase = "starting"
        self.begun = begun
        self.ended = False
        self._seen = (0, 0)
        self._report: object = None
        self._complete = False
        self._lock = threading.Lock()
        #: this process is a forked copy of the watched one (NOTE [A forked worker])
        self.forked = False
        #: the watched calls the copy inherited: only calls of its own make it report
        self.calls_at_fork = 0

    @property
    def path(self) -> Path:
        return Path(self.directory, f"state-{os.getpid()}.json")

    def begin(self) -> None:
        """From now on the state file is kept (the first watched call)."""
        self.begun = True
        self.label = self.label or process_label()
        self._save()

    def __call__(self, fields: Mapping[str, str]) -> None:
        text = fields.get("phase")
        if text is None:
            return
        self.phase = text
        if self.forked and not self.begun and self.own_calls():
            self.begun = True  # a forked copy's first call of its own (NOTE [A forked worker])
        if self.begun:
            self._save()

    def own_calls(self) -> bool:
        """Whether this process made watched calls itself (not only inherited them in a fork)."""
        return len(self.watch.observer.calls) > self.calls_at_fork

    def complete(self, report: Report) -> None:
        """The watch is done and its report made (the job may still run on)."""
        with self._lock:
            self._report, self._complete = to_data(report), True
        if self.begun:
            self._save()

    def _save(self) -> None:
        if self.ended or not self.directory:
            return

        with self._lock:
            observer = self.watch.observer
            seen = (len(observer.looks), len(observer.calls))
            if not self._complete and seen != self._seen:
                self._seen = seen
                self._report = to_data(self.watch.partial_report()) if seen[0] else None
            state = {
                "label": self.label or process_label(),
                "phase": self.phase,
                "report": self._report,
                "complete": self._complete,
            }
            write_json(self.path, state)

    def end(self) -> None:
        """The process's report is written: its state is no longer news."""
        self.ended = True
        with contextlib.suppress(OSError):
            self.path.unlink()


def activate() -> None:
    """Start watching in this process from ``LEAKSCOPE_WATCH`` (called by the ``sitecustomize``)."""
    global _active, _progress, _listening
    text = os.environ.get(ENV_OPTIONS)
    # The job's process (ENV_DRIVER) sets the environment after its own start-up, so it is never
    # here: a process that starts with its pid is the job re-executed (os.execv), and watches
    # itself like any other (NOTE [A job that re-executes itself] in leakscope/live/job.py).
    if not text or _active is not None:
        return

    # In a child the job's process decides when the job ends: detach after the report.
    watch = Watch(WatchOptions.from_json(text), stop_in_this_process=False)
    progress = Progress(watch, os.environ.get(ENV_DIR, ""))
    watch.on_report = _write_own
    watch.observer.on_first_call = progress.begin
    _listening = contextlib.ExitStack()
    _listening.enter_context(listening(progress))  # for the life of the process (until its report)
    watch.start()
    _active, _progress = watch, progress
    follow_forks(watch, progress)
    atexit.register(_at_exit)


# NOTE [A forked worker]
# A job may fork a worker that runs the step (``os.fork``, multiprocessing's
# 'fork' context): the child is a copy of the watched process, patches,
# autograd hooks and watch included, and no ``sitecustomize`` runs in it. So
# the child goes on watching with its copy, as a process of its own: its
# state file is named by its pid (NOTE [A process that ends before its
# report]), and its report, ``report-PID.json``, is written when its watch
# makes one, or when it ends. A copy that makes no watched call of its own (a
# DataLoader worker forked after the parent's calls) keeps no state file and
# writes nothing. A forked child ends by ``os._exit`` (as multiprocessing's
# do, skipping ``atexit``), so in the child only, ``os._exit`` first makes the
# report from the looks so far and a last one (the loop's locals are still
# alive in the frames that called it), then exits with the status it was
# given. Like any child it detaches after its report rather than stop the job
# (the job's process decides when the job ends), and it never writes the
# job's result: the job's process is the parent, which reports the child's
# leak as any other process's.
_following: list[Any] = []  # [watch, progress] of this process while it watches


def follow_forks(watch: object, progress: Progress) -> None:
    """Make a forked copy of this process watch itself and report (NOTE [A forked worker]).

    The fork handler is registered once per process and does nothing once :func:`unfollow` ran."""
    if not _following:
        os.register_at_fork(after_in_child=_forked)
    _following[:] = [watch, progress]


def unfollow() -> None:
    """This process's watch has ended: a later fork is not watched."""
    _following.clear()


def forked_child() -> bool:
    """Whether this process is a forked copy of the watched process (NOTE [A forked worker])."""
    return bool(_following) and _following[1].forked


def _forked() -> None:
    if not _following:
        return
    watch, progress = _following
    progress.forked = True
    progress.label = process_label()
    progress.ended = False
    # A copy made after the parent's calls (a DataLoader worker) reports nothing unless it calls.
    progress.calls_at_fork = len(watch.observer.calls)
    progress.begun = False

    def report_once(report: Report) -> None:
        if not progress.ended and progress.own_calls():
            write_report(report, progress.directory, progress.label)
            progress.end()

    watch.on_report = report_once
    # As in any child: the job's process decides when the job ends, this one detaches after its report.
    watch.observer.options = dataclasses.replace(watch.observer.options, stop=False)
    real_exit = os._exit

    def leakscope_forked_exit(status: int) -> NoReturn:
        os._exit = real_exit
        if not progress.ended and progress.own_calls():
            with contextlib.suppress(BaseException):
                frames = []
                frame: types.FrameType | None = sys._getframe(1)
                while frame is not None:
                    frames.append(frame)
                    frame = frame.f_back
                report_once(watch.stop(frames=frames))
                frames.clear()
        real_exit(status)

    os._exit = leakscope_forked_exit


def ray_setup_hook() -> None:
    """Ray's ``runtime_env={"worker_process_setup_hook": "leakscope.live.processes.ray_setup_hook"}``."""
    activate()


def _write_own(report: Report) -> None:
    global _listening
    watch, progress = _active, _progress
    if watch is None or progress is None or not watch.observer.calls:
        return
    write_report(report, progress.directory, progress.label or process_label())
    progress.end()
    unfollow()
    if _listening is not None:
        _listening.close()
        _listening = None


def _at_exit() -> None:
    global _active
    watch = _active
    if watch is not None:
        with contextlib.suppress(Exception):
            watch.stop()
        _active = None


def write_json(path: Path, data: object) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file); nothing when the directory is gone
    (the run it belonged to has ended)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_report(report: Report, directory: str, label: str) -> None:
    """Write one process's report, ``report-PID.json``."""
    if directory:
        write_json(
            Path(directory, f"report-{os.getpid()}.json"),
            {"label": label, "report": to_data(report)},
        )


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object written by :func:`write_json`; None when missing or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def report_of(data: Mapping[str, object] | None) -> Report | None:
    """The report in a report or state file's data; None when there is none, or it does not load."""
    if data is None or not isinstance(data.get("report"), dict):
        return None
    try:
        return from_data(Report, data["report"])
    except Exception:
        return None


def read_reports(directory: str, *, exclude: Sequence[int] = ()) -> list[tuple[str, Report]]:
    """The reports the processes of the job wrote to ``directory`` (not those of the pids in ``exclude``)."""
    out = []
    for file in sorted(Path(directory).glob("report-*.json")) if os.path.isdir(directory) else []:
        pid = file.name[len("report-") : -len(".json")]
        if pid.isdigit() and int(pid) in exclude:
            continue
        data = read_json(file)
        report = report_of(data)
        if data is not None and report is not None:
            out.append((str(data.get("label", f"pid {pid}")), report))
    return out


def unreported(
    directory: str, *, wait_s: float = 0.0, exclude: Sequence[int] = ()
) -> list[Unreported]:
    """The processes that made watched calls and wrote no report (NOTE [A process that ends before its report]).

    Waits up to ``wait_s`` while any of them is still alive (it may be writing
    at exit); one that has ended without a report never will.
    """
    deadline = time.monotonic() + wait_s
    while True:
        missing = _without_report(directory, exclude)
        if not any(_alive(pid) for pid in missing) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    # Again: a process that wrote its report and ended since the look above is not missing.
    out = []
    for pid in _without_report(directory, exclude):
        data = read_json(Path(directory, f"state-{pid}.json"))
        if data is None:  # it wrote its report and removed the file in between
            continue
        out.append(
            Unreported(
                label=str(data.get("label") or f"pid {pid}"),
                pid=pid,
                alive=_alive(pid),
                phase=str(data.get("phase") or ""),
                report=report_of(data),
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class Unreported:
    """A process that made watched calls and wrote no report (NOTE [A process that ends before its report])."""

    label: str
    pid: int
    #: still running when ``leakscope watch`` gave up waiting
    alive: bool
    #: the phase it was last in (``in watched call #1``)
    phase: str
    #: the report of the looks it made; None before its first look
    report: Report | None


def _without_report(directory: str, exclude: Sequence[int]) -> list[int]:
    states = sorted(Path(directory).glob("state-*.json")) if os.path.isdir(directory) else []
    out = []
    for state in states:
        pid_text = state.name[len("state-") : -len(".json")]
        if (
            pid_text.isdigit()
            and int(pid_text) not in exclude
            and not Path(directory, f"report-{pid_text}.json").exists()
        ):
            out.append(int(pid_text))
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
    from leakscope.harness.distributed import merge_reports

    parts = [(own_label, own)] if own.results or not others else []
    parts += list(others)
    if not parts:
        return own
    labels = [label for label, _ in parts]
    if len(parts) > 1:
        report = merge_reports([r for _, r in parts], labels)
    elif parts[0][1] is not own:
        # One other process did all the watched calls: name it, the job's process did not make them.
        report = dataclasses.replace(
            parts[0][1],
            results=tuple(
                dataclasses.replace(r, target=f"{r.target} @ {labels[0]}")
                for r in parts[0][1].results
            ),
        )
    else:
        report = own
    calls = [
        {**call, "process": label}
        for label, r in parts
        for call in (r.watch.calls if r.watch else ())
    ]
    summary = (
        own.watch
        or next((r.watch for _, r in parts if r.watch is not None), None)
        or WatchSummary()
    )
    return dataclasses.replace(
        report, watch=dataclasses.replace(summary, calls=tuple(calls), processes=tuple(labels))
    )


__all__ = [
    "CHILD_WAIT_S",
    "ENV_DIR",
    "ENV_OPTIONS",
    "SITE_DIR",
    "Progress",
    "Unreported",
    "activate",
    "children_watched",
    "follow_forks",
    "forked_child",
    "unfollow",
    "merged",
    "process_label",
    "ray_setup_hook",
    "read_json",
    "read_reports",
    "report_of",
    "unreported",
    "write_json",
    "write_report",
]
