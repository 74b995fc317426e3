"""`leakscope watch SCRIPT.py` with no flags, on plain PyTorch scripts (fixtures/watch/scripts/).

Each script keeps graphs in a shape people write without a framework and has a clean look-alike
(``--clean``: ``.item()``, ``.detach()``, ``no_grad``). What each one keeps is confirmed without
leakscope first: the autograd nodes reachable from live tensors, counted through ``gc`` after 4 and
8 iterations, grow for the leaky one and stay put for its twin. Then ``watch`` must find the steps
itself (NOTE [Steps from autograd]), say LEAK or CLEAN, name the user's variable and exit 1 or 0.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

SCRIPTS = ROOT / "fixtures" / "watch" / "scripts"

#: script -> (the boundary watch uses, the holder path it names for the leaky variant)
CASES: dict[str, tuple[str, str]] = {
    "sum_loss": ("backward", "sum_loss.py:total_loss"),
    "loss_list": ("backward", "caller:loss_list.py:train.losses[0]"),
    "homegrown_trainer": (
        "backward",
        "caller:homegrown_trainer.py:Trainer.training_step.self.outputs[0]",
    ),
    "eval_loop": ("module call", "caller:eval_loop.py:evaluate.predictions[0]"),
    "rnn_stream": ("backward", "caller:rnn_stream.py:stream.hidden"),
    "ema": ("backward", "caller:ema.py:train.ema['0.weight']"),
    "gan": ("backward", "caller:gan.py:train.scores[0]"),
    "grad_accum": ("backward", "caller:grad_accum.py:train.epoch_losses[0]"),
    "closure": ("backward", "caller:closure.py:train.log.seen[0]"),
    "generator": ("backward", "caller:generator.py:losses.produced[0]"),
    # the micro-batch in which torch.compile compiles is a warm-up, not watched: outputs[1] on
    "compiled": ("backward", "caller:compiled.py:train.outputs[1]"),
    "amp": ("backward", "caller:amp.py:train.history.loss[0]"),
    "multi_opt": ("backward", "caller:multi_opt.py:train.codes[0]"),
    # DistributedDataParallel on gloo, a group of one here (under torchrun: the test below)
    "ddp_gloo": ("backward", "caller:ddp_gloo.py:main.epoch_loss"),
    # imports transformers' Trainer (patched, never called) and trains with a loop of its own
    # (NOTE [A framework imported, not used]): watched from after the first backward, losses[1] on
    "framework_unused": ("backward", "caller:framework_unused.py:Trainer.train.losses[1]"),
}


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **extra)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def _counts(script: str, clean: bool) -> tuple[int, int]:
    """Graph nodes alive after 4 and 8 iterations, counted by the script itself (no leakscope)."""
    args = [str(SCRIPTS / f"{script}.py"), "--steps", "8", *(["--clean"] if clean else [])]
    done = _run(args, _env(LEAKSCOPE_FIXTURE_COUNT="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    found = dict(
        (int(k), int(v))
        for k, v in re.findall(r"graph nodes alive after (\d+) steps: (\d+)", done.stdout)
    )
    return found[4], found[8]


def _watch(script: str, clean: bool) -> tuple[int, dict[str, Any], str]:
    args = ["-m", "leakscope", "watch", "-f", "json", f"fixtures/watch/scripts/{script}.py"]
    done = _run([*args, *(["--clean"] if clean else [])], _env())
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"rc {done.returncode}: {done.stderr[-3000:]}") from None
    return done.returncode, doc, done.stderr


@functools.cache
def _result(script: str, clean: bool) -> Any:
    """One script, leaky or clean: its node counts without leakscope and its no-flag watch."""
    return _counts(script, clean), _watch(script, clean)


@pytest.fixture
def runs() -> Any:
    """``runs[(script, clean)]``, each made once per session, when a test first needs it."""

    class Runs:
        def __getitem__(self, key: tuple[str, bool]) -> Any:
            return _result(*key)

    return Runs()


@pytest.mark.parametrize("script", sorted(CASES))
def test_leaky_script_is_confirmed_without_leakscope_and_named_by_watch(
    script: str, runs: dict[tuple[str, bool], Any]
) -> None:
    (at4, at8), (code, doc, stderr) = runs[(script, False)]
    assert at8 > at4, f"{script} should keep more graph nodes after 8 steps than after 4"
    boundary, holder = CASES[script]
    assert code == 1, stderr[-3000:]
    (result,) = doc["results"]
    assert result["verdict"] == "leak"
    assert holder in [f["path"] for f in result["findings"]]
    watch = doc["watch"]
    assert watch["boundary"] == boundary
    assert watch["methods"] == []
    assert watch["loop"].startswith(f"fixtures/watch/scripts/{script}.py:")
    assert result["target"].startswith(
        ("backward() at " if boundary == "backward" else "Sequential() at ") + watch["loop"]
    )
    assert len(watch["calls"]) == 3


@pytest.mark.parametrize("script", ["sum_loss", "ddp_gloo"])
def test_a_running_sum_tells_one_story_of_bytes(
    script: str, runs: dict[tuple[str, bool], Any]
) -> None:
    """A running sum (``total += loss``) holds only the latest graph at the first look, and one graph
    more at each later look: its growth starts at one micro-batch's bytes (not 0 B), grows by the
    same each look, and the headline, the row and the slope say that one figure (NOTE [One
    accounting])."""
    _, (code, doc, _) = runs[(script, False)]
    (result,) = doc["results"]
    growth = result["growth"]["retained_bytes"]
    assert code == 1 and len(growth) == 3 and growth[0] > 0
    assert growth == [growth[0] * k for k in (1, 2, 3)]
    assert result["retained_bytes"] == growth[0] == round(result["growth"]["slope_bytes"])
    (row,) = [f for f in result["findings"] if f["severity"] == "leak"]
    assert (row["kind"], row["retained_bytes"]) == ("growing", growth[0])


@pytest.mark.parametrize("script", sorted(CASES))
def test_clean_look_alike_is_clean(script: str, runs: dict[tuple[str, bool], Any]) -> None:
    (at4, at8), (code, doc, stderr) = runs[(script, True)]
    assert at8 == at4, f"{script} --clean should keep the same graph nodes after 8 steps as after 4"
    assert code == 0, stderr[-3000:]
    assert [r["verdict"] for r in doc["results"]] == ["clean"]
    assert doc["watch"]["boundary"] == CASES[script][0]


def test_gradient_accumulation_numbers_micro_batches_by_optimizer_step(
    runs: dict[tuple[str, bool], Any],
) -> None:
    """Four micro-batches per optimizer step: the three watched ones belong to the first step; a loop
    that steps every micro-batch numbers them 1, 2, 3."""
    accumulated = runs[("grad_accum", True)][1][1]["watch"]["calls"]
    plain = runs[("loss_list", True)][1][1]["watch"]["calls"]
    assert [c["optimizer_step"] for c in accumulated] == [0, 0, 0]
    assert [c["optimizer_step"] for c in plain] == [1, 2, 3]


def test_inference_job_is_stepped_by_module_calls_in_forward_only_mode(
    runs: dict[tuple[str, bool], Any],
) -> None:
    doc = runs[("eval_loop", True)][1][1]
    assert [r["mode"] for r in doc["results"]] == ["forward-only"]
    assert [c["mode"] for c in doc["watch"]["calls"]] == ["forward-only"] * 3


def test_job_that_never_runs_a_step_says_so(tmp_path: Any) -> None:
    script = tmp_path / "no_step.py"
    script.write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    done = _run(["-m", "leakscope", "watch", str(script)], _env())
    assert done.returncode == 3
    assert "the job never ran a step: it called no backward()" in done.stderr
    assert "never imported" not in done.stderr


def test_watch_in_process_leaves_no_hook_or_patch_behind() -> None:
    """The library API with no methods: steps from a plain loop, then torch exactly as it was."""
    code = """
import torch, leakscope
from torch.nn.modules import module as m
from torch.optim import optimizer as o
backward, grad = torch.autograd.backward, torch.autograd.grad
hooks = (len(m._global_forward_pre_hooks), len(m._global_forward_hooks), len(o._global_optimizer_post_hooks))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
kept = []
with leakscope.watch() as w:
    for _ in range(6):
        loss = model(torch.randn(2, 4)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(loss)
assert torch.autograd.backward is backward and torch.autograd.grad is grad
assert (len(m._global_forward_pre_hooks), len(m._global_forward_hooks), len(o._global_optimizer_post_hooks)) == hooks
print(w.report.watch.boundary, w.report.results[0].verdict.value, len(kept))
"""
    done = _run(["-c", code], _env())
    assert done.returncode == 0, done.stderr[-3000:]
    # stopped when the 4th iteration's forward starts (the look after the 3rd micro-batch)
    assert done.stdout.split() == ["backward", "leak", "3"]


def test_every_torchrun_rank_is_watched_with_no_flags() -> None:
    """``torchrun ... -m leakscope watch SCRIPT.py`` on a DistributedDataParallel job on gloo: each
    rank finds its steps from autograd, rank 0 prints the merged report (and exits 1 for the leak,
    so torchrun reports its failure)."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    done = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "leakscope",
            "watch",
            "-f",
            "json",
        ]
        + ["fixtures/watch/scripts/ddp_gloo.py"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = json.loads(done.stdout)
    assert doc["watch"]["processes"] == ["rank 0", "rank 1"]
    assert doc["watch"]["boundary"] == "backward"
    assert [(r["verdict"], [f["path"] for f in r["findings"]]) for r in doc["results"]] == [
        ("leak", ["caller:ddp_gloo.py:main.epoch_loss"])
    ]
    assert done.returncode != 0, done.stderr[-3000:]


def _bounded_watch(
    script: str, variant: list[str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """A script that keeps one step's graph into the next forward (or, ``--clean``, none): confirmed
    without leakscope (nodes alive when each forward starts: none for the twin, some each time for
    the leaky one), then watched with no flags; the run and its one result."""
    counted = _run([script, "--steps", "4", *variant], _env(LEAKSCOPE_FIXTURE_COUNT="1"))
    alive = [int(n) for n in re.findall(r"graph nodes alive at forward \d+: (\d+)", counted.stdout)]
    assert len(alive) == 3 and (min(alive) > 0 if not variant else alive == [0, 0, 0]), (
        counted.stdout
    )
    done = _run(["-m", "leakscope", "watch", "-f", "json", script, *variant], _env())
    (result,) = json.loads(done.stdout)["results"]
    return done, result


@pytest.mark.parametrize("clean", [False, True])
def test_a_graph_alive_when_the_next_forward_starts_is_bounded(clean: bool) -> None:
    """NOTE [The loop's latest result]: ``self.last_loss = loss`` keeps one step's graph into the next
    step's forward (bounded: the peak holds two); the loop does not rebind an object's attribute, so
    it is a finding, where the loop's own ``loss`` is not. The twin keeps ``loss.item()``. Confirmed
    without leakscope first: autograd nodes reachable from live tensors when each forward starts."""
    script = str(SCRIPTS / "last_loss.py")
    variant = ["--clean"] if clean else []
    done, result = _bounded_watch(script, variant)
    leaks = {(f["path"], f["kind"]) for f in result["findings"] if f["severity"] == "leak"}
    if clean:
        assert (done.returncode, result["verdict"], leaks) == (0, "clean", set()), done.stderr
    else:
        assert (done.returncode, result["verdict"]) == (1, "leak"), done.stderr
        assert leaks == {("caller:last_loss.py:Trainer.training_step.self.last_loss", "bounded")}


@pytest.mark.parametrize("clean", [False, True])
def test_a_gradient_kept_with_its_graph_is_reset_not_detached(clean: bool) -> None:
    """NOTE [A gradient that keeps a graph]: ``loss.backward(create_graph=True)`` with the slots reset
    only after the next forward keeps each ``p.grad``'s graph into the next step (bounded). The fix
    resets the slot; it never detaches the loss (that would leave no gradient), and its line (the
    backward) gets no detach edit. The twin resets after ``optimizer.step()``. Confirmed without
    leakscope first: autograd nodes reachable from live tensors when each forward starts."""
    script = str(SCRIPTS / "second_order.py")
    variant = ["--clean"] if clean else []
    done, result = _bounded_watch(script, variant)
    leaks = [f for f in result["findings"] if f["severity"] == "leak"]
    if clean:
        assert (done.returncode, result["verdict"], leaks) == (0, "clean", []), done.stderr
        return
    assert (done.returncode, result["verdict"]) == (1, "leak"), done.stderr
    assert {(f["path"].rsplit(".", 1)[-1], f["kind"]) for f in leaks} == {("grad", "bounded")}
    for f in leaks:
        assert "zero_grad(set_to_none=True)" in f["hint"]
        assert ".detach()" not in f["hint"] and f["edit"] is None, f
