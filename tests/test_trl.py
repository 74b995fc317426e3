"""TRL's trainers and user subclasses, through the built-in Trainer adapter, in their own venv.

``.ci/setup-trl.sh`` creates ``.venv-trl`` (trl 1.16.0, transformers 5.24.0,
peft 0.21.2, accelerate 1.15.0, datasets 5.2.0). The tests run
``.venv-trl/bin/leakscope check`` as a subprocess, exactly as a user would, on
TRL's stock trainers and on fixtures/trl_subjects/trainers.py. Without the venv
they skip, unless ``LEAKSCOPE_REQUIRE_FRAMEWORKS=1`` or ``LEAKSCOPE_REQUIRE_VERL=1``
(CI) turns that into a failure. Recognition and ``prepare()`` are also tested
here in the main venv, which has no TRL.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, framework_python, run_venv_check

pytestmark = pytest.mark.frameworks

VENV = ROOT / ".venv-trl"
STOCK = (
    "trl.trainer.grpo_trainer:GRPOTrainer",
    "trl.trainer.dpo_trainer:DPOTrainer",
    "trl.trainer.sft_trainer:SFTTrainer",
)
SUBJECTS = "fixtures.trl_subjects.trainers"
#: leaky subclass -> (the path of its one finding in train mode, the cause that must be in it)
LEAKY = {
    "EntropyBonusGRPO": ("engine._metrics.train.entropy_bonus[0]", "leaf+grad"),
    "RefCacheSFT": ("engine.ref_log_probs[", "activations"),
    "LossHistoryTrainer": ("engine.loss_history[0]", "leaf+grad"),
}


def venv_python() -> Path:
    return framework_python(VENV, ".ci/setup-trl.sh")


def run_check(*args: str) -> tuple[int, dict[str, Any]]:
    return run_venv_check(venv_python(), *args)


def _by_target(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["target"], r["mode"]): r for r in doc["results"]}


@pytest.fixture(scope="session")
def stock() -> tuple[int, dict[str, Any]]:
    return run_check(*STOCK)


@pytest.fixture(scope="session")
def subjects() -> tuple[int, dict[str, Any]]:
    names = [n for leaky in LEAKY for n in (leaky, f"Clean{leaky}")]
    return run_check(*(f"{SUBJECTS}:{n}" for n in names))


def test_stock_trl_trainers_are_clean_in_both_modes(stock: tuple[int, dict[str, Any]]) -> None:
    code, doc = stock
    assert code == 0, doc
    assert doc["torch_version"].startswith("2.13.0")
    assert {(r["target"], r["mode"]) for r in doc["results"]} == {
        (t, m) for t in STOCK for m in ("train", "forward-only")
    }
    for result in doc["results"]:
        assert (result["verdict"], result["findings"], result["error"]) == ("clean", [], None), (
            result
        )
        # growth was measured through the trainer's real gradient accumulation: flat
        assert result["growth"]["retained_bytes"] == [0, 0, 0], result


@pytest.mark.parametrize("name", list(LEAKY))
def test_leaky_subclass_is_caught_with_the_holder_named(
    name: str, subjects: tuple[int, dict[str, Any]]
) -> None:
    code, doc = subjects
    assert code == 1, doc
    results = _by_target(doc)
    train = results[(f"{SUBJECTS}:{name}", "train")]
    path, cause = LEAKY[name]
    assert train["verdict"] == "leak", train
    assert len(train["findings"]) == 1, train["findings"]
    finding = train["findings"][0]
    assert finding["path"].startswith(path), finding["path"]
    assert finding["holder"] == "engine attribute"
    assert finding["confirmed"] is True
    assert finding["bytes_by_cause"][cause] > 0, finding
    assert finding["source"]["file"].endswith("fixtures/trl_subjects/trainers.py"), finding[
        "source"
    ]
    assert "detach" in finding["hint"] or ".item()" in finding["hint"]
    assert train["growth"]["slope_bytes"] > 0  # one more graph per accumulated micro-batch
    # The evaluation path runs under torch.no_grad(): no graph to keep.
    assert results[(f"{SUBJECTS}:{name}", "forward-only")]["verdict"] == "clean"


@pytest.mark.parametrize("name", list(LEAKY))
def test_clean_twin_passes(name: str, subjects: tuple[int, dict[str, Any]]) -> None:
    _, doc = subjects
    results = _by_target(doc)
    for mode in ("train", "forward-only"):
        result = results[(f"{SUBJECTS}:Clean{name}", mode)]
        assert result["verdict"] == "clean" and result["error"] is None, result
        assert all(f["severity"] != "leak" for f in result["findings"]), result["findings"]


def test_recognition_reads_names_and_imports_nothing() -> None:
    from leakscope.adapters.registry import find_adapter
    from leakscope.adapters.trainer import kind_of
    from leakscope.harness.target import ResolvedTarget

    def cls(module: str, name: str, *bases: type) -> type:
        return type(name, bases, {"__module__": module})

    trainer = cls("transformers.trainer", "Trainer")
    grpo = cls(
        "trl.trainer.grpo_trainer",
        "GRPOTrainer",
        cls("trl.trainer.base_trainer", "_BaseTrainer", trainer),
    )
    mine = cls("user", "MyGRPO", grpo)
    # no table of trainer names: every class built on transformers.Trainer is driven
    assert (kind_of(trainer), kind_of(grpo), kind_of(mine)) == ("trainer", "trainer", "trainer")
    assert kind_of(cls("trl.trainer.ppo_trainer", "PPOTrainer")) == "ppo"  # before TRL 0.12
    assert kind_of(cls("trl.trainer.ddpo_trainer", "DDPOTrainer")) == "loop"  # a loop of its own
    assert kind_of(cls("elsewhere", "Trainer")) is None
    module = types.ModuleType("user")
    assert (
        find_adapter(ResolvedTarget("user:MyGRPO", mine, module, "MyGRPO")).name
        == "transformers-trainer"
    )
    assert "trl" not in sys.modules


def test_prepare_runs_before_a_matching_target_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    from leakscope.adapters import registry

    monkeypatch.setattr(registry, "_PREPARED", set())
    for var in (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TOKENIZERS_PARALLELISM",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "WANDB_DISABLED",
    ):
        monkeypatch.delenv(var, raising=False)  # restored after the test
    registry.prepare_for_target("fixtures.verl_bug:Engine")  # no prefix matches
    assert "HF_HUB_OFFLINE" not in os.environ
    registry.prepare_for_target("trl.trainer.grpo_trainer:GRPOTrainer")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert "trl" not in sys.modules


def test_missing_hf_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """model_kind = "hf-lora" without peft installed: one line naming the adapter, the model and the extra."""
    import leakscope
    from leakscope.models import names
    from leakscope.options import CheckOptions

    monkeypatch.setattr(names, "missing_hf", lambda: ["peft"])
    report = leakscope.check("transformers:Trainer", CheckOptions(modes=(leakscope.Mode.TRAIN,)))
    (result,) = report.results
    assert result.verdict.value == "error"
    assert result.error == (
        "transformers:Trainer is checked by the transformers-trainer adapter on the hf-lora model, which needs "
        "peft (not installed); install them: pip install 'transformers>=5' 'peft>=0.17' (the hf extra)"
    )
