"""``check`` and ``watch`` find leaks through the one judge (issue 20): the same engine, driven by
``check`` on its tiny model and by a real loop under ``watch``, gives the same holder, kind, bytes
and fix; and the accounting both use matches the heap (issue 18)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import leakscope
from leakscope.models.tiny import build_micro_batch, build_model, loss_function
from leakscope.options import CheckOptions, ModelSize
from leakscope.probe.cost import heap_bytes
from leakscope.results import Mode

pytestmark = pytest.mark.unit

TRAIN = CheckOptions(modes=(Mode.TRAIN,))


def _watch_loop(target: str, engine_class: Any, steps: int = 5) -> leakscope.TargetResult:
    size = ModelSize()
    engine = engine_class(build_model("peft-checkpoint", size))
    with leakscope.watch(f"{target}.forward_step", micro_batches=3) as w:
        for i in range(steps):
            loss, output = engine.forward_step(build_micro_batch(size, i), loss_function, False)
            loss.backward()
    assert w.report is not None
    (result,) = w.report.results
    return result


def _fix(hint: str) -> str:
    """A watch hint starts with the leak kind in words ("growing: keeps a graph of ..."; ...)."""
    return hint.split("; ", 1)[1] if hint.startswith(("growing:", "bounded:")) else hint


@pytest.mark.parametrize("name", ["thread_forward", "class_accumulator"])
def test_check_and_watch_give_the_same_holder_kind_bytes_and_fix(name: str) -> None:
    import importlib

    module = importlib.import_module(f"fixtures.{name}")
    (checked,) = leakscope.check(f"fixtures.{name}:Engine", TRAIN).results
    watched = _watch_loop(f"fixtures.{name}:Engine", module.Engine)
    assert checked.verdict.value == watched.verdict.value == "leak"
    by_path = {str(f.path): f for f in checked.findings}
    for w in watched.findings:
        c = by_path[str(w.path)]
        assert (w.holder, w.kind, w.cause) == (c.holder, c.kind, c.cause)
        assert w.retained_bytes == c.retained_bytes > 0
        assert w.graph_nodes == c.graph_nodes
        assert w.stored_at == c.stored_at and w.stored_at is not None
        assert _fix(w.hint) == c.hint


def _heap_freed_by(release: Any) -> int:
    gc.collect()
    before = heap_bytes()
    release()
    gc.collect()
    after = heap_bytes()
    assert before is not None and after is not None
    return before - after


@pytest.mark.parametrize("name", ["verl_bug", "kept_losses"])
def test_the_bytes_per_micro_batch_are_what_the_heap_gives_back(name: str) -> None:
    """NOTE [One accounting]: a leak's bytes per micro-batch (its tensors, its checkpoint frames and
    its nodes at their measured cost) are what releasing one micro-batch's outputs gives back to the
    allocator, within 10%: for activations kept before backward, and for nodes-only graphs after it."""
    import importlib

    if heap_bytes() is None:
        pytest.skip("the C allocator's heap cannot be counted here (not glibc)")
    (result,) = leakscope.check(f"fixtures.{name}:Engine", TRAIN).results
    assert result.verdict.value == "leak" and result.retained_bytes > 0
    engine_class = importlib.import_module(f"fixtures.{name}").Engine
    size = ModelSize()
    model = build_model("peft-checkpoint", size)
    model.record_probes = False
    engine = engine_class(model)
    outputs, steps = [], 40
    for i in range(steps + 2):
        loss, output = engine.forward_step(build_micro_batch(size, i), loss_function, False)
        if loss.requires_grad and not getattr(engine, "runs_backward", False):
            loss.backward()
        outputs.append(output)
        del loss, output
    outputs[:2] = []  # warm-up steps: the allocator's first pools
    freed = _heap_freed_by(lambda: (outputs.clear(), _clear_engine(engine)))
    assert abs(steps * result.retained_bytes - freed) / freed < 0.10, (
        result.retained_bytes,
        freed / steps,
    )


def _clear_engine(engine: Any) -> None:
    for value in vars(engine).values():
        if isinstance(value, list):
            value.clear()
