"""Shared test helpers: real fixtures, real torch, nothing mocked."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

from leakscope.paths import HolderPath, Segment, SegmentKind

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# Fixture engines import as `fixtures.<name>`; make the project root importable.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Two-core CI machines stall with competing intra-op threads; the tiny models
# gain nothing from them.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def fixture_modules() -> list[str]:
    """Every fixture module that declares EXPECTED verdicts."""
    names = []
    for path in sorted(FIXTURES.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module = importlib.import_module(f"fixtures.{path.stem}")
        if hasattr(module, "EXPECTED"):
            names.append(path.stem)
    return names


def fixture_target(name: str) -> str:
    module = importlib.import_module(f"fixtures.{name}")
    attr = getattr(module, "TARGET_ATTR", "Engine" if hasattr(module, "Engine") else "step")
    return f"fixtures.{name}:{attr}"


@pytest.fixture(autouse=True)
def _run_from_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def holder_path(root: str, *steps: str | int) -> HolderPath:
    """A hand-built holder path for renderer and policy tests: names are keys, ints are indices
    (``holder_path("output", "model_output", "entropy")`` is ``output.model_output.entropy``)."""
    return HolderPath(root, tuple(
        Segment(SegmentKind.INDEX, s) if isinstance(s, int) else Segment(SegmentKind.KEY, s) for s in steps
    ))
