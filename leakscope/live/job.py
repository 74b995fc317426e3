"""``leakscope watch SCRIPT``: run a job under a watch, in every process, and return one report.

The CLI only parses options and renders what :func:`watch_job` returns.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Sequence

from leakscope.live.launcher import Outcome
from leakscope.live.processes import CHILD_WAIT_S
from leakscope.live.session import Watch, WatchOptions
from leakscope.results import Mode, Report, TargetResult, Verdict, WatchSummary

#: how long rank 0 waits for the other ranks' reports under torchrun
RANK_WAIT_S = 120.0


@dataclasses.dataclass(frozen=True)
class JobResult:
    report: Report
    #: the job's own exit status (0 when it ran to its end or was stopped by the watch)
    job_exit_code: int
    #: False on every rank but 0 under torchrun: that rank prints nothing
    reporting: bool = True


def watch_job(
    target: str, argv: Sequence[str], options: WatchOptions, *, as_module: bool = False, timeout: float | None = None,
    on_stuck: Callable[[JobResult], None] | None = None,
) -> JobResult:
    """Run ``target`` as ``__main__`` under a watch; merge the reports of every process of the job.

    ``on_stuck``: called from another thread with the report when the job ran past ``timeout``
    and did not stop within :data:`STUCK_GRACE_S` of being interrupted (NOTE [A job past its
    timeout]); it is expected to print the report and end the process.
    """
    from leakscope.harness.distributed import launcher_env
    from leakscope.live import launcher
    from leakscope.live.processes import (
        children_watched,
        merged,
        process_label,
        read_reports,
        unreported,
    )

    session = Watch(options)  # usage errors raise here, before the job starts
    session.job_name = target

    def stuck() -> None:
        session.patcher.restore()
        session.job_error = (
            f"the job ran past --timeout {timeout:g}s and did not stop when interrupted (blocked in C code,"
            f" or its own SIGINT handler); the report covers the calls before"
        )
        import sys

        from leakscope.live.observer import stack_of

        # The main thread's stack where it is stuck: the loop's locals are alive there.
        frames = stack_of(sys._current_frames().get(threading.main_thread().ident or 0))
        report = session.stop(frames=frames)
        frames.clear()
        if on_stuck is not None:
            on_stuck(JobResult(report, 3))

    timer = _Timeout(timeout, stuck)
    with children_watched(options) as report_dir:
        session.start()
        try:
            with timer:
                outcome = launcher.run(target, argv, as_module=as_module)
        finally:
            session.patcher.restore()
        if timer.fired:
            outcome.error = f"the job ran past --timeout {timeout:g}s and was interrupted; the report covers the calls before"
        if outcome.error is not None:
            session.job_error = outcome.error
            session.job_traceback = outcome.traceback
        own = session.stop(extra_modules=[outcome.module] if outcome.module is not None else [], frames=outcome.frames)
        outcome.module = None
        outcome.frames.clear()
        missing = unreported(report_dir, wait_s=CHILD_WAIT_S)  # NOTE [A process that ends before its report]
        others = read_reports(report_dir)
    _remove(report_dir)
    if (others or missing) and not session.observer.calls:
        # The children ran the step, this process did not: only the job's own failure is news.
        own = dataclasses.replace(own, results=tuple(r for r in own.results if r.target == session.job_name))
    report = merged(own, process_label(), others)
    if missing:
        report = dataclasses.replace(report, results=(*report.results, *_unreported_results(options, missing)))
    ranks = launcher_env()
    if ranks is not None and ranks[1] > 1:
        return _across_ranks(report, ranks, outcome)
    return JobResult(report, outcome.exit_code if not outcome.stopped else 0)


def _unreported_results(options: WatchOptions, missing: Sequence[tuple[str, int, bool]]) -> list[TargetResult]:
    """One error per process that made watched calls and wrote no report (NOTE [A process that ends before its report])."""
    methods = ", ".join(options.methods) or "the built-in step methods"
    fix = (
        "let it make one call more than --skip + --micro-batches, or end it gracefully "
        "(Ray: ray.actor.exit_actor()) before the job ends"
    )
    return [
        TargetResult(
            target=f"{methods} @ {label}", mode=Mode.TRAIN, verdict=Verdict.ERROR,
            error=(
                f"{label} (pid {pid}) made watched calls and was still running {CHILD_WAIT_S:g}s after the job "
                f"ended, without a report: its last look is at its call after the last watched one, or at its exit; {fix}"
                if alive else
                f"{label} (pid {pid}) made watched calls but ended before its last look, without running "
                f"atexit (as ray.shutdown() ends actors), so it wrote no report; {fix}"
            ),
        )
        for label, pid, alive in missing
    ]


def _across_ranks(report: Report, ranks: tuple[int, int], outcome: Outcome) -> JobResult:
    """Under torchrun: every rank writes its report to a directory they share; rank 0 merges them."""
    import tempfile

    from leakscope.harness.distributed import merge_reports
    from leakscope.live.processes import read_reports, write_report

    rank, world = ranks
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("MASTER_PORT", "local")
    directory = os.path.join(tempfile.gettempdir(), f"leakscope-watch-ranks-{run_id}")
    os.makedirs(directory, exist_ok=True)
    write_report(report, directory, f"rank {rank}", name=f"rank{rank:05d}")
    job_code = outcome.exit_code if not outcome.stopped else 0
    if rank != 0:
        return JobResult(report, job_code, reporting=False)
    parts = read_reports(directory, expect=world, wait_s=RANK_WAIT_S)
    ordered = [r for _, r in parts]
    merged = merge_reports(ordered) if ordered else report
    summary = merged.watch or WatchSummary()
    merged = dataclasses.replace(merged, watch=dataclasses.replace(
        summary,
        processes=tuple(p for r in ordered for p in (r.watch.processes if r.watch else ())),
        calls=tuple(c for r in ordered for c in (r.watch.calls if r.watch else ())),
    ))
    if len(parts) < world:
        missing = TargetResult(
            target="the job", mode=Mode.TRAIN, verdict=Verdict.ERROR,
            error=f"only {len(parts)} of {world} ranks wrote a report within {RANK_WAIT_S:g}s",
        )
        merged = dataclasses.replace(merged, results=(*merged.results, missing))
    _remove(directory)
    return JobResult(merged, job_code)


def _remove(directory: str) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


#: seconds a job past its ``--timeout`` has to stop once interrupted
STUCK_GRACE_S = 10.0


class _Timeout:
    """Interrupt the job's main thread after ``seconds`` (the report is still written).

    # NOTE [A job past its timeout]
    # The job runs in this process's main thread, so ``--timeout`` interrupts it
    # there: a real SIGINT sent to the main thread, which also wakes a blocking
    # call (``time.sleep``, a socket read, a lock), raises KeyboardInterrupt, and
    # the report is made as for any interrupted job. A job that does not stop
    # within STUCK_GRACE_S (blocked where no signal reaches, or a SIGINT handler
    # of its own) gets ``on_stuck`` from the timer thread: the report of the
    # calls made so far, then the process ends.
    """

    def __init__(self, seconds: float | None, on_stuck: Callable[[], None] | None = None) -> None:
        self.seconds = seconds
        self.on_stuck = on_stuck
        self.fired = False
        self._done = threading.Event()
        self._timer: threading.Thread | None = None

    def _run(self) -> None:
        import signal

        assert self.seconds
        if self._done.wait(self.seconds):
            return
        self.fired = True
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        if not self._done.wait(STUCK_GRACE_S) and self.on_stuck is not None:
            self.on_stuck()

    def __enter__(self) -> _Timeout:
        if self.seconds:
            self._timer = threading.Thread(target=self._run, name="leakscope-watch-timeout", daemon=True)
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._timer = None


__all__ = ["JobResult", "watch_job"]
