"""`leakscope watch` on jobs whose processes change shape: a job that re-executes itself, one whose
threads outlive the watch's stop, one that trains in a forked worker (fixtures/watch/processes/).

Each leaky job sums attached losses (``total_loss += loss``) and has a clean look-alike
(``--clean``: ``loss.item()``). The leak must be found in the process that trains and reported
by the job's, with the job's real exit status, and the watch must end.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from leakscope.live.job import JobResult, watch_job
from leakscope.live.session import WatchOptions
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

JOBS = ROOT / "fixtures" / "watch" / "processes"
HOLDER = "caller:_loop.py:train.total_loss"


def _watch(script: str, *argv: str) -> tuple[JobResult, float]:
    saved = os.getcwd()
    os.chdir(ROOT)
    began = time.monotonic()
    try:
        done = watch_job(str(JOBS / script), list(argv), WatchOptions(), timeout=120)
    finally:
        os.chdir(saved)
    return done, time.monotonic() - began


def _verdicts(done: JobResult) -> list[tuple[str, list[str]]]:
    return [(r.verdict.value, [str(f.path) for f in r.findings]) for r in done.report.results]


@pytest.mark.parametrize("clean", [False, True], ids=["leaky", "clean"])
def test_a_job_that_re_executes_itself_is_watched_in_its_new_image(clean: bool) -> None:
    """``os.execv`` of the same script: the new image watches itself and its report is the job's,
    with the exit status the job really had (it was an error: "ended before leakscope wrote its
    report"). A job that exits 5 is an error row after its calls' results, as a job that calls
    ``sys.exit(5)`` without re-executing; one that exits 0 is not."""
    variant = ["--clean"] if clean else []
    done, _ = _watch("reexec.py", "--exit", "5", *variant)
    error = ("error", [])
    assert _verdicts(done) == ([("clean", []), error] if clean else [("leak", [HOLDER]), error])
    assert "ended with exit status 5" in str(done.report.results[-1].error)
    assert done.job_exit_code == 5
    done, _ = _watch("reexec.py", *variant)
    assert _verdicts(done) == ([("clean", [])] if clean else [("leak", [HOLDER])])
    assert done.job_exit_code == 0


@pytest.mark.parametrize("clean", [False, True], ids=["leaky", "clean"])
def test_a_job_whose_thread_outlives_the_stop_still_ends_with_its_report(
    clean: bool, tmp_path: Path
) -> None:
    """A non-daemon heartbeat thread that never ends: the watch stops the job after its looks, and
    the job's process ends (it hung: Python joins every non-daemon thread before it exits)."""
    done, seconds = _watch("lingering_thread.py", *(["--clean"] if clean else []))
    assert _verdicts(done) == ([("clean", [])] if clean else [("leak", [HOLDER])])
    assert done.job_exit_code == 0  # stopped by the watch
    assert seconds < 60


@pytest.mark.parametrize("how", [[], ["--mp"]], ids=["os.fork", "multiprocessing-fork"])
@pytest.mark.parametrize("clean", [False, True], ids=["leaky", "clean"])
def test_a_forked_worker_is_watched_in_the_child_and_reported_by_the_parent(
    how: list[str], clean: bool
) -> None:
    """The job trains only in a forked worker that ends by ``os._exit``: the child, a copy of the
    watched process, reports its own looks (the leak was lost: "the job never ran a step", or an
    error that the child ended before its report), named by its pid, and the job's process merges it."""
    done, _ = _watch("fork_worker.py", *how, *(["--clean"] if clean else []))
    assert _verdicts(done) == ([("clean", [])] if clean else [("leak", [HOLDER])])
    assert [r.target.rpartition(" @ ")[2].split()[0] for r in done.report.results] == ["pid"]
    assert done.job_exit_code == 0


def test_a_forking_job_s_own_exit_status_is_reported_with_the_child_s_leak() -> None:
    """The job's process exits 3 after its forked worker leaked: both are in the report, and the
    exit status is the job's own."""
    done, _ = _watch("fork_worker.py", "--exit", "3")
    verdicts = sorted(r.verdict.value for r in done.report.results)
    assert verdicts == ["error", "leak"]
    assert any("sys.exit(3)" in (r.error or "") for r in done.report.results)
    assert done.job_exit_code == 3


def test_a_worker_forked_after_the_parent_s_calls_that_trains_nothing_reports_nothing() -> None:
    """A DataLoader-like worker forked after the job's process made watched calls inherits them,
    makes none of its own and ends by ``os._exit``: the report is the job's process's alone (no
    second copy of its looks, no "ended before its report" error)."""
    done, _ = _watch("fork_worker.py", "--idle-worker", "--mp")
    assert _verdicts(done) == [("leak", [HOLDER])]
    assert " @ " not in done.report.results[0].target
