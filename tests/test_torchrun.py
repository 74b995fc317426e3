"""Multi-rank: `torchrun --nproc-per-node 2 -m leakscope check ...` on gloo, CPU only.

Each rank checks its own step of the real FSDP2-sharded engine; rank 0 prints
one merged report; every rank exits with the worst code, and torchrun itself
exits 1 when any rank exits non-zero (its own convention).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures.rank_leak import EXPECTED_BY_RANK
from leakscope.harness.distributed import launcher_env, merge_reports
from leakscope.policy import exit_code
from leakscope.results import Finding, Holder, Mode, Report, TargetResult, Verdict
from tests.conftest import ROOT, holder_path

pytestmark = pytest.mark.integration


def _torchrun(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "leakscope",
            "check",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _by_rank(doc: dict[str, Any], target: str) -> dict[int, dict[str, tuple[str, list[str]]]]:
    out: dict[int, dict[str, tuple[str, list[str]]]] = {0: {}, 1: {}}
    for r in doc["results"]:
        if r["target"] != target:
            continue
        ranks = [r["rank"]] if "rank" in r else [0, 1]
        for rank in ranks:
            out[rank][r["mode"]] = (r["verdict"], [f["path"] for f in r["findings"]])
    return out


def test_two_ranks_merged_report_per_rank_where_they_differ() -> None:
    done = _torchrun(
        "leakscope.models.engines:LeakyFSDPEngine", "fixtures.rank_leak:Engine", "--format", "json"
    )
    doc = json.loads(done.stdout)  # one document: only rank 0 wrote stdout
    # Both ranks leak the same way: one result per mode, no rank.
    leaky = [r for r in doc["results"] if r["target"].endswith("LeakyFSDPEngine")]
    assert [(r["mode"], r["verdict"], "rank" in r) for r in leaky] == [
        ("train", "leak", False),
        ("forward-only", "clean", False),
    ]
    assert [f["path"] for f in leaky[0]["findings"]] == [
        "output.model_output.log_probs",
        "output.model_output.entropy",
    ]
    # Only rank 1 keeps its losses: per-rank results.
    assert _by_rank(doc, "fixtures.rank_leak:Engine") == {
        rank: {mode: (v, list(p)) for mode, (v, p) in modes.items()}
        for rank, modes in EXPECTED_BY_RANK.items()
    }
    # Every rank exits 1 (the worst), after rank 0 has written the report; torchrun exits 1 itself.
    # The first rank out is its root cause; the other has exited 1 too, or torchrun stopped it on its
    # way out (SIGTERM, -15): which one wins that race varies from run to run.
    assert done.returncode == 1
    root_cause = done.stderr.partition("Root Cause")[2]
    assert re.search(r"exitcode  : 1 \(pid", root_cause), done.stderr[-3000:]
    codes = re.findall(r"exitcode  : (-?\d+) \(pid", done.stderr)
    assert len(codes) == 2 and set(codes) <= {"1", "-15"}, done.stderr[-3000:]


def test_two_ranks_clean_engine_exits_zero() -> None:
    done = _torchrun(
        "leakscope.models.engines:FSDPEngine", "--mode", "train", "--micro-batches", "1"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("leakscope.models.engines:FSDPEngine [train] CLEAN") == 1
    assert "[rank" not in done.stdout
    assert done.stdout.rstrip().endswith("0 leak, 1 clean, 0 error (exit 0)")


_SESSION = """
import os, sys
import torch.distributed as dist
import leakscope
from leakscope.options import CheckOptions
opts = CheckOptions(micro_batches=1, confirm=False)
leakscope.check("leakscope.models.engines:FSDPEngine", opts)
print("left initialized:", dist.is_initialized())
dist.init_process_group("gloo", init_method="env://")
group = dist.group.WORLD
leakscope.check("leakscope.models.engines:FSDPEngine", opts)
print("caller's group kept:", dist.is_initialized() and dist.group.WORLD is group)
dist.destroy_process_group()
"""


def test_session_leaves_the_process_group_as_found() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run(
        [sys.executable, "-c", _SESSION],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.splitlines() == ["left initialized: False", "caller's group kept: True"], (
        done.stderr[-3000:]
    )


def _result(verdict: Verdict, paths: list[str], seconds: float) -> TargetResult:
    findings = tuple(
        Finding(holder_path("engine", p), Holder.ENGINE, "DivBackward0", 3, 8, True, "fix")
        for p in paths
    )
    return TargetResult("t:E", Mode.TRAIN, verdict, findings=findings, seconds=seconds)


def test_merge_reports_collapses_agreeing_ranks_and_splits_differing_ones() -> None:
    def report(*results: TargetResult) -> Report:
        return Report(results=results, leakscope_version="0", torch_version="t", python_version="p")

    same = merge_reports(
        [report(_result(Verdict.CLEAN, [], 1.0)), report(_result(Verdict.CLEAN, [], 2.5))]
    )
    assert same.results == (_result(Verdict.CLEAN, [], 2.5),)
    assert exit_code(same) == 0
    split = merge_reports(
        [report(_result(Verdict.CLEAN, [], 1.0)), report(_result(Verdict.LEAK, ["x"], 1.0))]
    )
    assert [(r.rank, r.verdict) for r in split.results] == [(0, Verdict.CLEAN), (1, Verdict.LEAK)]
    assert exit_code(split) == 1


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, None),
        ({"RANK": "1", "WORLD_SIZE": "2"}, (1, 2)),
        ({"RANK": "x", "WORLD_SIZE": "2"}, None),
    ],
)
def test_launcher_env(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], want: tuple[int, int] | None
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launcher_env() == want


# -- leakscope watch under a launcher: NOTE [One launch's store] ------------------------------------------------

ACTOR = "actor_engine:ActorEngine.forward_step"
RANK_UPDATE = "fixtures/watch/rank_update.py"
RANK_PATHS = [
    "caller:rank_update.py:main.output_lst[0].model_output.log_probs",
    "caller:rank_update.py:main.output_lst[0].model_output.entropy",
]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _launcher_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_RUN_ID",
    ):
        env.pop(name, None)
    return {**env, **extra}


def _watch_doc(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"no JSON on stdout (rc {done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
        ) from None
    return doc


def _results(doc: dict[str, Any]) -> list[tuple[str, str, int | None, list[str]]]:
    return [
        (r["target"], r["verdict"], r.get("rank"), [f["path"] for f in r["findings"]])
        for r in doc["results"]
    ]


def _static_torchrun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """torchrun's static rendezvous (no --standalone): TORCHELASTIC_RUN_ID is ``none`` in every launch."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_watch_ranks_never_read_a_stale_rank_report_of_an_earlier_launch(tmp_path: Path) -> None:
    """Rank 1 leaks and is slow; an earlier launch left a clean rank 1 report where ranks once met by name."""
    from leakscope.serialize import to_data

    stale = tmp_path / "leakscope-watch-ranks-none"
    stale.mkdir()
    clean = Report(
        results=(TargetResult(ACTOR, Mode.TRAIN, Verdict.CLEAN),),
        leakscope_version="0.1.0",
        torch_version="2.13.0+cpu",
        python_version="3.11.7",
    )
    (stale / "report-rank00001.json").write_text(
        json.dumps({"label": "rank 1", "report": to_data(clean)})
    )
    done = _static_torchrun(
        "-m",
        "leakscope",
        "watch",
        "-f",
        "json",
        "--method",
        ACTOR,
        RANK_UPDATE,
        "--leaky-rank",
        "1",
        "--slow-rank",
        "1",
        "--slow-s",
        "5",
        "--group",  # the job's own env:// rendezvous too
        env=_launcher_env(TMPDIR=str(tmp_path)),
    )
    doc = _watch_doc(done)
    assert _results(doc) == [(ACTOR, "clean", 0, []), (ACTOR, "leak", 1, RANK_PATHS)]
    assert doc["watch"]["processes"] == ["rank 0", "rank 1"]
    assert done.returncode == 1  # rank 0 exits 1 (the merged verdict): torchrun exits 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("leakscope")) == [
        stale.name
    ]
    assert [p.name for p in stale.iterdir()] == [
        "report-rank00001.json"
    ]  # neither read nor written


def test_watch_rank_whose_job_is_killed_is_an_error_in_rank_0s_report() -> None:
    done = _static_torchrun(
        "-m",
        "leakscope",
        "watch",
        "-f",
        "json",
        "--method",
        ACTOR,
        RANK_UPDATE,
        "--kill-rank",
        "1",
        "--steps",
        "3",
        env=_launcher_env(),
    )
    doc = _watch_doc(done)
    # Rank 1's looks before it was killed (clean; no look at its end), then the error.
    assert _results(doc) == [
        (ACTOR, "clean", 0, []),
        (ACTOR, "clean", 1, []),
        (RANK_UPDATE, "error", 1, []),
    ]
    assert doc["results"][2]["error"].startswith(
        "the job's process died of SIGKILL while running the job after watched call #2"
    )
    assert done.returncode == 1


def test_watch_rank_that_never_starts_leakscope_is_an_error_not_a_gap() -> None:
    """Rank 1 runs the job without leakscope: rank 0 waits LEAKSCOPE_WATCH_RANK_WAIT_S, then says so (exit 3)."""
    script = (
        f'if [ "$RANK" = 0 ]; then exec {sys.executable} -m leakscope watch -f json --method {ACTOR} {RANK_UPDATE}; '
        f"else exec {sys.executable} {RANK_UPDATE} >&2; fi"
    )
    done = _static_torchrun(
        "--no-python", "sh", "-c", script, env=_launcher_env(LEAKSCOPE_WATCH_RANK_WAIT_S="5")
    )
    doc = _watch_doc(done)
    assert _results(doc) == [(ACTOR, "clean", None, []), (RANK_UPDATE, "error", 1, [])]
    assert doc["results"][1]["error"] == (
        "rank 1 did not start leakscope watch within 5s of rank 0; run every rank as "
        "`torchrun ... -m leakscope watch ...` (or raise LEAKSCOPE_WATCH_RANK_WAIT_S)"
    )
    assert done.returncode == 1 and re.search(r"exitcode\s*: 3 \(pid", done.stderr), done.stderr[
        -3000:
    ]  # rank 0: exit 3


def test_watch_ranks_without_an_agent_store_use_the_one_rank_0_hosts(tmp_path: Path) -> None:
    """RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by hand: rank 0's leakscope hosts the store, and the
    jobs' own env:// rendezvous joins it."""
    port = str(_free_port())
    procs = []
    for rank in (1, 0):
        env = _launcher_env(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            TMPDIR=str(tmp_path),
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "leakscope",
                    "watch",
                    "-f",
                    "json",
                    "--method",
                    ACTOR,
                    RANK_UPDATE,
                    "--leaky-rank",
                    "0",
                    "--group",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        (out1, err1), (out0, err0) = (p.communicate(timeout=300) for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert out1 == ""  # only rank 0 prints
    doc = _watch_doc(subprocess.CompletedProcess([], procs[1].returncode, out0, err0))
    assert _results(doc) == [(ACTOR, "leak", 0, RANK_PATHS), (ACTOR, "clean", 1, [])]
    assert (procs[1].returncode, procs[0].returncode) == (
        1,
        0,
    )  # rank 0: the merged verdict; rank 1: its job's
    assert (
        "rank 1: update done" not in err1
    )  # --then stop ended each rank's job after its watched calls
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("leakscope")] == []
