"""`leakscope watch` on a job that ends badly: exits, is interrupted, hangs past ``--timeout``, ends its
process abruptly (``os._exit``, a signal, a crash in C) or gets SIGTERM; each still gives a report
with the looks made before and the phase the job was in, and leaves nothing behind.

Moved out of tests/test_watch.py (same helpers): most of these wait out a ``--timeout`` (15-60 s), so in a
module of their own they run beside the rest of the watch tests rather than after them
(NOTE [Parallel tests] in tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_watch import ACTOR, VERL_UPDATE, _doc, _verdicts, _watch

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("watch_flags", "job_flags", "error"),
    [
        ([], ["--exit", "4"], "the job exited with sys.exit(4)"),
        ([], ["--interrupt"], "the job was interrupted (KeyboardInterrupt)"),
        # --timeout wakes a job blocked in time.sleep (a real SIGINT to the main thread) ...
        # (60 s: the clock counts from the launch, and the two steps, about 5 s on an idle machine, must fit
        # on a loaded two-core CI machine)
        # The message names the phase the job was in.
        (
            ["--timeout", "60"],
            ["--hang"],
            "the job ran past --timeout 60s while running the job after watched call #1 and was interrupted; the report covers",
        ),
        # ... and reports without it when the job ignores SIGINT (NOTE [A job past its timeout]).
        (
            ["--timeout", "60"],
            ["--hang", "--ignore-sigint"],
            "the job ran past --timeout 60s while running the job after watched call #1 and did not stop",
        ),
    ],
)
def test_a_job_that_exits_is_interrupted_or_hangs_is_reported_with_its_holders(
    watch_flags: list[str],
    job_flags: list[str],
    error: str,
) -> None:
    done = _watch(
        "-f",
        "json",
        *watch_flags,
        "--method",
        ACTOR,
        VERL_UPDATE,
        "--steps",
        "2",
        *job_flags,
        timeout=180,
    )
    doc = _doc(done)
    # The loop's frame where the job stopped is searched: the holder is named, not <unknown holder>.
    assert _verdicts(doc)[0] == (
        ACTOR,
        "train",
        "leak",
        [
            "caller:verl_update.py:main.output_lst[0].model_output.log_probs",
            "caller:verl_update.py:main.output_lst[0].model_output.entropy",
        ],
    )
    job = doc["results"][1]
    assert (job["target"], job["verdict"]) == (VERL_UPDATE, "error") and job["error"].startswith(
        error
    )
    assert done.returncode == 3
    assert "Traceback" not in done.stderr


ABRUPT = "fixtures/watch/abrupt_end.py"
ABRUPT_PATHS = [
    "caller:abrupt_end.py:main.output_lst[0].model_output.log_probs",
    "caller:abrupt_end.py:main.output_lst[0].model_output.entropy",
]


def _left_in(tmp: Path) -> list[str]:
    """What leakscope left in the temporary directory it was given (TMPDIR; torch keeps its own caches there)."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("leakscope"))


@pytest.mark.parametrize(
    ("how", "error"),
    [
        # After two leaky watched calls (the look before call #1 saw call #0's graph held) ...
        (
            ["exit0"],
            "the job's process ended with exit status 0 while running the job after watched call #1, before "
            "leakscope wrote its report (os._exit(0), or an exit from C); the report covers the looks before",
        ),
        (
            ["kill"],
            "the job's process died of SIGKILL while running the job after watched call #1: a signal from "
            "outside (out of memory?); the report covers the looks before",
        ),
        # ... or inside the step's call #1.
        (
            ["exit5", "--in-call", "1"],
            "the job's process ended with exit status 5 while in watched call #1, before "
            "leakscope wrote its report (os._exit(5), or an exit from C); the report covers",
        ),
        (
            ["segv", "--in-call", "1"],
            "the job's process died of SIGSEGV while in watched call #1: a crash in native "
            "code (an extension or torch; its Python stack is on stderr); the report covers",
        ),
    ],
)
def test_a_job_that_ends_its_process_abruptly_is_an_error_with_the_looks_it_made(
    how: list[str],
    error: str,
    tmp_path: Path,
) -> None:
    """NOTE [The job in a process of its own]: os._exit, a signal, a crash in C still give a report (exit 3)."""
    done = _watch("-f", "json", "--method", ACTOR, ABRUPT, *how, env={"TMPDIR": str(tmp_path)})
    doc = _doc(done)
    (method, job) = doc["results"]
    assert (method["target"], method["verdict"], [f["path"] for f in method["findings"]]) == (
        ACTOR,
        "leak",
        ABRUPT_PATHS,
    )
    assert (job["target"], job["verdict"]) == (ABRUPT, "error") and job["error"].startswith(error)
    assert done.returncode == 3
    assert f"leakscope: {ABRUPT}: {error}" in done.stderr
    assert _left_in(tmp_path) == []  # the report directory is gone


def test_a_job_that_ends_before_its_first_watched_call_is_an_error(tmp_path: Path) -> None:
    done = _watch(
        "-f",
        "json",
        "--method",
        ACTOR,
        ABRUPT,
        "exit0",
        "--steps",
        "0",
        env={"TMPDIR": str(tmp_path)},
    )
    assert [(r["target"], r["verdict"], r["error"]) for r in _doc(done)["results"]] == [
        (
            ABRUPT,
            "error",
            "the job's process ended with exit status 0 while running the job before its first watched "
            "call, before leakscope wrote its report (os._exit(0), or an exit from C)",
        )
    ]
    assert done.returncode == 3
    assert _left_in(tmp_path) == []


def test_sigterm_to_leakscope_watch_is_forwarded_to_the_job_and_the_report_made(
    tmp_path: Path,
) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leakscope",
            "watch",
            "-f",
            "json",
            "--method",
            ACTOR,
            ABRUPT,
            "hang",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until the job hangs after its two watched calls
            states = [
                json.loads(p.read_text()) for p in tmp_path.glob("leakscope-watch-*/state-*.json")
            ]
            if any(s["phase"] == "running the job after watched call #1" for s in states):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    doc = _doc(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    assert [(r["verdict"], [f["path"] for f in r["findings"]]) for r in doc["results"]] == [
        ("leak", ABRUPT_PATHS),
        ("error", []),
    ]
    assert doc["results"][1]["error"].startswith(
        "the job's process died of SIGTERM while running the job after watched call #1"
    )
    assert proc.returncode == 3
    assert _left_in(tmp_path) == []


@pytest.mark.parametrize(
    ("timeout", "job", "error"),
    [
        (
            "15",
            ["hang", "--steps", "0"],
            "the job ran past --timeout 15s while running the job before its first watched call and was interrupted",
        ),
        (
            "30",
            ["hang", "--in-call", "0"],
            "the job ran past --timeout 30s while in watched call #0 and was interrupted",
        ),
        # A look that hangs in the job's own gc callback, which swallows the interrupt: reported from the timer
        # thread with the looks before, and the hung look is not made again.
        (
            "40",
            ["hang-in-look", "--in-call", "1"],
            "the job ran past --timeout 40s while looking for held graphs before watched call #1 and did not stop when "
            "interrupted",
        ),
        # C code that holds the GIL: not even the timer thread runs; leakscope watch kills the job's process.
        (
            "30",
            ["wedge", "--in-call", "0"],
            "the job ran past --timeout 30s while in watched call #0 and did not stop when interrupted, nor 30s later: "
            "its process was killed",
        ),
    ],
)
def test_timeout_names_the_phase_the_job_was_in(
    timeout: str, job: list[str], error: str, tmp_path: Path
) -> None:
    done = _watch(
        "-f",
        "json",
        "--timeout",
        timeout,
        "--method",
        ACTOR,
        ABRUPT,
        *job,
        env={"TMPDIR": str(tmp_path)},
    )
    doc = _doc(done)
    (failure,) = [r for r in doc["results"] if r["target"] == ABRUPT]
    assert failure["error"].startswith(error), failure["error"]
    assert done.returncode == 3
    assert "Traceback" not in done.stderr
    assert _left_in(tmp_path) == []
