"""Every fixture gets the same verdicts and holders on every tiny model that can show its leak.

The fixtures' EXPECTED is written for the default model (peft-checkpoint,
covered by test_contract.py). Other models may retain different byte counts,
and a few leak shapes cannot show, or show differently, on some models; those
are listed below with the reason (docs/models.md has the same table).
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

import leakscope
from leakscope.options import CheckOptions
from tests.conftest import fixture_modules, fixture_target

pytestmark = pytest.mark.unit

FIXTURES = fixture_modules()
MODELS = ("reentrant-checkpoint", "full-finetune", "hf-lora")

#: how a module path of the default model reads on another model
PATH_MAP = {"hf-lora": ("module.blocks[", "module.base_model.model.model.layers[")}

#: (model, fixture, mode) -> what that model reports instead, and why
DIFFERENT = {
    # ema_update keeps one EMA tensor per trainable parameter: full fine-tuning trains all 11.
    **{
        ("full-finetune", "ema_update", mode): ("leak", [f"engine.ema[{i}]" for i in range(11)])
        for mode in ("train", "forward-only")
    },
    # target_network keeps one target tensor per trainable parameter, as ema_update does
    **{
        ("full-finetune", "target_network", mode): (
            "leak",
            [f"engine.targets[{i}]" for i in range(11)],
        )
        for mode in ("train", "forward-only")
    },
    # Reentrant checkpointing re-runs each block's forward during backward,
    # so a forward hook that stores outputs stores two per step, both attached.
    ("reentrant-checkpoint", "model_state", "train"): (
        "leak",
        [
            "module.blocks[1]._forward_hooks[0].store[0]",
            "module.blocks[1]._forward_hooks[0].store[1]",
            "module.cache",
        ],
    ),
    # Cannot show: a holder only the generic pass names is looked for when weakref evidence
    # (checkpoint inputs, input leaves, saved activations) outlives the step. A full fine-tune
    # has no checkpoint and no input leaf, and backward frees the kept log-probs' saved tensors,
    # so nothing is left to prove the thread-local holds a graph (nodes and parameters only).
    ("full-finetune", "library_thread_local", "train"): ("clean", []),
    # Nothing to show: under reentrant checkpointing the kept entropy's graph does not reach the
    # block parameters, so nothing keeps the hooked gradient accumulator (or its hook) alive.
    ("reentrant-checkpoint", "unknown_holder", "train"): ("clean", []),
    # Cannot show the unnamed caller frame the stored traceback pins: a full fine-tune has no
    # checkpoint input or input leaf, and that frame keeps no tensor of its own to weigh.
    ("full-finetune", "stored_exception", "train"): (
        "leak",
        [
            p
            for p in importlib.import_module("fixtures.stored_exception").EXPECTED["train"][1]
            if p != "<unknown holder>"
        ],
    ),
    # The hook goes on the model's first trainable parameter, which differs by model.
    ("full-finetune", "tensor_hook", "train"): (
        "leak",
        ["module.embed.weight._backward_hooks[0].scale"],
    ),
    ("hf-lora", "tensor_hook", "train"): (
        "leak",
        [
            "module.base_model.model.model.layers[0].self_attn.q_proj.lora_A.default.weight._backward_hooks[0].scale"
        ],
    ),
}


def _expected(model: str, name: str) -> dict[str, tuple[str, list[str]]]:
    old, new = PATH_MAP.get(model, ("", ""))
    out = {}
    for mode, (verdict, paths) in importlib.import_module(f"fixtures.{name}").EXPECTED.items():
        out[mode] = DIFFERENT.get(
            (model, name, mode), (verdict, [p.replace(old, new) if old else p for p in paths])
        )
    return out


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("model", MODELS)
def test_same_verdicts_on_every_model(model: str, name: str) -> None:
    if model == "hf-lora" and importlib.util.find_spec("peft") is None:
        pytest.skip("needs the hf extra: pip install -e '.[hf]'")
    report = leakscope.check(fixture_target(name), CheckOptions(model=model))
    got = {
        r.mode.value: (r.verdict.value, [str(f.path) for f in r.findings]) for r in report.results
    }
    assert got == _expected(model, name)
    for result in report.results:
        assert result.error is None
        for finding in result.findings:
            assert finding.confirmed, f"{finding.path} was not confirmed"


def test_every_documented_difference_is_still_needed() -> None:
    """A stale entry in DIFFERENT would hide a regression: each must differ from EXPECTED."""
    for model, name, mode in DIFFERENT:
        assert DIFFERENT[(model, name, mode)] != tuple(
            importlib.import_module(f"fixtures.{name}").EXPECTED[mode]
        )
