"""A step's graph is the graph it reaches, in any thread (issue 18): the loops of fixtures/watch/loops.py.

Each leaky loop keeps, across steps, a tensor *derived* from the step's loss (a
running sum, a clone, a product, a metric's running average, a reporter's sum of
squares, a logging library's history row) or a loss computed in a worker thread
(an executor, ``nn.DataParallel``'s thread per replica); each clean look-alike
keeps numbers, detached tensors or only the latest result. ``leakscope.watch``
must name the loop's holder, call it growing, size it above 0 B and word a fix
that detaches what carried the graph.
"""

from __future__ import annotations

import pytest

import leakscope
from fixtures.watch import loops

pytestmark = pytest.mark.integration

STEP = "fixtures.watch.loops:Stepper.step"


def _watch(name: str) -> leakscope.TargetResult:
    with leakscope.watch(STEP, micro_batches=3) as w:
        loops.run(name, steps=6)
    assert w.report is not None
    (result,) = w.report.results
    return result


@pytest.mark.parametrize("name", sorted(loops.LEAKY))
def test_a_loop_that_keeps_a_tensor_derived_from_each_step_is_a_growing_leak(name: str) -> None:
    result = _watch(name)
    assert result.verdict.value == "leak", result
    (finding,) = result.findings
    assert str(finding.path) == loops.LEAKY[name]
    assert finding.kind == result.kind == "growing"
    assert finding.retained_bytes > 0 and result.retained_bytes > 0
    growth = result.growth
    assert (
        growth is not None
        and growth.retained_bytes[-1] > growth.retained_bytes[0]
        and growth.slope_bytes > 0
    )


@pytest.mark.parametrize("name", loops.CLEAN)
def test_its_clean_look_alike_is_clean(name: str) -> None:
    result = _watch(name)
    assert result.verdict.value == "clean", result
    assert result.findings == ()


@pytest.mark.parametrize(
    ("name", "fixed"),
    [
        ("running_sum", "total += loss.detach()"),
        ("cloned", "kept.append(loss.detach().clone())"),
        ("scaled", "kept.append(loss.detach() * 2)"),
        (
            "ema",
            "self._value = x.detach() if self._value is None else self.alpha * self._value + (1 - self.alpha) * x.detach()",
        ),
        ("sum_squares", "self.sum_sq = self.sum_sq + err.detach()"),
    ],
)
def test_the_fix_detaches_what_carried_the_graph_on_the_stored_at_line(
    name: str, fixed: str
) -> None:
    (finding,) = _watch(name).findings
    assert finding.stored_at is not None and finding.stored_at.file == "fixtures/watch/loops.py"
    assert fixed in finding.hint, finding.hint


def test_a_container_stored_by_a_library_is_never_given_a_detach_it_cannot_take() -> None:
    (finding,) = _watch("library_history").findings
    assert ".detach()" not in finding.hint.replace("detached", "")  # dict(row).detach() would raise
    # the row is a dict: the tensor is named as code reaches it
    assert 'RUN.history[0]["loss"]' in finding.hint, finding.hint


def _watch_script(*args: str) -> dict[str, object]:
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakscope",
            "watch",
            "-f",
            "json",
            "--method",
            STEP,
            "fixtures/watch/module_loop.py",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


@pytest.mark.parametrize(
    "steps", ["3", "5"]
)  # 3: the job ends after the last watched call; 5: it is stopped
def test_a_module_level_loop_holding_its_latest_result_is_clean(steps: str) -> None:
    (result,) = _watch_script("--steps", steps)["results"]  # type: ignore[misc]
    assert result["verdict"] == "clean" and result["findings"] == []


def test_a_module_level_loop_that_keeps_every_loss_is_a_growing_leak() -> None:
    (result,) = _watch_script("--keep")["results"]  # type: ignore[misc]
    assert result["verdict"] == "leak" and result["kind"] == "growing"
    assert [f["path"] for f in result["findings"]] == ["module_loop.py:kept[0]"]
    assert "kept.append(loss.detach())" in result["findings"][0]["hint"]
