"""``leakscope watch SCRIPT``: run a job under a watch, in a process of its own, and return one report.

The CLI only parses options and renders what :func:`watch_job` returns.

# NOTE [The job in a process of its own]
# The job is arbitrary code: it may call ``os._exit`` in its step, die of a
# signal or crash in C. Run in the process that must print the report, any of
# these would end the report with it (empty stdout, the job's own exit status).
# So ``leakscope watch`` starts the job in a child interpreter (the job's
# process: same interpreter flags, ``sys.path``, working directory and
# environment; its stdout goes to stderr, so stdout carries only the report)
# and waits for it. The job's process watches itself and writes what it has as
# it goes (NOTE [A process that ends before its report]); at its end it writes
# ``job-result.json``: the report, the job's exit status, how it ended. When the
# process ends without that file, ``leakscope watch`` makes the report itself
# from the looks the job's process had recorded and an error naming how it
# ended and the phase it was in (exit 3). The job's process dies with its
# parent (``PR_SET_PDEATHSIG``), as it did when both were one process, and the
# report directory is removed however the run ends (SIGTERM is forwarded to the
# job, then the report is made).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import faulthandler
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from leakscope import __version__, phase
from leakscope.errors import ExitCode, LeakscopeError, TargetError, UsageError
from leakscope.live import launcher
from leakscope.live.launcher import require_script
from leakscope.live.observer import stack_of
from leakscope.live.processes import (
    CHILD_WAIT_S,
    Progress,
    children_watched,
    follow_forks,
    forked_child,
    merged,
    process_label,
    read_json,
    read_reports,
    report_of,
    unfollow,
    unreported,
    write_json,
    write_report,
)
from leakscope.live.session import Watch, WatchOptions
from leakscope.probe.stack import deep_stack_for_children, keep_thread_stacks
from leakscope.results import Mode, Report, TargetResult, Verdict, WatchSummary
from leakscope.serialize import to_data

#: seconds a job past its ``--timeout`` has to stop once interrupted
STUCK_GRACE_S = 10.0
#: seconds after that (and after a forwarded SIGTERM) before the job's process is killed
KILL_GRACE_S = 20.0
#: what the job's process runs (``python -c``: the interpreter's own flags stay the job's)
_JOB_MAIN = "from leakscope.live.job import job_process; job_process()"
_CONFIG = "job.json"
_RESULT = "job-result.json"


@dataclasses.dataclass(frozen=True)
class JobResult:
    report: Report
    #: the job's own exit status (0 when it ran to its end or was stopped by the watch)
    job_exit_code: int
    #: False on every rank but 0 under torchrun: that rank prints nothing
    reporting: bool = True


def watch_job(
    target: str,
    argv: Sequence[str],
    options: WatchOptions,
    *,
    as_module: bool = False,
    timeout: float | None = None,
) -> JobResult:
    """Run ``target`` as ``__main__`` under a watch in a process of its own; merge the reports of every process
    of the job (and under torchrun, of every rank)."""
    from leakscope.harness.distributed import launcher_env

    options.specs()  # usage errors raise here, before the job starts
    if not as_module:
        require_script(target)
    ranks = launcher_env()
    exchange = None
    if ranks is not None and ranks[1] > 1:
        from leakscope.live.ranks import RankExchange

        exchange = RankExchange.join(
            *ranks
        )  # before the job: rank 0 may host the store its env:// joins
    with _Stopping() as stopping:
        try:
            # A process of the job still writing into it must not turn its removal into an error.
            with tempfile.TemporaryDirectory(
                prefix="leakscope-watch-", ignore_cleanup_errors=True
            ) as directory:
                report, label, code = _supervise(
                    target,
                    argv,
                    options,
                    as_module,
                    timeout,
                    directory,
                    exchange.job_env() if exchange else {},
                    stopping,
                )
        except LeakscopeError as exc:
            if exchange is not None:
                exchange.abort(target, exc.message)
            raise
        except BaseException:
            if exchange is not None:
                exchange.close()
            raise
        if exchange is None:
            return JobResult(report, code)
        if exchange.rank != 0:
            exchange.send(label, report, stopping.is_set)
            return JobResult(report, code, reporting=False)
        return JobResult(exchange.gather(report, label, target, stopping.is_set), code)


def _supervise(
    target: str,
    argv: Sequence[str],
    options: WatchOptions,
    as_module: bool,
    timeout: float | None,
    directory: str,
    env: dict[str, str],
    stopping: _Stopping,
) -> tuple[Report, str, int]:
    """Run the job's process, wait for it and for the processes it started; the merged report, its label,
    the job's exit status."""
    config = {
        "target": target,
        "argv": list(argv),
        "as_module": as_module,
        "options": options.to_json(),
        "timeout": timeout,
        "launched": time.time(),
        "path": list(sys.path),
        "parent": os.getpid(),
    }

    launched = time.monotonic()
    try:
        # NOTE [Freeing a walked chain]: room to free a deep graph the looks walked.
        with deep_stack_for_children() as thread_stack:
            config["thread_stack"] = thread_stack
            write_json(Path(directory, _CONFIG), config)
            job = subprocess.Popen(
                [
                    sys.executable,
                    *_interpreter_flags(),
                    "-c",
                    _JOB_MAIN,
                    str(Path(directory, _CONFIG)),
                ],
                stdout=_stderr_fd(),
                env={**os.environ, **env},
            )
    except OSError as exc:
        raise TargetError(f"cannot start the job's process ({sys.executable}): {exc}") from None
    stopping.job = job
    killed = _wait(
        job, launched + timeout + STUCK_GRACE_S + KILL_GRACE_S if timeout else None, stopping
    )
    result = read_json(Path(directory, _RESULT))
    if result is not None and isinstance(result.get("error"), dict):
        _raise(result["error"])
    own, label, code, stopped = _job_report(
        result, job, killed, target, options, timeout, directory
    )
    label = label or _job_label(job.pid)
    # NOTE [A process that ends before its report]: the processes the job started
    missing = unreported(
        directory, wait_s=0.0 if stopping.is_set() else CHILD_WAIT_S, exclude=[job.pid]
    )
    others = read_reports(directory, exclude=[job.pid])
    others += [(m.label, m.report) for m in missing if m.report is not None]
    if (others or missing) and not (own.watch and own.watch.calls):
        # The children ran the step, the job's process did not: only the job's own failure is news.
        own = dataclasses.replace(own, results=tuple(r for r in own.results if r.target == target))
    report = merged(own, label, others)
    if missing:
        report = dataclasses.replace(
            report, results=(*report.results, *_unreported_results(options, missing))
        )
    return report, label, 0 if stopped else code


def _job_label(pid: int) -> str:
    """The job's process as reports name it: its rank, else its pid."""
    label = process_label()
    return f"pid {pid}" if label.startswith("pid ") else label


def _raise(error: dict[str, Any]) -> None:
    """The job's process could not start the job (a usage or target error): the same error here."""
    message = str(error.get("message", "the job's process failed"))
    exc: LeakscopeError = (
        UsageError(message)
        if error.get("exit_code") == int(ExitCode.USAGE)
        else TargetError(message)
    )
    exc.detail = error.get("detail")
    raise exc


def _job_report(
    result: dict[str, object] | None,
    job: subprocess.Popen[bytes],
    killed: bool,
    target: str,
    options: WatchOptions,
    timeout: float | None,
    directory: str,
) -> tuple[Report, str, int, bool]:
    """The job process's report, label, exit status and whether the watch stopped it: from its result file, or,
    when it ended without one, from its state file and how it ended (NOTE [The job in a process of its own])."""
    returncode = job.returncode if job.returncode is not None else -signal.SIGKILL
    report = report_of(result)
    if result is not None and report is not None:
        code = result.get("job_exit_code")
        return (
            report,
            str(result.get("label", "")),
            code if isinstance(code, int) else 1,
            result.get("stopped") is True,
        )
    code = returncode if returncode >= 0 else 128 - returncode
    # NOTE [A job that re-executes itself]
    # A job may replace its process with a new image (``os.execv`` of its own
    # script, as launchers that fix their environment do): the process keeps
    # its pid, and the new interpreter starts watching itself from the
    # environment like any process the job starts (NOTE [Activation at
    # start-up]), so its report is ``report-PID.json`` under the job's own pid,
    # and no result file is written. That report is the job's; its exit status
    # is the process's real one, and a non-zero one adds an error row, as a
    # job's ``sys.exit(N)`` does.
    execd = read_json(Path(directory, f"report-{job.pid}.json"))
    replaced = report_of(execd)
    if execd is not None and replaced is not None and not killed:
        if returncode != 0:  # as a job that calls sys.exit(N) or raises: an error row (exit 3)
            ended = (
                f"died of {_signal_name(-returncode)}"
                if returncode < 0
                else f"ended with exit status {returncode}"
            )
            failed = TargetResult(
                target=target,
                mode=Mode.TRAIN,
                verdict=Verdict.ERROR,
                error=f"the job (re-executed in its process: os.exec*) {ended} after its watched calls;"
                " its stderr says why",
            )
            replaced = dataclasses.replace(replaced, results=(*replaced.results, failed))
        return replaced, str(execd.get("label", "")), code, False
    state = read_json(Path(directory, f"state-{job.pid}.json")) or {}
    partial = report_of(state)
    phase = str(state.get("phase") or "starting")
    label = str(state.get("label") or "")
    if partial is not None and state.get("complete") and returncode == 0:
        return partial, label, 0, False  # the watch was done; then the job ended the process itself
    covers = "; the report covers the looks before" if partial is not None else ""
    if killed:
        error = (
            f"the job ran past --timeout {timeout:g}s while {phase} and did not stop when interrupted, nor "
            f"{STUCK_GRACE_S + KILL_GRACE_S:g}s later: its process was killed{covers}"
        )
    elif returncode < 0:
        name = _signal_name(-returncode)
        cause = (
            "a crash in native code (an extension or torch; its Python stack is on stderr)"
            if name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")
            else "a signal from outside (out of memory?)"
        )
        error = f"the job's process died of {name} while {phase}: {cause}{covers}"
    else:
        error = (
            f"the job's process ended with exit status {returncode} while {phase}, before leakscope wrote its report "
            f"(os._exit({returncode}), or an exit from C){covers}"
        )
    results = (
        *(partial.results if partial is not None else ()),
        TargetResult(target=target, mode=Mode.TRAIN, verdict=Verdict.ERROR, error=error),
    )
    if partial is None:
        partial = Report(
            results=(),
            leakscope_version=_version(),
            torch_version=_installed_torch(),
            python_version=_python_version(),
            watch=WatchSummary(
                methods=options.methods, skip=options.skip, micro_batches=options.micro_batches
            ),
        )
    return dataclasses.replace(partial, results=results), label, code, False


def _unreported_results(options: WatchOptions, missing: Sequence[Any]) -> list[TargetResult]:
    """One error per process that made watched calls and wrote no report (NOTE [A process that ends before its report])."""
    methods = ", ".join(options.methods) or "the built-in step methods"
    fix = (
        "let it make one call more than --skip + --micro-batches, or end it gracefully "
        "(Ray: ray.actor.exit_actor()) before the job ends"
    )
    return [
        TargetResult(
            target=f"{methods} @ {m.label}",
            mode=Mode.TRAIN,
            verdict=Verdict.ERROR,
            error=(
                f"{m.label} (pid {m.pid}) made watched calls and was still running {CHILD_WAIT_S:g}s after the job "
                f"ended, without a report (last {m.phase}): its last look is at its call after the last watched one, "
                f"or at its exit; {fix}"
                if m.alive
                else f"{m.label} (pid {m.pid}) made watched calls but ended {m.phase and f'while {m.phase}, '}before its "
                f"last look, without running atexit (as ray.shutdown() ends actors), so it wrote no report; {fix}"
            ),
        )
        for m in missing
    ]


# -- waiting for the job's process -----------------------------------------------------------


class _Stopping:
    """SIGTERM (forwarded to the job's process) and SIGINT (the terminal sends it to the job's process too,
    one process group) while ``leakscope watch`` waits: stop waiting, make the report."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.job: subprocess.Popen[bytes] | None = None
        self.forwarded = False
        self._saved: dict[int, Any] = {}

    def is_set(self) -> bool:
        return self._event.is_set()

    def _on_signal(self, signum: int, frame: object) -> None:
        self._event.set()
        job = self.job
        if signum != signal.SIGINT and job is not None and job.poll() is None:
            self.forwarded = True
            with contextlib.suppress(OSError):
                job.send_signal(signum)

    def __enter__(self) -> _Stopping:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                self._saved[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)


def _wait(job: subprocess.Popen[bytes], deadline: float | None, stopping: _Stopping) -> bool:
    """Wait for the job's process; kill it past ``deadline`` or KILL_GRACE_S after a forwarded signal.
    True when it was killed here."""
    stopped_at: float | None = None
    while True:
        try:
            job.wait(timeout=0.2)
            return False
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if stopping.forwarded and stopped_at is None:
            stopped_at = now
        if (deadline is not None and now > deadline) or (
            stopped_at is not None and now - stopped_at > KILL_GRACE_S
        ):
            with contextlib.suppress(OSError):
                job.kill()
            job.wait()
            return deadline is not None and now > deadline


def _interpreter_flags() -> list[str]:
    """This interpreter's flags (``-X dev``, ``-W``, ``-O``...), for the job's process."""
    flags: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    return flags


def _stderr_fd() -> int:
    try:
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else subprocess.DEVNULL
    except (OSError, ValueError):
        return subprocess.DEVNULL


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _version() -> str:
    return __version__


def _python_version() -> str:
    return platform.python_version()


def _installed_torch() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


# -- the job's process -----------------------------------------------------------------------


def job_process() -> None:
    """The job's process (``python -c``, started by :func:`watch_job`): run the job under a watch, write the result."""
    config_path = Path(sys.argv[1])
    directory = str(config_path.parent)
    config = read_json(config_path)
    if config is None:
        sys.exit("leakscope: the job's process found no job to run")
    _die_with_parent(int(config["parent"]))

    if isinstance(config.get("thread_stack"), int):
        keep_thread_stacks(int(config["thread_stack"]))  # NOTE [Freeing a walked chain]

    faulthandler.enable()  # a crash in C prints the Python stack on stderr
    sys.path[:] = [str(p) for p in config["path"]]
    timeout = float(config["timeout"]) if config.get("timeout") else None
    # The clock counts from the launch, in leakscope watch's process.
    remaining = (
        None if timeout is None else max(0.001, timeout - (time.time() - float(config["launched"])))
    )
    try:
        stopped = _run_here(
            str(config["target"]),
            [str(a) for a in config["argv"]],
            WatchOptions.from_json(str(config["options"])),
            as_module=bool(config["as_module"]),
            timeout=timeout,
            remaining=remaining,
            directory=directory,
        )
        if stopped:
            _end_stopped_job()
    except LeakscopeError as exc:
        write_json(
            Path(directory, _RESULT),
            {
                "error": {
                    "message": exc.message,
                    "exit_code": int(exc.exit_code),
                    "detail": exc.detail,
                },
            },
        )


def _end_stopped_job() -> None:
    """End the job's process once the watch stopped the job and its report is written, whatever
    threads it left running.

    # NOTE [A stopped job's threads]
    # The watch stops a job by raising in its main thread (WatchStop). A thread
    # the job started that is not a daemon (a heartbeat, a data prefetcher, a
    # logger's flusher) would then keep the process alive forever: Python joins
    # every such thread before it exits, and nothing tells them the loop is
    # gone. The job was stopped on purpose, so its exit handlers run (as at any
    # end) and the process ends without joining them. A job that ends by itself
    # ends as Python ends it: it waits for its threads, as it would unwatched.
    """
    if not any(
        t.is_alive() and not t.daemon and t is not threading.main_thread()
        for t in threading.enumerate()
    ):
        return
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _die_with_parent(parent: int) -> None:
    """Linux: this process gets SIGKILL when ``leakscope watch`` ends (as when both were one process)."""
    if not sys.platform.startswith("linux"):
        return

    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it ended before the line above
            os._exit(1)


def _run_here(
    target: str,
    argv: Sequence[str],
    options: WatchOptions,
    *,
    as_module: bool,
    timeout: float | None,
    remaining: float | None,
    directory: str,
) -> bool:
    """Run the job in this process under a watch; write ``job-result.json``; whether the watch
    stopped the job."""
    session = Watch(options)  # usage errors raise here, before the job starts
    session.job_name = target
    progress = Progress(
        session, directory, begun=True
    )  # the job's process keeps its state from the start
    session.on_report = progress.complete

    def finish(report: Report, code: int, stopped: bool) -> None:
        if forked_child():  # NOTE [A forked worker]: a copy that ran off the script's end
            if not progress.ended and progress.own_calls():
                write_report(report, directory, progress.label or process_label())
                progress.end()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)
        unfollow()

        phase.report("writing the report")
        write_json(
            Path(directory, _RESULT),
            {
                "label": process_label(),
                "report": to_data(report),
                "job_exit_code": code,
                "stopped": stopped,
            },
        )
        progress.end()

    def stuck() -> None:
        session.patcher.restore()
        session.job_error = (
            f"the job ran past --timeout {timeout:g}s while {timer.phase} and did not stop when interrupted (blocked "
            "in C code, or its own SIGINT handler); the report covers the calls before"
        )
        # The main thread's stack where it is stuck: the loop's locals are alive there.
        frames = stack_of(sys._current_frames().get(threading.main_thread().ident or 0))
        report = session.stop(frames=frames, look=not timer.phase.startswith("looking"))
        frames.clear()
        finish(report, int(ExitCode.ERROR), False)
        sys.stderr.flush()
        os._exit(int(ExitCode.ERROR))

    timer = _Timeout(remaining, lambda: progress.phase, stuck)
    with children_watched(options, directory), phase.listening(progress):
        session.start()
        follow_forks(session, progress)  # NOTE [A forked worker]
        try:
            with timer:
                outcome = launcher.run(target, argv, as_module=as_module)
        finally:
            session.patcher.restore()
        if timer.fired:
            outcome.error = (
                f"the job ran past --timeout {timeout:g}s while {timer.phase} and was interrupted; "
                "the report covers the calls before"
            )
        if outcome.error is not None:
            session.job_error = outcome.error
            session.job_traceback = outcome.traceback
        # A look the job was interrupted in is not made again (it may be what hangs).
        again = not (outcome.interrupted and progress.phase.startswith("looking"))
        own = session.stop(
            extra_modules=[outcome.module] if outcome.module is not None else [],
            frames=outcome.frames,
            look=again,
        )
        outcome.module = None
        outcome.frames.clear()
        finish(own, outcome.exit_code if not outcome.stopped else 0, outcome.stopped)
    return outcome.stopped


class _Timeout:
    """Interrupt the job's main thread after ``seconds`` (the report is still written).

    # NOTE [A job past its timeout]
    # The job runs in its process's main thread, so ``--timeout`` interrupts it
    # there: a real SIGINT sent to the main thread, which also wakes a blocking
    # call (``time.sleep``, a socket read, a lock), raises KeyboardInterrupt, and
    # the report is made as for any interrupted job, naming the phase the job
    # was in (``in watched call #1``, ``looking for held graphs before watched
    # call #2``). A job that does not stop within STUCK_GRACE_S (blocked where
    # no signal reaches, or a SIGINT handler of its own) gets ``on_stuck`` from
    # the timer thread: the report of the calls made so far, then the process
    # ends. One whose timer thread cannot even run (C code holding the GIL) is
    # killed by ``leakscope watch`` KILL_GRACE_S later and reported from the
    # phase and looks it had recorded.
    """

    def __init__(
        self,
        seconds: float | None,
        phase: Callable[[], str],
        on_stuck: Callable[[], None] | None = None,
    ) -> None:
        self.seconds = seconds
        self.on_stuck = on_stuck
        self.fired = False
        #: the phase the job was in when the time ran out
        self.phase = ""
        self._phase = phase
        self._done = threading.Event()
        self._timer: threading.Thread | None = None

    def _run(self) -> None:
        assert self.seconds
        if self._done.wait(self.seconds):
            return
        self.phase = self._phase()
        self.fired = True
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        if not self._done.wait(STUCK_GRACE_S) and self.on_stuck is not None:
            self.on_stuck()

    def __enter__(self) -> _Timeout:
        if self.seconds:
            self._timer = threading.Thread(
                target=self._run, name="leakscope-watch-timeout", daemon=True
            )
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._timer = None


__all__ = ["JobResult", "job_process", "watch_job"]
