"""`leakscope watch` and Ray: the verl-shaped update inside a named Ray actor, on a real local Ray cluster.

``.ci/setup-ray.sh`` creates ``.venv-ray`` (ray 2.60.0, torch 2.13.0, leakscope);
each test runs ``fixtures/watch/ray_update.py`` in a subprocess with that venv,
which starts a local cluster of 2 CPUs, runs the update in the actor
``ActorWorker`` and shuts the cluster down. Through ``leakscope watch`` the
actor is reached by the environment it inherits; with ``--setup-hook DIR`` by
Ray's ``worker_process_setup_hook`` alone, as on a remote cluster. The last
test, on plain processes, pins whom the driver waits for.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from leakscope.live.processes import Unreported, unreported
from leakscope.render.json_report import report_dict
from leakscope.results import Report
from leakscope.serialize import from_data
from tests.conftest import ROOT, framework_python, run_leakscope, venv_env

pytestmark = pytest.mark.frameworks

VENV = ROOT / ".venv-ray"
ACTOR = "actor_engine:ActorEngine.forward_step"
SCRIPT = "fixtures/watch/ray_update.py"
NAMED = f"{ACTOR} @ actor ActorWorker"
PATHS = [
    "caller:ray_update.py:ActorWorker.update_actor.output_lst[0].model_output.log_probs",
    "caller:ray_update.py:ActorWorker.update_actor.output_lst[0].model_output.entropy",
]
#: a Ray start on a 2-core CI machine that runs other jobs too can take a while
TIMEOUT_S = 600


@pytest.fixture(scope="session")
def python() -> Path:
    return framework_python(VENV, ".ci/setup-ray.sh")


#: Ray's own limits on a worker's start-up and health checks, widened for a loaded 2-core machine
RAY_ENV = {"RAY_worker_register_timeout_seconds": "600", "RAY_health_check_failure_threshold": "20"}


def _run(args: list[str], timeout: int = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=ROOT,
        env={**venv_env(), **RAY_ENV},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _watch(python: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = run_leakscope(
        python,
        "watch",
        "-f",
        "json",
        "--method",
        ACTOR,
        SCRIPT,
        *args,
        env=RAY_ENV,
        timeout=TIMEOUT_S,
    )
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"no JSON on stdout (rc {done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
        ) from None
    return done, doc


def _verdicts(doc: dict[str, Any]) -> list[tuple[str, str, str, list[str]]]:
    return [
        (r["target"], r["mode"], r["verdict"], [f["path"] for f in r["findings"]])
        for r in doc["results"]
    ]


def _actor_said(output: str) -> dict[str, Any]:
    """What the actor returned to the driver: its update and what leakscope left in it."""
    prefix = "update done in actor ActorWorker: "
    lines = [line for line in output.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, output[-4000:]
    said: dict[str, Any] = ast.literal_eval(lines[0][len(prefix) :])
    return said


def _nothing_left_patched(said: dict[str, Any]) -> None:
    assert said["forward_step"] == "actor_engine.ActorEngine.forward_step"
    assert said["wrapped"] is False  # the original function object, not leakscope's wrapper
    assert said["meta_path"] == []  # the import hook is gone


def test_leaky_update_in_a_ray_actor_is_named_caller_side_and_by_actor(python: Path) -> None:
    done, doc = _watch(python)
    assert _verdicts(doc) == [(NAMED, "train", "leak", PATHS)]
    entropy = doc["results"][0]["findings"][1]
    assert entropy["holder"] == "caller's frame"
    assert (
        entropy["source"]["file"].endswith("fixtures/watch/actor_engine.py")
        and entropy["source"]["line"] == 23
    )
    assert entropy["hint"].startswith("growing: keeps a graph of every call (3 of 3 watched calls)")
    # Stored at: the actor's own append, traced inside the Ray worker between two looks.
    assert (entropy["stored_at"]["file"], entropy["stored_at"]["line"], entropy["store_op"]) == (
        "fixtures/watch/ray_update.py",
        53,
        "append",
    )
    assert doc["watch"]["processes"] == ["actor ActorWorker"]
    assert [(c["process"], c["mode"]) for c in doc["watch"]["calls"]] == [
        ("actor ActorWorker", "train")
    ] * 3
    assert done.returncode == 1
    said = _actor_said(done.stderr)  # the job's stdout goes to stderr; stdout is the report
    assert said["micro_batches"] == 6  # children detach: the actor's update ran to its end
    _nothing_left_patched(said)
    # Reached through the environment the local cluster's workers inherit.
    assert said["sitecustomize"] == str(ROOT / "leakscope" / "live" / "_site" / "sitecustomize.py")


def test_detached_update_in_a_ray_actor_is_clean(python: Path) -> None:
    done, doc = _watch(python, "--detach")
    assert _verdicts(doc) == [(NAMED, "train", "clean", [])]
    assert doc["watch"]["processes"] == ["actor ActorWorker"]
    assert done.returncode == 0
    _nothing_left_patched(_actor_said(done.stderr))


def test_an_actor_ended_by_ray_shutdown_before_its_last_look_is_named_not_missed(
    python: Path,
) -> None:
    # 3 calls, no 4th: the actor's last look would be at exit, but ray.shutdown() ends it without atexit.
    # The looks it made before its calls #1 and #2 (recorded as it went) are reported, then the error.
    done, doc = _watch(python, "--steps", "3")
    pid = _actor_said(done.stderr)["pid"]
    assert _verdicts(doc) == [(NAMED, "train", "leak", PATHS), (NAMED, "train", "error", [])]
    assert doc["results"][1]["error"] == (
        f"actor ActorWorker (pid {pid}) made watched calls but ended while running the job after watched call #2, "
        "before its last look, without running atexit (as ray.shutdown() ends actors), so it wrote no report; let it "
        "make one call more than --skip + --micro-batches, or end it gracefully (Ray: ray.actor.exit_actor()) before "
        "the job ends"
    )
    assert doc["watch"]["processes"] == ["actor ActorWorker"]
    assert done.returncode == 3


def test_an_actor_ended_gracefully_reports_at_exit_named_as_at_its_first_watched_call(
    python: Path,
) -> None:
    # __ray_terminate__ runs the actor's atexit: its last look happens there, after the update returned
    # (so output_lst is gone), when Ray no longer names the actor. The looks before its calls #1 and #2
    # saw output_lst hold every earlier graph: that judges it (NOTE [The look that judges]).
    done, doc = _watch(python, "--steps", "3", "--exit-actor")
    assert _verdicts(doc) == [(NAMED, "train", "leak", PATHS)]
    assert doc["results"][0]["warnings"][0].startswith(
        "freed by the last look (when the job ended)"
    )
    assert doc["watch"]["processes"] == ["actor ActorWorker"]  # named as at its first watched call
    assert done.returncode == 1


def test_remote_cluster_setup_hook_writes_the_actors_report(python: Path, tmp_path: Path) -> None:
    # No leakscope watch: the script passes Ray the activation (worker_process_setup_hook + env_vars).
    done = _run([str(python), SCRIPT, "--setup-hook", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-4000:]
    said = _actor_said(done.stdout)
    # Its state file (NOTE [A process that ends before its report]) is gone once the report is written.
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"report-{said['pid']}.json"]
    data = json.loads((tmp_path / f"report-{said['pid']}.json").read_text(encoding="utf-8"))
    assert data["label"] == "actor ActorWorker"
    report = from_data(Report, data["report"])
    doc = report_dict(report)  # the JSON report of the schema docs/json-report.md documents
    assert doc["schema_version"] == 1 and doc["torch_version"] == "2.13.0+cpu"
    assert _verdicts(doc) == [(ACTOR, "train", "leak", PATHS)]  # one process's report: no @ yet
    assert [c["mode"] for c in doc["watch"]["calls"]] == ["train"] * 3
    _nothing_left_patched(said)
    # The hook activates in the workers only: nothing of leakscope on their path or in the driver.
    assert said["site_on_path"] == [] and said["sitecustomize"] is None
    assert "driver: leakscope.live imported: False" in done.stdout


def test_the_driver_waits_only_for_announced_children_still_running(tmp_path: Path) -> None:
    # Real processes: one ended and reaped, one ended and not reaped (a zombie), one running, and this one,
    # which made watched calls and wrote its report.
    ended = int(
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

    def state(pid: int, label: str) -> None:
        data = {"label": label, "phase": "in watched call #1", "report": None, "complete": False}
        (tmp_path / f"state-{pid}.json").write_text(json.dumps(data), encoding="utf-8")

    def seen(missing: list[Unreported]) -> list[tuple[str, int, bool, str]]:
        return sorted((m.label, m.pid, m.alive, m.phase) for m in missing)

    try:
        while Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            time.sleep(0.05)
        for pid, label in (
            (ended, "actor Gone"),
            (zombie.pid, "actor Zombie"),
            (os.getpid(), "actor Done"),
        ):
            state(pid, label)
        (tmp_path / f"report-{os.getpid()}.json").write_text("{}", encoding="utf-8")
        gone = [
            ("actor Gone", ended, False, "in watched call #1"),
            ("actor Zombie", zombie.pid, False, "in watched call #1"),
        ]
        started = time.monotonic()
        assert seen(unreported(str(tmp_path), wait_s=60)) == sorted(gone)
        assert time.monotonic() - started < 10  # nothing alive to wait for
        state(running.pid, "actor Busy")
        started = time.monotonic()
        missing = unreported(str(tmp_path), wait_s=1.5)
        assert time.monotonic() - started >= 1.5  # waited for the running one, then gave up
        assert seen(missing) == sorted(
            [*gone, ("actor Busy", running.pid, True, "in watched call #1")]
        )
        # The job's own process is not one of them: leakscope watch reports it itself.
        assert seen(unreported(str(tmp_path), exclude=[running.pid, ended, zombie.pid])) == []
    finally:
        running.kill()
        running.wait()
        zombie.wait()
