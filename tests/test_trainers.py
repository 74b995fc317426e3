"""Every trainer class of every framework release the suite covers, checked with no glue.

For each release in tests/trainer_matrix.py (TRL 1.16.0, 0.8.6, 0.7.11 and 0.4.7 with their transformers,
pytorch-lightning 2.6.6, 1.9.5 and 1.4.9), one ``leakscope check --no-isolate`` in that release's venv
checks every class it exports (``fixtures/trainers/``): the stock class must be clean in both
modes, its ``Kept`` subclass (every attached loss appended to ``self.kept_losses``) a growing
leak at ``engine.kept_losses[0]`` in train mode, and a class ``check`` cannot build refused in
one line naming what is missing. The set of classes a TRL release exports is read in the venv:
a class the matrix does not list fails the test (and so the table in docs/frameworks.md, made
from the matrix, never misses one). TRL's CPOTrainer bug (huggingface/trl#1526) is checked on
its buggy and its fixed release. Without the venvs these tests skip, unless
``LEAKSCOPE_REQUIRE_FRAMEWORKS=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.conftest import ROOT, framework_python, run_venv_check, venv_env
from tests.trainer_matrix import (
    CPO_BUG,
    CPO_SETUP,
    CPO_TARGET,
    KEPT,
    RELEASES,
    Release,
    rows,
)

pytestmark = pytest.mark.frameworks

_CHECKED: dict[str, tuple[list[str], dict[tuple[str, str], dict[str, Any]]]] = {}


def _exported(release: Release) -> list[str]:
    """The class names the release's fixture module exports, read in its venv."""
    python = framework_python(ROOT / release.venv, release.setup)
    proc = subprocess.run(
        [
            str(python),
            "-c",
            "import json, sys, importlib; m = importlib.import_module(sys.argv[1]); "
            "print(json.dumps(sorted(getattr(m, 'EXPORTED', {'LightningModule': None}))))",
            release.fixtures,
        ],
        cwd=ROOT,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    names: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return names


def _kept(release: Release, name: str) -> str:
    stock = release.classes[name]
    return f"{release.fixtures}:Kept{stock.rpartition(':')[2]}"


def checked(release: Release) -> tuple[list[str], dict[tuple[str, str], dict[str, Any]]]:
    """``(exported class names, {(target, mode): result})``: one check of every class of ``release``
    and of its leaky subclass, both modes, in one process (made once per session)."""
    if release.venv not in _CHECKED:
        exported = _exported(release)
        targets = [
            target
            for name in release.classes
            for target in (release.classes[name], _kept(release, name))
        ]
        _, doc = run_venv_check(
            framework_python(ROOT / release.venv, release.setup),
            *targets,
            "--mode",
            "both",
            "--no-isolate",
            timeout=900,
        )
        _CHECKED[release.venv] = (
            exported,
            {(r["target"], r["mode"]): r for r in doc["results"]},
        )
    return _CHECKED[release.venv]


def _leaks(result: dict[str, Any]) -> dict[str, str]:
    return {f["path"]: f["kind"] for f in result["findings"] if f["severity"] == "leak"}


@pytest.mark.parametrize("release", RELEASES, ids=[r.venv for r in RELEASES])
def test_the_matrix_lists_every_class_the_release_exports(release: Release) -> None:
    exported, _ = checked(release)
    assert exported == sorted(release.classes), (
        f"{release.framework} exports {exported}; list them in tests/trainer_matrix.py"
    )


@pytest.mark.parametrize(
    ("release", "name"), rows(), ids=[f"{r.venv}:{name}" for r, name in rows()]
)
def test_every_trainer_class_is_checked_with_no_glue(release: Release, name: str) -> None:
    """Stock: clean in both modes (only what the release itself keeps). Kept subclass: a growing
    leak at its holder in train mode, confirmed. Or, for a class check cannot build, one line."""
    _, results = checked(release)
    stock, kept = release.classes[name], _kept(release, name)
    if name in release.refused:
        for target in (stock, kept):
            # the same refusal in every mode is one row (api.one_row_per_error)
            assert (target, "forward-only") not in results
            for mode in ("train",):
                result = results[(target, mode)]
                assert result["verdict"] == "error", result
                error = result["error"]
                assert release.refused[name] in error and "\n" not in error, error
                assert "leakscope watch --method" in error, error
        return
    own = {path: "bounded" for path in release.own}
    for mode in ("train", "forward-only"):
        result = results[(stock, mode)]
        assert result["error"] is None, result["error"]
        assert _leaks(result) == (own if mode == "train" else {}), (name, mode, result["findings"])
    train = results[(kept, "train")]
    assert train["error"] is None, train["error"]
    assert _leaks(train) == {KEPT: "growing", **own}, train["findings"]
    finding = next(f for f in train["findings"] if f["path"] == KEPT)
    assert (finding["holder"], finding["confirmed"]) == ("engine attribute", True)
    assert finding["stored_at"]["file"] == "fixtures/trainers/keep.py", finding["stored_at"]
    assert train["growth"]["slope_bytes"] > 0
    assert results[(kept, "forward-only")]["verdict"] == "clean"  # evaluation runs under no_grad


@pytest.mark.parametrize("venv", list(CPO_BUG))
def test_trl_cpo_trainer_nll_loss_bug_is_caught_on_its_release_and_not_after_the_fix(
    venv: str,
) -> None:
    """huggingface/trl#1526: TRL 0.8.3's CPOTrainer stores ``policy_nll_loss.cpu().mean()`` (the
    graph with it) in ``_stored_metrics``; 0.8.4 detaches it. Built with CPOConfig, derived from
    its signature (before: "'TrainingArguments' object has no attribute 'model_init_kwargs'")."""
    _, holder = CPO_BUG[venv]
    code, doc = run_venv_check(
        framework_python(ROOT / venv, CPO_SETUP), CPO_TARGET, "--no-isolate", timeout=900
    )
    results = {r["mode"]: r for r in doc["results"]}
    assert all(r["error"] is None for r in results.values()), doc["results"]
    assert results["forward-only"]["verdict"] == "clean"
    if holder is None:
        assert (code, _leaks(results["train"])) == (0, {}), results["train"]["findings"]
        return
    assert code == 1
    assert _leaks(results["train"]) == {holder: "growing"}
    (finding,) = [f for f in results["train"]["findings"] if f["path"] == holder]
    assert finding["confirmed"] is True
    assert finding["stored_at"]["file"].endswith("trl/trainer/cpo_trainer.py")
    assert finding["stored_at"]["function"] == "store_metrics"
    assert finding["source"]["file"].endswith("trl/trainer/cpo_trainer.py")
