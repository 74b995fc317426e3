"""Adapters whose framework runs backward itself (``runs_backward = True``).

The subject is a real mini framework (fixtures/self_backward.py) whose
``training_step`` calls ``loss.backward()`` and returns ``loss.detach()``, as
TRL's does. leakscope must call the adapter's ``step``, never backward itself,
and still find what the trainer keeps.
"""

from __future__ import annotations

import pytest

from fixtures import self_backward
from leakscope.adapters.registry import spec_for
from leakscope.diagnose.judge import judge
from leakscope.harness.target import resolve
from leakscope.options import CheckOptions
from leakscope.results import Mode

pytestmark = pytest.mark.unit


def _judge(name: str, mode: Mode) -> object:
    resolved = resolve(f"fixtures.self_backward:{name}")
    spec = spec_for(self_backward.ADAPTER, resolved)
    assert spec.runs_backward
    return judge(spec, mode, CheckOptions())


def test_leaky_trainer_named_and_grows() -> None:
    result = _judge("KeepLossTrainer", Mode.TRAIN)
    assert result.verdict.value == "leak", result
    assert [str(f.path) for f in result.findings] == ["engine.history[0]"]
    assert all(f.confirmed for f in result.findings)
    assert result.growth is not None and result.growth.slope_bytes > 0


@pytest.mark.parametrize("mode", [Mode.TRAIN, Mode.FORWARD_ONLY])
def test_clean_twin_passes(mode: Mode) -> None:
    result = _judge("KeepDetachedTrainer", mode)
    assert result.verdict.value == "clean", result
    assert result.growth is not None and result.growth.slope_bytes == 0
