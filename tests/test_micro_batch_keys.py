"""Micro-batch keys beyond the tokens: synthesised by name, configurable, reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import leakscope
from fixtures.rl_keys import KEYS_READ
from leakscope import config
from leakscope.models.batch_keys import recording, spec_for_key
from leakscope.models.tiny import build_micro_batch
from leakscope.options import CheckOptions, MicroBatchKey, ModelSize
from leakscope.results import Mode
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def test_rl_engine_reads_are_reported() -> None:
    report = leakscope.check(
        "fixtures.rl_keys:Engine", CheckOptions(micro_batches=1, confirm=False)
    )
    for result in report.results:
        assert result.error is None, result.error
        assert list(result.keys_read) == KEYS_READ


@pytest.mark.parametrize(
    ("key", "dtype", "shape", "low", "high"),
    [
        ("advantages", torch.float32, (2, 8), -1.0, 1.0),
        ("old_log_probs", torch.float32, (2, 8), -5.0, 0.0),
        ("ref_log_prob", torch.float32, (2, 8), -5.0, 0.0),
        ("response_mask", torch.int64, (2, 8), 0, 1),
        ("responses", torch.int64, (2, 8), 0, 63),
        ("values", torch.float32, (2, 8), -1.0, 1.0),
        ("returns", torch.float32, (2, 8), -1.0, 1.0),
        ("token_level_rewards", torch.float32, (2, 8), 0.0, 1.0),
        ("score", torch.float32, (2,), 0.0, 1.0),
    ],
)
def test_convention_shapes_dtypes_ranges(
    key: str, dtype: torch.dtype, shape: tuple[int, ...], low: float, high: float
) -> None:
    batch = build_micro_batch(ModelSize(), 0, keys=())
    with recording():
        value = batch[key]
    assert value.dtype == dtype and tuple(value.shape) == shape
    assert float(value.min()) >= low and float(value.max()) <= high
    again = build_micro_batch(ModelSize(), 0, keys=())
    with recording():
        assert torch.equal(again[key], value)  # deterministic across trials


def test_response_mask_follows_the_padding() -> None:
    batch = build_micro_batch(ModelSize(), 0, keys=())
    with recording():
        assert torch.equal(batch["response_mask"], batch["attention_mask"])


def test_unknown_key_is_one_line_naming_the_config() -> None:
    report = leakscope.check("fixtures.custom_key:Engine", CheckOptions(micro_batches=1))
    for result in report.results:
        assert result.verdict.value == "error"
        assert result.error == (
            'the engine read micro_batch["kl_coef_per_token"], which no micro-batch naming convention covers; '
            "describe it in pyproject.toml: [tool.leakscope.micro-batch] kl_coef_per_token = "
            '{shape = "batch,seq", dtype = "float32", low = 0.0, high = 1.0} (docs/configuration.md)'
        )
        assert "fix the engine" not in result.error


def test_library_override_supplies_the_key() -> None:
    key = MicroBatchKey("kl_coef_per_token", low=0.5, high=2.0)
    report = leakscope.check(
        "fixtures.custom_key:Engine", CheckOptions(micro_batches=1, micro_batch_keys=(key,))
    )
    assert [r.verdict.value for r in report.results] == ["clean", "clean"]
    assert spec_for_key("kl_coef_per_token", (key,)) == key
    assert spec_for_key("advantages", (MicroBatchKey("advantages", low=-3, high=3),)).low == -3


def test_config_table_validates() -> None:
    settings = config.parse(
        {
            "micro-batch": {
                "kl_coef_per_token": {"shape": "batch", "dtype": "float32", "low": 0, "high": 2}
            }
        },
        "t",
    )
    assert settings.check_options().micro_batch_keys == (
        MicroBatchKey("kl_coef_per_token", "batch", "float32", 0.0, 2.0),
    )
    with pytest.raises(config.ConfigError, match=r"t: micro-batch.x.dtype: 'int8' is not one of"):
        config.parse({"micro-batch": {"x": {"dtype": "int8"}}}, "t")
    with pytest.raises(
        config.ConfigError, match=r"t: micro-batch.x: low \(2\) must be below high \(1\)"
    ):
        config.parse({"micro-batch": {"x": {"low": 2}}}, "t")


def test_cli_reads_pyproject_and_prints_keys(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.leakscope.micro-batch]\nkl_coef_per_token = {low = 0.5, high = 2.0}\n",
        encoding="utf-8",
    )
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    args = [
        sys.executable,
        "-m",
        "leakscope",
        "check",
        "fixtures.custom_key:Engine",
        "fixtures.rl_keys:Engine",
        "--micro-batches",
        "1",
        "--no-isolate",
        "--mode",
        "train",
    ]
    text = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert (
        "micro-batch keys read: input_ids, attention_mask, position_ids, kl_coef_per_token"
        in text.stdout
    ), text
    assert "micro-batch keys read: " + ", ".join(KEYS_READ) in text.stdout
    js = subprocess.run(
        [*args, "--format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = json.loads(js.stdout)
    assert doc["results"][1]["keys_read"] == KEYS_READ


def test_the_micro_batch_is_one_consistent_mapping() -> None:
    """NOTE [One consistent mapping]: every key ``.get`` gives is ``in`` it, listed and counted, on the
    TensorDict and on a plain-dict copy alike; a name nothing covers is in neither."""
    from leakscope.models.batch_keys import RL_KEYS

    batch = build_micro_batch(ModelSize(), 0, keys=(MicroBatchKey("kl_coef", "batch"),))
    with recording():
        listed = set(batch.keys())
        plain = dict(batch.items())
        for key in (*RL_KEYS, "kl_coef"):
            assert key in batch and key in listed and key in plain, key
            assert torch.equal(batch.get(key), plain[key])
        assert len(plain) == len(listed) == len(list(batch.keys()))
        assert "not_a_known_key" not in batch and batch.get("not_a_known_key", None) is None
        # a name only the convention covers: in it once asked, then listed like the rest
        assert "draft_mask" in batch and "draft_mask" in set(batch.keys())


def test_an_engine_branching_on_in_runs_its_real_branch() -> None:
    """``"advantages" in micro_batch`` (and on a dict copy) takes the RL branch: its leak is found."""
    report = leakscope.check(
        ["fixtures.rl_branch:Engine", "fixtures.rl_branch_clean:Engine"],
        CheckOptions(micro_batches=1, confirm=False, modes=(Mode.TRAIN,)),
    )
    leaky, clean = report.results
    assert leaky.verdict.value == "leak" and [str(f.path) for f in leaky.findings] == [
        "engine.ratios[0]"
    ]
    assert clean.verdict.value == "clean" and clean.findings == ()
