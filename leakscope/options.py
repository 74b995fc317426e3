"""Options of a check: plain data shared by the library, the CLI and the plugin (no torch)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from leakscope.errors import UsageError
from leakscope.policy import AllowEntry
from leakscope.results import Mode


class ModelKind(str, enum.Enum):
    """``--model``: the model leakscope hands the engine (``hf-lora`` lives in
    :mod:`leakscope.models.hf` and needs the ``hf`` extra)."""

    PEFT_CHECKPOINT = "peft-checkpoint"
    REENTRANT_CHECKPOINT = "reentrant-checkpoint"
    FULL_FINETUNE = "full-finetune"
    HF_LORA = "hf-lora"


#: the values of :class:`ModelKind`, as the CLI and the configuration spell them
MODELS = tuple(m.value for m in ModelKind)


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """Shape of a tiny model and of the micro-batches fed to it."""

    vocab: int = 64
    hidden: int = 32
    layers: int = 2
    batch: int = 2
    seq: int = 8
    seed: int = 0
    #: parameter dtype of the tiny model: "fp32", or "bf16" (estimate measures which tensors stay fp32)
    dtype: str = "fp32"


#: ``MicroBatchKey.shape`` values: ``[B, S]`` per token, or ``[B]`` per sequence
KEY_SHAPES = ("batch,seq", "batch")
#: ``MicroBatchKey.dtype`` values (torch dtype names)
KEY_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")


@dataclasses.dataclass(frozen=True)
class MicroBatchKey:
    """How to synthesise one micro-batch key an engine reads (``[tool.leakscope.micro-batch]``).

    Values are uniform in ``[low, high)`` (integers: ``randint(low, high)``),
    drawn from a generator seeded by the key name and the micro-batch's tokens.
    """

    name: str
    shape: str = "batch,seq"
    dtype: str = "float32"
    low: float = 0.0
    high: float = 1.0


@dataclasses.dataclass(frozen=True)
class CheckOptions:
    """How to check a target. Every field has the CLI's default."""

    modes: tuple[Mode, ...] = (Mode.TRAIN, Mode.FORWARD_ONLY)
    #: which tiny model to hand the engine (a caller's plain string becomes its member)
    model: ModelKind = ModelKind.PEFT_CHECKPOINT
    size: ModelSize = ModelSize()
    #: micro-batches per growth run (1 disables the growth measurement)
    micro_batches: int = 3
    #: "cpu" or "cuda"; None picks cuda when available
    device: str | None = None
    #: re-run the step per candidate to prove each reference retains on its own
    confirm: bool = True
    max_confirm: int = 16
    #: record where retaining tensors were created (anomaly-mode stack traces)
    source: bool = True
    #: bound on objects the holder walk enters
    max_objects: int = 2_000_000
    #: a factory ``pkg.mod:make_engine`` that builds the engine from the model
    factory: str | None = None
    #: project leaks to this scale (a ``leakscope.diagnose.projection.Scale``), ``--at``
    at: Any = None
    #: findings a project keeps attached on purpose: reported as ``allowed``, never failing
    allowlist: tuple[AllowEntry, ...] = ()
    #: check each target in its own child process (see docs/isolation.md)
    isolate: bool = False
    #: seconds one isolated target may take before its process is killed (None: no limit)
    timeout: float | None = None
    #: isolated targets checked at once, each in its own process (``-j``); results keep the targets' order
    jobs: int = 1
    #: keys beyond input_ids/attention_mask/position_ids, overriding the naming
    #: convention (``[tool.leakscope.micro-batch]``; docs/configuration.md)
    micro_batch_keys: tuple[MicroBatchKey, ...] = ()
    #: adapter settings (``--set calculate_entropy=true``): ``(key, value)``, or ``(target, key, value)`` per target
    settings: tuple[tuple[str, ...], ...] = ()
    #: check every realistic value of the adapter's knobs not set (the gate); False: the framework's default only
    every_setting: bool = True

    def __post_init__(self) -> None:
        """Options that cannot work together are a usage error here, for the CLI and the library alike."""
        if self.model not in MODELS:
            raise UsageError(f"--model {self.model!r} is not one of: {', '.join(MODELS)}")
        object.__setattr__(self, "model", ModelKind(self.model))
        if self.micro_batches < 1:
            raise UsageError(f"--micro-batches {self.micro_batches} must be 1 or more")
        if self.timeout is not None and not (self.timeout > 0):  # NaN included
            raise UsageError(
                f"--timeout {self.timeout:g} is not a number of seconds above 0; give seconds > 0, or 0 for no limit"
            )
        if self.timeout is not None and not self.isolate:
            raise UsageError("--timeout needs a child process to kill; drop --no-isolate")
        if self.jobs < 1:
            raise UsageError(f"--jobs {self.jobs} must be 1 or more")
        if self.jobs > 1 and not self.isolate:
            raise UsageError(f"--jobs {self.jobs} needs a process per target; drop --no-isolate")
        if self.modes == () or len(set(self.modes)) != len(self.modes):
            raise UsageError("modes must name train and/or forward-only, each once")
