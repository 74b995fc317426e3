"""Issue 27's probe classes, each beside its clean look-alike: no verdict an engine did not earn.

The micro-batch is one consistent mapping (tests/test_micro_batch_keys.py); the writer and the config
have tests/test_output_targets.py; interrupts have tests/test_zygote.py. Here: the holders that had
no name (a ``.grad`` left with a graph by ``create_graph=True``, a cycle the engine's disabled
collector never frees), run through the library in process, with the process's state checked after.
"""

from __future__ import annotations

import gc

import pytest

import leakscope
from leakscope.options import CheckOptions
from leakscope.results import Mode

pytestmark = pytest.mark.integration


def _check(*targets: str) -> list[tuple[str, list[str], list[str]]]:
    report = leakscope.check(list(targets), CheckOptions(modes=(Mode.TRAIN,), isolate=False))
    return [
        (
            r.verdict.value,
            [str(f.path) for f in r.findings],
            [f.severity.value for f in r.findings],
        )
        for r in report.results
    ]


def test_a_grad_left_with_a_graph_is_named_and_confirmed() -> None:
    """``penalty.backward(create_graph=True, inputs=[t])`` leaves every step's graph in ``t.grad``:
    named ``engine.temperature.grad`` (it was "<unknown holder>"); without create_graph, clean."""
    (leaky, clean) = _check("fixtures.grad_graph:Engine", "fixtures.grad_graph_clean:Engine")
    assert leaky == ("leak", ["engine.temperature.grad"], ["leak"])
    assert clean == ("clean", [], [])


def test_a_cycle_the_engine_never_collects_is_a_leak_and_the_collector_comes_back() -> None:
    """``gc.disable()`` in the engine: its cycle holding the step's graph is a leak (it was a warning),
    the look-alike with a detached tensor is clean, and after the check the collector is on again."""
    assert gc.isenabled()
    thresholds = gc.get_threshold()
    (leaky, clean, warned) = _check(
        "fixtures.gc_off:Engine", "fixtures.gc_off_clean:Engine", "fixtures.cycle_until_gc:Engine"
    )
    assert leaky == ("leak", ["<reference cycle>"], ["leak"])
    assert clean == ("clean", [], [])
    assert warned == ("clean", ["<reference cycle>"], ["warning"])  # the collector on: a warning
    assert gc.isenabled() and gc.get_threshold() == thresholds


def test_a_graph_the_collector_saved_in_gc_garbage_is_named_there() -> None:
    """``gc.set_debug(gc.DEBUG_SAVEALL)`` in the engine: its cycle's graph lives in ``gc.garbage``,
    named ``global:gc.garbage[i]`` with a fix that names the flag (it was "<unknown holder>"); the
    look-alike whose cycle holds a detached tensor is clean. Isolated: the flag stays in the child."""
    report = leakscope.check(
        ["fixtures.gc_saveall:Engine", "fixtures.gc_saveall_clean:Engine"],
        CheckOptions(modes=(Mode.TRAIN,), isolate=True),
    )
    leaky, clean = report.results
    assert leaky.verdict.value == "leak", leaky
    paths = [str(f.path) for f in leaky.findings]
    assert paths and all(p.startswith("global:gc.garbage[") for p in paths), paths
    assert any("DEBUG_SAVEALL" in f.hint for f in leaky.findings)  # a node held there: node_fix
    assert (clean.verdict.value, clean.findings) == ("clean", ())
    assert gc.get_debug() == 0  # set in the child only


def test_the_collector_s_debug_flags_come_back_after_an_in_process_check() -> None:
    """An engine that sets ``DEBUG_SAVEALL`` in the checking process: the flag is gone after the check."""
    try:
        (clean,) = _check("fixtures.gc_saveall_clean:Engine")
        assert clean[0] == "clean"
        assert gc.get_debug() == 0
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
