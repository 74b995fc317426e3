"""``leakscope fix`` in the framework venvs: a verified edit through TRL's and Lightning's real
training steps, and never an edit of a library's own line (tests/test_fix.py has the rest)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import FIXTURES, ROOT, framework_python, run_leakscope

pytestmark = pytest.mark.frameworks


def test_a_trl_subclass_fix_is_verified_through_the_real_trainer() -> None:
    """TRL's real ``training_step`` (its own backward) with and without the edit, in the TRL venv:
    the proof re-imports the user's module only, never the lazily loaded libraries."""
    python = framework_python(ROOT / ".venv-trl", ".ci/setup-trl.sh")
    before = (FIXTURES / "trl_subjects" / "trainers.py").read_bytes()
    proc = run_leakscope(
        python,
        "fix",
        "fixtures.trl_subjects.trainers:RefCacheSFT",
        "--mode",
        "train",
        "--format",
        "json",
    )
    doc = json.loads(proc.stdout)
    (fix,) = doc["fixes"]
    assert fix["status"] == "verified", fix
    assert fix["edit"]["after"] == "cache[key] = (self.reference_log_probs(model, inputs)).detach()"
    assert proc.returncode == 0 and not fix["applied"]
    assert (FIXTURES / "trl_subjects" / "trainers.py").read_bytes() == before


def test_a_lightning_module_fix_is_verified_and_a_library_line_is_never_edited() -> None:
    """Lightning's real Trainer.fit, in the Lightning venv: the manual-optimization module's
    ``self.losses.append(loss)`` gets a verified detach, and so does the line that feeds the metric
    the attached loss; Lightning's own copy of the metric is stored inside Lightning, whose lines are
    never proposed for editing."""
    python = framework_python(ROOT / ".venv-lightning", ".ci/setup-lightning.sh")
    docs: dict[str, Any] = {}
    for target, extra in (
        ("fixtures.lightning_manual:LitModel", ()),
        (
            "fixtures.lightning_metric:LitModule",
            ("--factory", "fixtures.lightning_metric:make_module"),
        ),
    ):
        proc = run_leakscope(python, "fix", target, *extra, "--mode", "train", "--format", "json")
        docs[target] = json.loads(proc.stdout)
    (manual,) = docs["fixtures.lightning_manual:LitModel"]["fixes"]
    assert (manual["path"], manual["status"]) == ("engine.losses[0]", "verified"), manual
    assert manual["edit"]["after"].startswith("self.losses.append(loss.detach())")
    own, logged = docs["fixtures.lightning_metric:LitModule"]["fixes"]
    # the metric's own cache: the user's line that fed it (torchmetrics runs untraced), fed a detached value
    assert (own["path"], own["status"]) == ("engine.train_loss._forward_cache", "verified"), own
    assert own["edit"]["file"] == "fixtures/lightning_metric.py"
    assert own["edit"]["after"].startswith("self.train_loss(loss.detach())")
    # Lightning's logged copy of the metric is stored inside Lightning: nothing there is proposed
    assert logged["status"] == "none" and logged["edit"] is None, logged
    assert logged["reason"].startswith("no one-line edit"), logged
