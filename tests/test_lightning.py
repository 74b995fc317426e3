"""User LightningModules through the built-in Lightning adapter, in their own virtual environment.

``.ci/setup-lightning.sh`` creates ``.venv-lightning`` (pytorch-lightning 2.6.6,
lightning 2.6.6, torchmetrics 1.9.0, greenlet). Each test runs leakscope there
as a subprocess, exactly as a user would, on the ``fixtures/lightning_*.py``
modules. Without the venv these tests skip, unless ``LEAKSCOPE_REQUIRE_FRAMEWORKS=1``
or ``LEAKSCOPE_REQUIRE_VERL=1`` (CI) turns that into a failure.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, ROOT, framework_python, run_venv_check, venv_env

pytestmark = pytest.mark.frameworks

VENV = ROOT / ".venv-lightning"
#: every Lightning fixture, and the factory it is built with (None: ``Cls(model)``)
SUBJECTS = {
    "lightning_clean": None,
    "lightning_epoch_outputs": None,
    "lightning_epoch_outputs_clean": None,
    "lightning_manual": None,
    "lightning_manual_clean": None,
    "lightning_unified": None,
    "lightning_metric": "make_module",
    "lightning_metric_clean": "make_module",
}
#: the tiny model's next-token loss: one float32 scalar, and the leaf+grad its graph pins
#: (the embedding output PEFT-style input grads make a leaf: [2, 8, 32] float32, and its .grad)
LEAF_AND_GRAD_BYTES = 2 * 2 * 8 * 32 * 4


def venv_python() -> Path:
    return framework_python(VENV, ".ci/setup-lightning.sh")


def _target(name: str) -> str:
    attr = _literal(name, "TARGET_ATTR")
    return f"fixtures.{name}:{attr}"


def _literal(name: str, variable: str) -> Any:
    """A module-level constant of a fixture, read without importing it (no Lightning here)."""
    tree = ast.parse((FIXTURES / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == variable for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise KeyError(f"{name}.{variable}")


def _line_of(name: str, text: str) -> int:
    lines = (FIXTURES / f"{name}.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def run_check(*args: str) -> tuple[int, dict[str, Any]]:
    return run_venv_check(venv_python(), *args, timeout=600)


@pytest.fixture(scope="session")
def results() -> dict[tuple[str, str], dict[str, Any]]:
    """Every Lightning fixture in both modes: one leakscope run per factory."""
    venv_python()
    out: dict[tuple[str, str], dict[str, Any]] = {}
    plain = [_target(name) for name, factory in SUBJECTS.items() if factory is None]
    runs = [plain] + [
        [_target(name), "--factory", f"fixtures.{name}:{factory}"]
        for name, factory in SUBJECTS.items()
        if factory
    ]
    for args in runs:
        _, doc = run_check(*args, "--mode", "both")
        for result in doc["results"]:
            out[(result["target"], result["mode"])] = result
    return out


@pytest.mark.parametrize("name", list(SUBJECTS))
def test_every_lightning_fixture_gets_its_expected_verdict(
    results: dict[tuple[str, str], dict[str, Any]], name: str
) -> None:
    for mode, (verdict, paths) in _literal(name, "EXPECTED").items():
        result = results[(_target(name), mode)]
        assert result["error"] is None, result["error"]
        leaks = [f["path"] for f in result["findings"] if f["severity"] == "leak"]
        assert (result["verdict"], leaks) == (verdict, paths), (name, mode, result)


def test_epoch_output_list_grows_every_batch_of_the_epoch(
    results: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """Lightning's own docstring pattern, driven through Trainer.fit: one graph per batch, kept."""
    for name in (
        "lightning_epoch_outputs",
        "lightning_unified",  # import lightning.pytorch
        "lightning_manual",  # manual_backward
    ):
        result = results[(_target(name), "train")]
        (finding,) = result["findings"]
        assert finding["holder"] == "engine attribute"
        assert finding["confirmed"] is True
        assert finding["grad_fn"] == "NllLossBackward0"
        # the input leaf and its gradient, and the loss's graph nodes (NOTE [One accounting])
        assert finding["bytes_by_cause"]["leaf+grad"] == LEAF_AND_GRAD_BYTES
        assert (
            finding["retained_bytes"]
            == LEAF_AND_GRAD_BYTES + finding["bytes_by_cause"]["nodes-only"]
        )
        assert finding["bytes_by_cause"]["nodes-only"] > 0
        # the line that created the kept tensor: the loss
        line = _line_of(name, "loss = next_token_loss(self.net, batch)")
        assert finding["source"] == {
            "file": f"fixtures/{name}.py",
            "line": line,
            "function": "training_step",
        }
        assert ".append(loss.detach())" in finding["hint"]  # derived from the storing line
        growth = result["growth"]
        assert growth["retained_bytes"] == [finding["retained_bytes"] * k for k in (1, 2, 3)]
        assert growth["slope_bytes"] == finding["retained_bytes"]
        # every batch's graph is alive after the third batch: one epoch, three batches
        assert (
            len(set(growth["nodes_by_micro_batch"])) == 1 and growth["nodes_by_micro_batch"][0] > 0
        )


def test_torchmetrics_forward_cache_holds_one_step(
    results: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """torchmetrics 1.9.0 keeps the last attached value in ``_forward_cache``, and so does
    Lightning's logged copy of the metric: bounded (flat growth), but a graph between steps."""
    result = results[(_target("lightning_metric"), "train")]
    line = _line_of("lightning_metric", "self.train_loss(loss)")
    for finding in result["findings"]:
        assert finding["grad_fn"] == "CloneBackward0"
        assert finding["confirmed"] is True
        assert finding["bytes_by_cause"]["leaf+grad"] == LEAF_AND_GRAD_BYTES
        assert finding["source"] == {
            "file": "fixtures/lightning_metric.py",
            "line": line,
            "function": "training_step",
        }
    # the input leaf and its grad, the metric's cloned scalar (a few bytes of activations) and the
    # graph's nodes: one step's, flat
    growth = result["growth"]
    assert len(set(growth["retained_bytes"])) == 1
    tensors = growth["retained_bytes"][0] - result["findings"][0]["bytes_by_cause"].get(
        "nodes-only", 0
    )
    assert LEAF_AND_GRAD_BYTES < tensors <= LEAF_AND_GRAD_BYTES + 64
    assert growth["slope_bytes"] == 0
    assert growth["nodes_by_micro_batch"][:2] == [0, 0] and growth["nodes_by_micro_batch"][2] > 0


def test_clean_twins_hold_no_graph(results: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Detached twins are clean; a per-epoch list of detached losses still grows until the
    epoch ends, which is storage growth (a warning), not a leak. In forward-only mode the
    list ``validation_step`` fills grows batch after batch: the real validation loop ran
    each micro-batch inside one epoch."""
    for name, warnings in (
        ("lightning_clean", {}),
        ("lightning_metric_clean", {}),
        (
            "lightning_epoch_outputs_clean",
            {
                "train": ["engine.training_step_outputs"],
                "forward-only": ["engine.validation_step_outputs"],
            },
        ),
        ("lightning_manual_clean", {"train": ["engine.losses"]}),
    ):
        for mode in ("train", "forward-only"):
            result = results[(_target(name), mode)]
            assert result["verdict"] == "clean", (name, mode, result)
            assert [f["path"] for f in result["findings"]] == warnings.get(mode, []), (name, mode)
            assert all(f["cause"] == "storage-growth" for f in result["findings"])
            assert result["growth"]["retained_bytes"] == [0, 0, 0]


def test_a_lightning_check_leaves_nothing_behind() -> None:
    """No trainer, module, callback, greenlet or thread outlives the check; logging, warnings,
    grad and anomaly modes and the random streams are as they were."""
    python = venv_python()
    proc = subprocess.run(
        [
            str(python),
            str(ROOT / "tests" / "data" / "lightning_leftovers.py"),
            _target("lightning_epoch_outputs"),
            _target("lightning_unified"),
            _target("lightning_manual_clean"),
            f"{_target('lightning_metric')}=fixtures.lightning_metric:make_module",
        ],
        cwd=ROOT,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [v[2] for v in got["verdicts"]] == [
        "leak",
        "clean",
        "leak",
        "clean",
        "clean",
        "clean",
        "leak",
        "clean",
    ]
    assert got["left"] == {
        "trainers": 0,
        "modules": 0,
        "callbacks": 0,
        "greenlets": 0,
        "threads": 0,
        "adapter_runs": 0,
        "grad_enabled": True,
        "anomaly": False,
        "logger_levels_changed": False,
        "warning_filters_changed": False,
        "torch_rng_changed": False,
        "python_rng_changed": False,
    }


def test_a_module_without_validation_step_is_one_line_in_forward_only() -> None:
    code, doc = run_check(
        "fixtures/bad/lightning_no_validation.py:LitModel", "--mode", "forward-only"
    )
    assert code == 3
    (result,) = doc["results"]
    assert result["error"] == (
        "LitModel defines no validation_step, so Lightning has no forward-only loop to run; check it with --mode train"
    )


def test_adapter_recognises_lightning_names_without_importing_lightning() -> None:
    """Recognition looks at MRO names only; the main test venv has no Lightning."""
    import types

    from leakscope.adapters.registry import find_adapter
    from leakscope.harness.target import ResolvedTarget

    for package in ("pytorch_lightning", "lightning.pytorch"):
        module = types.ModuleType("user")
        base = type("LightningModule", (), {"__module__": f"{package}.core.module"})
        sub = type("LitModel", (base,), {"__module__": "user"})
        assert find_adapter(ResolvedTarget("x:y", sub, module, "y")).name == "lightning"
    other = type("LightningModule", (), {"__module__": "elsewhere"})
    assert find_adapter(ResolvedTarget("x:y", other, types.ModuleType("user"), "y")) is None
    assert "pytorch_lightning" not in sys.modules and "lightning" not in sys.modules
