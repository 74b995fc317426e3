"""Every fixture engine gets exactly its declared verdict and finding paths, in both modes."""

from __future__ import annotations

import importlib

import pytest

import leakscope
from leakscope.options import CheckOptions
from tests.conftest import fixture_modules, fixture_target

pytestmark = pytest.mark.unit

FIXTURES = fixture_modules()


def test_fixture_corpus_has_leaky_and_clean_subjects() -> None:
    verdicts = {
        importlib.import_module(f"fixtures.{name}").EXPECTED["train"][0] for name in FIXTURES
    }
    assert verdicts == {"leak", "clean"}
    assert len(FIXTURES) >= 18


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_verdict_and_paths(name: str) -> None:
    expected = importlib.import_module(f"fixtures.{name}").EXPECTED
    report = leakscope.check(fixture_target(name), CheckOptions())
    got = {
        r.mode.value: (r.verdict.value, [str(f.path) for f in r.findings]) for r in report.results
    }
    want = {mode: (verdict, list(paths)) for mode, (verdict, paths) in expected.items()}
    assert got == want
    kinds = getattr(importlib.import_module(f"fixtures.{name}"), "KIND", {})
    for result in report.results:
        assert result.error is None
        if result.verdict.value == "leak":  # NOTE [Leak kinds]: declared bounded, else growing
            assert result.kind == kinds.get(result.mode.value, "growing"), result
        else:
            assert result.kind is None
        _assert_growth_matches_verdict(result, name)
        for finding in result.findings:
            assert finding.confirmed, f"{finding.path} was not confirmed"
            if finding.severity == "leak" and finding.cause != "nodes-only":
                assert finding.retained_bytes > 0, finding


# Fixtures whose leak grows every other micro-batch rather than on each one.
PERIODIC = {"every_other", "periodic_log"}


def _assert_growth_matches_verdict(result, name: str) -> None:  # type: ignore[no-untyped-def]
    """A leak grows linearly over micro-batches; a clean engine is a flat line."""
    growth = result.growth
    assert growth is not None and len(growth.retained_bytes) == 3
    steps = [b - a for a, b in zip(growth.retained_bytes, growth.retained_bytes[1:])]
    node_steps = [b - a for a, b in zip(growth.graph_nodes, growth.graph_nodes[1:])]
    if result.kind == "bounded":  # one step's graph, replaced by the next: flat and non-zero
        assert growth.retained_bytes[-1] > 0 and (name in PERIODIC or steps == [0, 0]), growth
    elif result.verdict.value == "leak":
        if growth.slope_bytes > 0 and name in PERIODIC:
            assert growth.retained_bytes[-1] > growth.retained_bytes[0], growth  # grows, in steps
        elif growth.slope_bytes > 0:
            assert steps[0] == steps[1] > 0, growth  # linear
        else:  # nodes-only: no bytes, but the graph keeps growing
            assert node_steps[0] == node_steps[1] > 0, growth
    else:
        assert growth.slope_bytes == 0 and steps == [0, 0], growth
        assert node_steps == [0, 0], growth
