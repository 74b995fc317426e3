"""`leakscope watch`: real training scripts in fixtures/watch/, driven through the CLI in a subprocess.

Each leaky script is reported with its caller-side, engine-side or global path;
each clean twin is clean. The library API is tested in this process, with what
must be left behind after it: nothing.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

ACTOR = "actor_engine:ActorEngine.forward_step"
METRIC = "metric_engine:Trainer.train_step"
VERL_UPDATE = "fixtures/watch/verl_update.py"


def _watch(
    *args: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **(env or {}))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        full_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "leakscope", "watch", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _doc(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"no JSON on stdout (rc {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}"
        ) from None
    return doc


def _line_of(path: Any, text: str) -> int:
    """The number of the one line of ``path`` that contains ``text``."""
    (line,) = [i for i, code in enumerate(path.read_text().splitlines(), 1) if text in code]
    return line


def _verdicts(doc: dict[str, Any]) -> list[tuple[str, str, str, list[str]]]:
    return [
        (r["target"], r["mode"], r["verdict"], [f["path"] for f in r["findings"]])
        for r in doc["results"]
    ]


def test_verl_shaped_update_keeping_output_lst_is_named_caller_side() -> None:
    done = _watch("-f", "json", "--method", ACTOR, VERL_UPDATE)
    doc = _doc(done)
    assert _verdicts(doc) == [
        (
            ACTOR,
            "train",
            "leak",
            [
                "caller:verl_update.py:main.output_lst[0].model_output.log_probs",
                "caller:verl_update.py:main.output_lst[0].model_output.entropy",
            ],
        )
    ]
    result = doc["results"][0]
    entropy = result["findings"][1]
    assert entropy["holder"] == "caller's frame"
    assert (
        entropy["source"]["file"].endswith("fixtures/watch/actor_engine.py")
        and entropy["source"]["line"] == 23
    )
    assert entropy["hint"].startswith("growing: keeps a graph of every call (3 of 3 watched calls)")
    # Stored at: the loop's append, seen while the job was traced after the first leaky look;
    # the fix is derived from it and names the tensor inside the stored output.
    append = _line_of(ROOT / VERL_UPDATE, "output_lst.append(output)")
    for finding in result["findings"]:
        assert (
            finding["stored_at"]["file"].endswith("verl_update.py")
            and finding["stored_at"]["line"] == append
        )
        assert finding["store_op"] == "append"
    assert (
        'output_lst.append(output) keeps output["model_output"]["entropy"] with its graph'
        in entropy["hint"]
    )
    assert 'output["model_output"]["entropy"].detach()' in entropy["hint"]
    # Bytes measured on the real tensors: each call's graph adds the same, the curve grows.
    growth = result["growth"]["retained_bytes"]
    assert len(growth) == 3 and growth[0] > 0 and growth == [growth[0] * k for k in (1, 2, 3)]
    assert result["retained_bytes"] == growth[0]
    assert [c["mode"] for c in doc["watch"]["calls"]] == ["train"] * 3
    assert done.returncode == 1
    # --then stop (the default) ended the job before its end: it never printed its last line.
    assert "update done" not in done.stderr


def test_verl_shaped_update_with_detached_outputs_is_clean_and_continue_runs_to_the_end() -> None:
    done = _watch("-f", "json", "--then", "continue", "--method", ACTOR, VERL_UPDATE, "--detach")
    assert _verdicts(_doc(done)) == [(ACTOR, "train", "clean", [])]
    assert done.returncode == 0
    assert (
        "update done: 6 micro-batches" in done.stderr
    )  # the job's stdout goes to stderr; stdout is the report


@pytest.mark.parametrize(("detach", "verdict"), [(False, "leak"), (True, "clean")])
def test_a_loop_that_frees_its_outputs_when_it_returns_is_judged_by_the_look_that_saw_them_held(
    detach: bool,
    verdict: str,
) -> None:
    """Exactly --micro-batches calls, then main returns: the look at the job's end finds output_lst gone,
    but the looks before calls #1 and #2 saw it hold every earlier graph (NOTE [The look that judges])."""
    done = _watch(
        "-f",
        "json",
        "--method",
        ACTOR,
        VERL_UPDATE,
        "--steps",
        "3",
        *(["--detach"] if detach else []),
    )
    doc = _doc(done)
    (result,) = doc["results"]
    assert result["verdict"] == verdict
    assert done.returncode == (1 if verdict == "leak" else 0)
    if detach:
        assert result["warnings"] == []
        return
    assert [f["path"] for f in result["findings"]] == [
        "caller:verl_update.py:main.output_lst[0].model_output.log_probs",
        "caller:verl_update.py:main.output_lst[0].model_output.entropy",
    ]
    assert all(f["kind"] == "growing" for f in result["findings"])
    growth = result["growth"][
        "retained_bytes"
    ]  # up to the judging look, not the freed one after it
    assert len(growth) == 2 and growth == [growth[0], 2 * growth[0]] and growth[0] > 0
    assert result["warnings"] == [
        "freed by the last look (when the job ended): the loop held these graphs across calls (seen at the "
        "start of call #2) and released them later; memory grows per call until it does"
    ]


def test_module_run_with_skip_and_global_metric() -> None:
    done = _watch(
        "-f",
        "json",
        "--skip",
        "2",
        "--micro-batches",
        "2",
        "--method",
        "fixtures.watch.metric_engine:Trainer.train_step",
        "-m",
        "fixtures.watch.metric_global",
    )
    doc = _doc(done)
    assert _verdicts(doc) == [
        (
            "fixtures.watch.metric_engine:Trainer.train_step",
            "train",
            "leak",
            ["global:fixtures.watch.metric_engine.METRICS[2]"],
        )
    ]
    finding = doc["results"][0]["findings"][0]
    assert (
        finding["holder"] == "module global"
        and finding["retained_bytes"] > 0
        and finding["cause"] == "activations"
    )
    assert done.returncode == 1


def test_global_metric_kept_as_item_is_clean() -> None:
    done = _watch(
        "-f",
        "json",
        "--method",
        METRIC,
        "fixtures/watch/metric_global.py",
        env={"METRIC_ITEM": "1"},
    )
    assert _verdicts(_doc(done)) == [(METRIC, "train", "clean", [])]
    assert done.returncode == 0


def test_the_jobs_own_failure_is_reported_with_what_was_watched() -> None:
    done = _watch("-f", "json", "--method", ACTOR, VERL_UPDATE, "--steps", "2", "--fail")
    doc = _doc(done)
    verdicts = _verdicts(doc)
    assert verdicts[0][:3] == (ACTOR, "train", "leak")
    assert doc["results"][0]["warnings"] == [
        "the job made 2 watched calls of the 3 asked (after --skip 0); the verdict covers those"
    ]
    job = doc["results"][1]
    assert (job["target"], job["verdict"]) == (VERL_UPDATE, "error")
    assert job["error"].startswith(
        "the job raised RuntimeError: the optimizer diverged at fixtures/watch/verl_update.py:"
    )
    assert done.returncode == 3
    assert "leakscope: fixtures/watch/verl_update.py: the job raised RuntimeError" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_job_that_stops_before_the_step_says_so_rather_than_doubting_the_method() -> None:
    done = _watch("-f", "json", "--method", ACTOR, VERL_UPDATE, "--steps", "0", "--exit", "4")
    doc = _doc(done)
    method, job = doc["results"]
    assert (method["verdict"], method["error"]) == (
        "error",
        f"the job stopped before it called {ACTOR}",
    )
    assert (job["verdict"], job["error"]) == ("error", "the job exited with sys.exit(4)")
    assert done.returncode == 3
    assert "Traceback" not in done.stderr and "is it the step the loop calls" not in done.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--method", "nocolon", VERL_UPDATE],
            2,
            "--method 'nocolon' is not 'pkg.module:Class.method'",
        ),
        ([], 2, "give a script to run"),
        (["fixtures/watch/nope.py"], 2, "no such script: fixtures/watch/nope.py"),
        # a class its module never defines: refused before the job runs (NOTE [A typo in --method
        # fails before the job])
        (
            ["--method", "actor_engine:Missing.forward_step", VERL_UPDATE],
            2,
            "--method: actor_engine has no class 'Missing'",
        ),
        # No --method, and a job that never runs a step (no backward, no module call, no step method).
        (
            ["fixtures/watch/scripts/_graph.py"],
            3,
            "the job never ran a step: it called no backward()",
        ),
    ],
)
def test_bad_input_is_one_line_with_its_exit_code(args: list[str], code: int, message: str) -> None:
    done = _watch("-f", "json", *args)
    assert done.returncode == code, done.stderr[-2000:]
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    _doc(done)  # valid JSON when JSON was asked


@pytest.mark.parametrize(("flags", "verdict"), [([], "leak"), (["--item"], "clean")])
def test_fifty_threads_calling_the_step_stop_one_thread_quietly(
    flags: list[str], verdict: str
) -> None:
    """NOTE [Threads calling the step]: one thread at a time in the observer; exactly one WatchStop, and quiet."""
    method = "thread_engine:Engine.forward_step"
    done = _watch("-f", "json", "--method", method, "fixtures/watch/threads.py", *flags)
    doc = _doc(done)
    (result,) = doc["results"]
    assert (result["target"], result["verdict"], result["warnings"]) == (method, verdict, [])
    paths = [f["path"] for f in result["findings"]]
    if verdict == "leak":
        assert len(paths) == 1 and paths[0].startswith("global:thread_engine.KEPT[")
        assert len(result["growth"]["retained_bytes"]) == 3
    else:
        assert paths == [] and result["growth"]["retained_bytes"] == [0, 0, 0]
    assert len(doc["watch"]["calls"]) == 3
    assert "Exception in thread" not in done.stderr and "WatchStop" not in done.stderr
    assert "threads done" in done.stderr  # the main thread went on
    assert done.returncode == (1 if verdict == "leak" else 0)


_SHADOWED = r"""
import os, sys
with open(os.environ["MARKER"], "a") as f:
    f.write(f"{os.path.dirname(os.path.abspath(__file__))} {__name__}\n")
"""


def test_the_sitecustomize_runs_only_as_sites_and_chains_only_to_the_one_it_shadows(
    tmp_path: Path,
) -> None:
    """NOTE [The sitecustomize it shadows]: never one from the working directory or the script's."""
    from leakscope.live.processes import SITE_DIR

    marker = tmp_path / "ran"
    shadowed, cwd = tmp_path / "on-the-path", tmp_path / "cwd"
    for directory in (shadowed, cwd):
        directory.mkdir()
        (directory / "sitecustomize.py").write_text(_SHADOWED)
    env = dict(os.environ, MARKER=str(marker), LEAKSCOPE_WATCH='{"methods": ["x:Y.z"]}')
    # Imported by its package name (a report once named it), with the working directory first on sys.path:
    # nothing runs, neither a watch nor the working directory's sitecustomize.
    code = "import leakscope.live._site.sitecustomize as m; import leakscope.live.processes as p; print(p._active)"
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "None\n"), done.stderr
    assert not marker.exists()
    # Put first on PYTHONPATH, as leakscope watch does for the job's processes: site imports it, it chains to the
    # sitecustomize of the job's own PYTHONPATH entry (under its own name), and only to that one; the script's
    # directory and the working directory are not on sys.path at that moment.
    (cwd / "job.py").write_text("print('job ran')\n")
    env["PYTHONPATH"] = os.pathsep.join([SITE_DIR, str(shadowed), str(ROOT)])
    env.pop("LEAKSCOPE_WATCH")
    done = subprocess.run(
        [sys.executable, "job.py"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "job ran\n", done.stderr
    assert marker.read_text().splitlines() == [f"{shadowed} sitecustomize"]


def test_spawned_processes_report_and_are_merged_by_process() -> None:
    done = _watch("-f", "json", "--method", METRIC, "fixtures/watch/spawn_workers.py")
    doc = _doc(done)
    by_verdict = {r["verdict"]: r for r in doc["results"]}
    assert sorted(by_verdict) == ["clean", "leak"]
    assert [f["path"] for f in by_verdict["leak"]["findings"]] == [
        "global:metric_engine.METRICS[0]"
    ]
    for r in doc["results"]:
        assert r["target"].startswith(f"{METRIC} @ pid ")  # they differ: each names its process
    assert len(doc["watch"]["processes"]) == 2
    assert done.returncode == 1


def test_torchrun_ranks_merged() -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "leakscope",
            "watch",
            "-f",
            "json",
            "--method",
            ACTOR,
            VERL_UPDATE,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = _doc(done)  # one document: only rank 0 wrote stdout
    # Both ranks leak the same way: one result, no rank.
    assert _verdicts(doc) == [
        (
            ACTOR,
            "train",
            "leak",
            [
                "caller:verl_update.py:main.output_lst[0].model_output.log_probs",
                "caller:verl_update.py:main.output_lst[0].model_output.entropy",
            ],
        )
    ]
    assert "rank" not in doc["results"][0]
    assert sorted(doc["watch"]["processes"]) == ["rank 0", "rank 1"]
    assert done.returncode == 1


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="needs leakscope[hf]")
@pytest.mark.parametrize(
    ("leaky", "expected"), [("1", ("leak", ["engine.last_logits[0]"])), ("0", ("clean", []))]
)
def test_transformers_trainer_with_peft_and_checkpointing_default_method(
    leaky: str, expected: tuple[str, list[str]]
) -> None:
    done = _watch(
        "-f", "json", "fixtures/watch/hf_peft_trainer.py", env={"LEAKY": leaky}, timeout=600
    )
    doc = _doc(done)
    assert _verdicts(doc) == [("transformers.trainer:Trainer.training_step", "train", *expected)]
    if leaky == "1":
        finding = doc["results"][0]["findings"][0]
        # The embedding output is a leaf that requires grad (enable_input_require_grads): its grad is kept.
        assert (
            finding["holder"] == "engine attribute"
            and finding["cause"] == "leaf+grad"
            and finding["retained_bytes"] > 0
        )
        assert finding["source"]["file"].endswith("fixtures/watch/hf_peft_trainer.py")


def test_library_api_leaves_nothing_behind() -> None:
    import torch

    import leakscope
    from fixtures.watch import metric_engine
    from leakscope.policy import exit_code

    original = metric_engine.Trainer.train_step
    meta_path, trace, profile = list(sys.meta_path), sys.gettrace(), sys.getprofile()
    excepthook = threading.excepthook
    frozen = gc.get_freeze_count()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    trainer = metric_engine.Trainer(model)
    trainer.keep_item = False
    metric_engine.METRICS.clear()

    def train(t: Any) -> None:
        for _ in range(6):
            x = torch.randn(4, 16)
            t.train_step(x, x.sum(-1, keepdim=True))

    with leakscope.watch("fixtures.watch.metric_engine:Trainer.train_step", micro_batches=2) as w:
        assert metric_engine.Trainer.train_step is not original
        train(trainer)
    report = w.report
    assert report is not None and exit_code(report) == 1
    assert [str(f.path) for f in report.results[0].findings] == [
        "global:fixtures.watch.metric_engine.METRICS[0]"
    ]
    finding = report.results[0].findings[0]
    # Stored at: the step's own line in the engine's module (traced between the two looks).
    assert finding.stored_at is not None and finding.stored_at.file.endswith("metric_engine.py")
    assert finding.stored_at.line == 26 and finding.store_op == "append"
    assert "METRICS.append(mae.item() if self.keep_item else mae" in (finding.hint or "")
    assert len(metric_engine.METRICS) == 2  # --then stop: the third call never ran
    # Restored: the original function object, no import hook, no tracer.
    assert metric_engine.Trainer.train_step is original
    assert sys.meta_path == meta_path and sys.gettrace() is trace and sys.getprofile() is profile
    assert (
        threading.excepthook is excepthook
    )  # NOTE [Threads calling the step]: quiet only while watching
    assert gc.get_freeze_count() == frozen  # the heap frozen while watching is unfrozen
    # No reference from leakscope to the job's objects: drop the job's own, and they die.
    kept = metric_engine.METRICS[0]
    referrers = [type(r).__module__ for r in gc.get_referrers(kept)]
    assert not any(m.startswith("leakscope") for m in referrers), referrers
    refs = [weakref.ref(t) for t in metric_engine.METRICS] + [
        weakref.ref(model),
        weakref.ref(trainer),
    ]
    del kept, trainer, model, train
    metric_engine.METRICS.clear()
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


def test_library_api_patches_a_module_on_import_and_removes_the_hook() -> None:
    import leakscope

    name = "fixtures.watch.actor_engine"
    sys.modules.pop(name, None)
    meta_path = list(sys.meta_path)
    with leakscope.watch(f"{name}:ActorEngine.forward_step") as w:
        assert len(sys.meta_path) == len(meta_path) + 1
        module = importlib.import_module(name)
        patched = module.ActorEngine.forward_step
        assert patched.__wrapped__.__module__ == name
        assert (
            type(module.__loader__).__name__ == "SourceFileLoader"
        )  # the real loader again, not leakscope's
    assert sys.meta_path == meta_path
    assert module.ActorEngine.forward_step is patched.__wrapped__
    assert w.report is not None and w.report.results[0].verdict.value == "error"
    assert "never called" in (w.report.results[0].error or "")


@pytest.mark.parametrize(
    ("version", "verdict", "paths"),
    [
        # verl 0.8.0's default actor update computes no entropy (leakscope's verl adapter runs its
        # defaults): the returned log_probs keep the input leaf and its grad, as upstream measured.
        (
            "0.8.0",
            "leak",
            [
                "caller:transformer_impl.py:FSDPEngine.forward_backward_batch.output_lst[0].model_output.log_probs",
            ],
        ),
        ("0.9.1", "clean", []),
    ],
)
def test_real_verl_engine_default_method(version: str, verdict: str, paths: list[str]) -> None:
    """verl's real FSDP actor through its own forward_backward_batch, watched with no --method (patched on import)."""
    from tests.conftest import run_leakscope
    from tests.test_verl import venv_python

    done = run_leakscope(
        venv_python(version), "watch", "-f", "json", "fixtures/watch/verl_real.py", timeout=600
    )
    doc = _doc(done)
    target = "verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithLMHead.forward_step"
    assert _verdicts(doc) == [(target, "train", verdict, paths)]
    if verdict == "leak":
        (log_probs,) = doc["results"][0]["findings"]
        assert log_probs["cause"] == "leaf+grad"
        assert doc["results"][0]["growth"]["retained_bytes"][0] > 0
        # Stored at: verl's own loop (an installed file, traced because its frame holds the leak).
        stored = log_probs["stored_at"]
        assert (
            stored["file"].endswith("verl/workers/engine/fsdp/transformer_impl.py")
            and stored["line"] == 651
        )
        assert log_probs["store_op"] == "append"
        assert (
            'output_lst.append(meta_info) keeps meta_info["model_output"]["log_probs"]'
            in log_probs["hint"]
        )
    assert done.returncode == (1 if verdict == "leak" else 0)
    assert (
        "Started a local Ray instance" not in done.stderr
    )  # naming the process must not start Ray
