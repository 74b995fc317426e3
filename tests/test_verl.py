"""verl's real FSDP engines, through the built-in adapter, in their own virtual environments.

``.ci/setup-verl.sh`` creates ``.venv-verl080`` (verl 0.8.0: the last release
with the 6698 leak) and ``.venv-verl091`` (fixed). Each test runs leakscope in
one of them as a subprocess, exactly as a user would. Without the venvs these
tests skip, unless ``LEAKSCOPE_REQUIRE_VERL=1`` (CI) turns that into a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leakscope.options import ModelSize
from tests.conftest import ROOT, framework_python, run_leakscope, run_venv_check, venv_env

pytestmark = pytest.mark.frameworks

IMPL = "verl.workers.engine.fsdp.transformer_impl"
ACTOR = f"{IMPL}:FSDPEngineWithLMHead"
CRITIC = f"{IMPL}:FSDPEngineWithValueHead"
VENVS = {"0.8.0": ROOT / ".venv-verl080", "0.9.1": ROOT / ".venv-verl091"}

# The checkpoint input the leak pins: the embedding output that PEFT-style
# input grads turn into a leaf, [batch, longest sequence, hidden] float32,
# plus its .grad. leakscope's micro-batch has one full-length row.
SIZE = ModelSize()
CHECKPOINT_INPUT_BYTES = SIZE.batch * SIZE.seq * SIZE.hidden * 4
LEAF_AND_GRAD_BYTES = 2 * CHECKPOINT_INPUT_BYTES


def venv_python(version: str) -> Path:
    return framework_python(
        VENVS[version], ".ci/setup-verl.sh", required_by=("LEAKSCOPE_REQUIRE_VERL",)
    )


def run_check(version: str, *args: str) -> tuple[int, dict[str, Any]]:
    return run_venv_check(venv_python(version), *args, timeout=600)


@pytest.fixture(scope="session")
def reports() -> dict[str, tuple[int, dict[str, Any]]]:
    """One leakscope run per verl version: both engine classes, both modes."""
    out = {}
    for version in VENVS:
        if (VENVS[version] / "bin" / "python").exists():
            out[version] = run_check(version, ACTOR, CRITIC, "--mode", "both")
    return out


def _report(
    reports: dict[str, tuple[int, dict[str, Any]]], version: str
) -> tuple[int, dict[str, Any]]:
    venv_python(version)
    return reports[version]


#: verl 0.8.0's actor.yaml defaults, as the report names them (NOTE [verl's real configuration])
DEFAULTS = ["calculate_entropy=false", "entropy_coeff=0", "entropy_checkpointing=false"]
ENTROPY_ON = ["calculate_entropy=true", "entropy_coeff=0", "entropy_checkpointing=false"]


def _by_target(
    doc: dict[str, Any], settings: list[str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """Results by (target, mode): the default job's unless ``settings`` names another."""
    want = settings or DEFAULTS
    return {(r["target"], r["mode"]): r for r in doc["results"] if r.get("settings", want) == want}


def test_verl_080_leaks_in_train_mode_for_both_engines(reports: dict[str, Any]) -> None:
    code, doc = _report(reports, "0.8.0")
    assert code == 1
    assert doc["torch_version"].startswith("2.13.0")
    results = _by_target(doc)
    # verl's default actor update computes no entropy: only the returned log-probs hold the graph
    actor = results[(ACTOR, "train")]
    assert actor["verdict"] == "leak" and actor["kind"] == "growing"
    assert [f["path"] for f in actor["findings"]] == ["output.model_output.log_probs"]
    # the gate also checks the entropy branch a job with calculate_entropy or entropy_coeff builds
    entropy = _by_target(doc, ENTROPY_ON)[(ACTOR, "train")]
    assert [f["path"] for f in entropy["findings"]] == [
        "output.model_output.log_probs",
        "output.model_output.entropy",
    ]
    critic = results[(CRITIC, "train")]
    assert critic["verdict"] == "leak"
    assert [f["path"] for f in critic["findings"]] == ["output.model_output.values"]
    for finding in [*actor["findings"], *critic["findings"]]:
        assert finding["confirmed"] is True
        assert finding["holder"] == "returned"
        # The pinned checkpoint input (the embedding leaf) and its gradient, exactly.
        assert finding["bytes_by_cause"]["leaf+grad"] == LEAF_AND_GRAD_BYTES
        assert finding["source"]["file"].endswith("verl/workers/engine/fsdp/transformer_impl.py")
        assert finding["source"]["function"] == "prepare_model_outputs"
    # log_probs feeds the loss, so backward freed its saved tensors: only the leaf and the nodes are left.
    for finding in (actor["findings"][0], critic["findings"][0]):
        assert (
            finding["retained_bytes"]
            == LEAF_AND_GRAD_BYTES + finding["bytes_by_cause"]["nodes-only"]
        )


def test_verl_080_forward_only_is_clean_under_the_callers_no_grad(reports: dict[str, Any]) -> None:
    _, doc = _report(reports, "0.8.0")
    results = _by_target(doc)
    for target in (ACTOR, CRITIC):
        assert results[(target, "forward-only")]["verdict"] == "clean"


def test_verl_091_is_clean_for_both_engines(reports: dict[str, Any]) -> None:
    code, doc = _report(reports, "0.9.1")
    assert code == 0, doc
    for result in doc["results"]:
        assert (result["verdict"], result["findings"], result["error"]) == ("clean", [], None), (
            result
        )
    assert {(r["target"], r["mode"]) for r in doc["results"]} == {
        (t, m) for t in (ACTOR, CRITIC) for m in ("train", "forward-only")
    }


@pytest.mark.parametrize(("version", "alive"), [("0.8.0", 3), ("0.9.1", 0)])
def test_forward_backward_batch_through_the_adapter(version: str, alive: int) -> None:
    """verl's own micro-batch loop: 0.8.0 keeps every micro-batch's leaf alive, 0.9.1 none."""
    python = venv_python(version)
    proc = subprocess.run(
        [str(python), str(ROOT / "tests" / "data" / "verl_micro_batches.py"), ACTOR, "3"],
        cwd=ROOT,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["verl"] == version
    assert got["torch"].startswith("2.13.0")
    assert got["forwards"] == 3
    assert got["alive_leaves"] == alive
    assert got["alive_bytes"] == alive * LEAF_AND_GRAD_BYTES


def test_adapter_recognises_verl_names_without_importing_verl() -> None:
    """Recognition looks at names only; the main test venv does not have verl."""
    import types

    from leakscope.adapters.registry import find_adapter
    from leakscope.harness.target import ResolvedTarget

    module = types.ModuleType(IMPL)
    base = type("FSDPEngineWithLMHead", (), {"__module__": IMPL})
    sub = type("MyEngine", (base,), {"__module__": "user"})
    other = type("FSDPEngineWithLMHead", (), {"__module__": "elsewhere"})
    assert find_adapter(ResolvedTarget("x:y", base, module, "y")).name == "verl-fsdp"
    assert find_adapter(ResolvedTarget("x:y", sub, module, "y")).name == "verl-fsdp"
    assert find_adapter(ResolvedTarget("x:y", other, module, "y")) is None
    assert "verl" not in sys.modules


@pytest.mark.parametrize("version", ["0.8.0", "0.9.1"])
def test_the_upstream_stack_real_verl_with_transformers_and_peft(version: str) -> None:
    """verl's engines around a transformers Llama + PEFT LoRA + gradient checkpointing (verl installs both)."""
    code, doc = run_check(version, ACTOR, CRITIC, "--mode", "train", "--model", "hf-lora")
    results = _by_target(doc)
    if version == "0.9.1":
        assert code == 0, doc
        assert all(r["verdict"] == "clean" and r["findings"] == [] for r in doc["results"]), doc
        return
    assert code == 1, doc
    actor, critic = results[(ACTOR, "train")], results[(CRITIC, "train")]
    assert [f["path"] for f in actor["findings"]] == ["output.model_output.log_probs"]
    assert [f["path"] for f in critic["findings"]] == ["output.model_output.values"]
    # The embedding output enable_input_require_grads made a leaf (layer 0's
    # checkpoint input), [2, 8, hidden 32] float32, and its gradient.
    for finding in [*actor["findings"], *critic["findings"]]:
        assert finding["bytes_by_cause"]["leaf+grad"] == LEAF_AND_GRAD_BYTES
        assert finding["confirmed"] is True


def test_estimate_verl_080_default_job_matches_upstream_027_gib() -> None:
    """verl 6698 at its real scale, verl's default configuration, no knob given: within 10% of 0.27 GiB."""
    proc = run_leakscope(
        venv_python("0.8.0"),
        "estimate",
        ACTOR,
        "--format",
        "json",
        "--at",
        "hidden=4096,tokens=17700,vocab=151936,dtype=bf16",
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    (result,) = json.loads(proc.stdout)["results"]
    assert result["settings"] == DEFAULTS
    projection = result["projection"]
    upstream = 0.27 * 2**30
    assert abs(projection["bytes_per_micro_batch"] - upstream) / upstream < 0.10, projection
    # measured in a bf16 run: the leaf and its grad follow the model dtype
    assert [t["text"] for t in projection["terms"] if t["cause"] != "nodes-only"] == [
        "leaf+grad: 2 x tokens x hidden x 2 B"
    ]


def test_verl_settings_from_the_command_line_and_bad_ones() -> None:
    code, doc = run_check("0.8.0", ACTOR, "--mode", "train", "--set", "entropy_coeff=0.01")
    assert code == 1
    (result,) = doc["results"]  # entropy pinned: no second variant
    assert result["settings"] == [
        "calculate_entropy=false",
        "entropy_coeff=0.01",
        "entropy_checkpointing=false",
    ]
    # entropy is in the loss, so backward frees its branch: it holds the leaf and grad only
    assert [f["path"] for f in result["findings"]] == [
        "output.model_output.log_probs",
        "output.model_output.entropy",
    ]
    code, doc = run_check("0.8.0", ACTOR, "--mode", "train", "--set", "calculate_entropy=maybe")
    assert code == 3 and "expected true or false" in doc["results"][0]["error"]
