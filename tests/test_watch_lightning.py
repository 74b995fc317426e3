"""`leakscope watch` on a real Lightning `Trainer.fit` (fixtures/watch/lightning_fit.py), no --method.

Runs `.venv-lightning/bin/leakscope watch` (made by .ci/setup-lightning.sh) in a subprocess:
Lightning's strategy `training_step` is patched when the script imports Lightning, and the
findings are named from the user's `LightningModule` (`engine.`), as `check`'s Lightning
adapter names them (tests/test_lightning.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, framework_python, run_leakscope

pytestmark = pytest.mark.frameworks

SCRIPT = "fixtures/watch/lightning_fit.py"
TARGET = "pytorch_lightning.strategies.strategy:Strategy.training_step"
#: what the script prints when fit returned, and the functions it finds afterwards
FIT_DONE = [
    "fit done: 6 steps",
    "Strategy.training_step: training_step in strategy.py",
    "LitRegressor.training_step: training_step in lightning_fit.py",
]


def _watch(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    python = framework_python(ROOT / ".venv-lightning", ".ci/setup-lightning.sh")
    done = run_leakscope(python, "watch", "-f", "json", *args, timeout=300)
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"no JSON on stdout (rc {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}"
        ) from None
    return done, doc


def _line_of(text: str) -> int:
    lines = Path(ROOT, SCRIPT).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _verdicts(doc: dict[str, Any]) -> list[tuple[str, str, str, list[str]]]:
    return [
        (r["target"], r["mode"], r["verdict"], [f["path"] for f in r["findings"]])
        for r in doc["results"]
    ]


def _job_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The script's own printed lines (the job's stdout goes to stderr under watch)."""
    return [
        line
        for line in done.stderr.splitlines()
        if line.split(":", 1)[0]
        in ("fit done", "Strategy.training_step", "LitRegressor.training_step")
    ]


def test_epoch_outputs_list_is_named_on_the_lightning_module_and_grows() -> None:
    """Lightning's docstring pattern, self.training_step_outputs.append(loss): a graph per step."""
    done, doc = _watch(SCRIPT)
    assert _verdicts(doc) == [(TARGET, "train", "leak", ["engine.training_step_outputs[0]"])]
    result = doc["results"][0]
    assert result["kind"] == "growing"
    (finding,) = result["findings"]
    assert finding["holder"] == "engine attribute"
    assert finding["kind"] == "growing"
    assert finding["grad_fn"] == "MseLossBackward0"
    # After Lightning's backward the saved tensors are freed: the nodes stay, one set per step.
    assert finding["cause"] == "nodes-only"
    assert result["growth"]["nodes_by_micro_batch"] == [6, 6, 6]
    line = _line_of("loss = torch.nn.functional.mse_loss(self.net(x), y)")
    assert finding["source"] == {"file": SCRIPT, "line": line, "function": "training_step"}
    # The fix names the list as the user's training_step spells it, not the strategy's private attribute.
    assert finding["hint"].startswith(
        "growing: keeps a graph of every call (3 of 3 watched calls); "
    )
    assert "_lightning_module" not in finding["hint"]
    # Stored at: the user's append, seen while the fit was traced after the first leaky look.
    assert (finding["stored_at"]["file"], finding["stored_at"]["line"], finding["store_op"]) == (
        "fixtures/watch/lightning_fit.py",
        43,
        "append",
    )
    assert finding["hint"].endswith(
        "at fixtures/watch/lightning_fit.py:43 in training_step: self.training_step_outputs.append(kept.detach())"
    )
    assert [c["mode"] for c in doc["watch"]["calls"]] == ["train"] * 3
    assert doc["watch"]["methods"] == [TARGET]
    # --then stop: WatchStop went through Lightning's _call_and_handle_interrupt (which re-raises
    # a BaseException after its teardown) and ended fit: no error result, the script never printed.
    assert _job_lines(done) == []
    assert done.returncode == 1


def test_detached_epoch_outputs_are_clean() -> None:
    done, doc = _watch(SCRIPT, "--detach")
    assert _verdicts(doc) == [(TARGET, "train", "clean", [])]
    assert doc["results"][0]["growth"]["retained_bytes"] == [0, 0, 0]
    assert doc["results"][0]["growth"]["nodes_by_micro_batch"] == [0, 0, 0]
    assert done.returncode == 0


def test_torchmetrics_forward_cache_is_bounded() -> None:
    """MeanMetric fed the attached loss keeps only the latest step's graph in _forward_cache."""
    done, doc = _watch(SCRIPT, "--metric")
    assert _verdicts(doc) == [(TARGET, "train", "leak", ["engine.train_loss._forward_cache"])]
    result = doc["results"][0]
    assert result["kind"] == "bounded"
    (finding,) = result["findings"]
    assert (finding["kind"], finding["grad_fn"]) == ("bounded", "CloneBackward0")
    assert finding["hint"].startswith("bounded: keeps the graph of call 2 only")
    # Stored at: the user's line that fed the metric (torchmetrics' own lines run untraced).
    assert (finding["stored_at"]["file"], finding["stored_at"]["line"], finding["store_op"]) == (
        "fixtures/watch/lightning_fit.py",
        41,
        "metric",
    )
    assert finding["hint"].endswith(
        "feed the metric a detached value at fixtures/watch/lightning_fit.py:41 in training_step:"
        " self.train_loss(kept.detach())"
    )
    assert finding["source"] == {
        "file": SCRIPT,
        "line": _line_of("self.train_loss(kept)"),
        "function": "training_step",
    }
    assert (
        result["growth"]["nodes_by_micro_batch"][:2] == [0, 0]
        and result["growth"]["nodes_by_micro_batch"][2] > 0
    )
    assert (
        len(set(result["growth"]["retained_bytes"])) == 1
        and result["growth"]["retained_bytes"][0] > 0
    )
    assert done.returncode == 1


def test_metric_fed_a_detached_loss_is_clean() -> None:
    done, doc = _watch(SCRIPT, "--metric", "--detach")
    assert _verdicts(doc) == [(TARGET, "train", "clean", [])]
    assert done.returncode == 0


@pytest.mark.parametrize(
    ("flags", "verdict", "code"), [((), "leak", 1), (("--detach",), "clean", 0)]
)
def test_then_continue_lets_fit_finish_with_nothing_patched(
    flags: tuple[str, ...], verdict: str, code: int
) -> None:
    """--then continue: every patch removed after the last look, fit runs its 6 steps, and the
    script finds the original functions on the strategy and on its module."""
    done, doc = _watch("--then", "continue", SCRIPT, *flags)
    assert [r["verdict"] for r in doc["results"]] == [verdict]
    assert len(doc["watch"]["calls"]) == 3
    assert _job_lines(done) == FIT_DONE
    assert done.returncode == code
