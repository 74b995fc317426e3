"""Micro-batch keys beyond the tokens: plausible tensors by a naming convention.

A real RL engine reads more than ``input_ids``/``attention_mask``/
``position_ids``: ``advantages``, ``old_log_probs``, ``response_mask``,
``values``... leakscope's micro-batch synthesises such a key the first time the
engine reads it, from its name (the convention below, docs/protocol.md), or
from ``[tool.leakscope.micro-batch]`` / ``CheckOptions.micro_batch_keys``. The
values are deterministic: a generator seeded by the key name and the
micro-batch's tokens, so every trial of a check sees the same tensors.

Every key the engine reads is recorded (:func:`keys_read`). A key that neither
the convention nor the configuration covers raises :class:`MissingKey`, whose
message names the key and the configuration line that supplies it.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable
from typing import Any

import torch
from tensordict import TensorDict

from leakscope.options import MicroBatchKey

#: The naming convention, first match wins: (pattern on the key, the rule's
#: description for docs and errors, the key spec it produces). ``VOCAB`` in a
#: bound stands for the model's vocabulary size.
VOCAB = -1.0
CONVENTION: tuple[tuple[str, str, MicroBatchKey], ...] = (
    (
        r"(^|_)mask$",
        "masks: int64 [B, S], 1 on tokens, 0 on the padding (attention_mask's)",
        MicroBatchKey("", "batch,seq", "int64", 0, 2),
    ),
    (
        r"(^|_)(ids|responses|prompts|labels|tokens)$",
        "token ids: int64 [B, S] in [0, vocab)",
        MicroBatchKey("", "batch,seq", "int64", 0, VOCAB),
    ),
    (
        r"log_?probs?$|logprobs?$|(^|_)logp$",
        "log-probs: float32 [B, S] in [-5, 0)",
        MicroBatchKey("", "batch,seq", "float32", -5.0, 0.0),
    ),
    (
        r"(^|_)(advantages|returns|values)$",
        "advantages, returns, values: float32 [B, S] in [-1, 1)",
        MicroBatchKey("", "batch,seq", "float32", -1.0, 1.0),
    ),
    (
        r"(^|_)(rewards|scores)$",
        "per-token rewards and scores: float32 [B, S] in [0, 1)",
        MicroBatchKey("", "batch,seq", "float32", 0.0, 1.0),
    ),
    (
        r"(^|_)(reward|score)$",
        "per-sequence reward or score: float32 [B] in [0, 1)",
        MicroBatchKey("", "batch", "float32", 0.0, 1.0),
    ),
    (
        r"(^|_)entrop(y|ies|ys)$",
        "entropies: float32 [B, S] in [0, ln vocab)",
        MicroBatchKey("", "batch,seq", "float32", 0.0, VOCAB),
    ),
)

#: NOTE [One consistent mapping]
#: An engine may look at its micro-batch before it reads it: ``"advantages" in
#: micro_batch`` to choose the RL branch, ``for key in micro_batch``, ``len``,
#: ``dict(micro_batch.items())`` or ``to_dict()`` before a branch on a plain dict.
#: If ``.get("advantages")`` answered a tensor but ``in`` answered False, an RL
#: engine would run a branch its real batches never take, and a leak in the real
#: branch would go unseen (a CLEAN it did not earn). So the micro-batch holds every
#: key its real counterpart carries from the start (these names, verl's and TRL's
#: RL keys, plus every configured key), synthesised when it is built; and any
#: other name the convention covers is ``in`` it, synthesised when asked, and then
#: listed, counted and iterated like the rest.
RL_KEYS = (
    "responses",
    "response_mask",
    "old_log_probs",
    "ref_log_prob",
    "rollout_log_probs",
    "advantages",
    "returns",
    "values",
    "token_level_rewards",
    "token_level_scores",
)

_READ: dict[str, None] = {}
_RECORDING = [False]


class recording:
    """Record reads (and synthesise keys) only inside the engine's step, not in leakscope's walks."""

    def __enter__(self) -> None:
        _RECORDING[0] = True

    def __exit__(self, *exc: object) -> None:
        _RECORDING[0] = False


def keys_read() -> tuple[str, ...]:
    """The keys engines read from leakscope's micro-batches since the last :func:`reset_reads`."""
    return tuple(_READ)


def reset_reads() -> None:
    _READ.clear()


def config_line(name: str) -> str:
    """The ``pyproject.toml`` lines that supply ``name`` (shown when it cannot be synthesised)."""
    return f'[tool.leakscope.micro-batch] {name} = {{shape = "batch,seq", dtype = "float32", low = 0.0, high = 1.0}}'


class MissingKey(KeyError):
    """The engine read a key leakscope cannot synthesise; the message says how to supply it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.message = (
            f'the engine read micro_batch["{name}"], which no micro-batch naming convention covers; '
            f"describe it in pyproject.toml: {config_line(name)} (docs/configuration.md)"
        )

    def __str__(self) -> str:
        return self.message


def spec_for_key(name: str, overrides: Iterable[MicroBatchKey] = ()) -> MicroBatchKey | None:
    """How ``name`` is synthesised: the configured override, else the convention, else None."""
    for key in overrides:
        if key.name == name:
            return key
    for pattern, _, rule in CONVENTION:
        if re.search(pattern, name):
            return MicroBatchKey(name, rule.shape, rule.dtype, rule.low, rule.high)
    return None


def synthesise(key: MicroBatchKey, batch: Any, vocab: int) -> torch.Tensor:
    """A tensor for ``key`` shaped like ``batch``'s ``input_ids``, deterministic in both."""
    ids = TensorDict.__getitem__(batch, "input_ids")
    mask = TensorDict.get(batch, "attention_mask", None)
    rows, cols = ids.shape[0], ids.shape[-1]
    shape = (rows, cols) if key.shape == "batch,seq" else (rows,)
    dtype = getattr(torch, key.dtype)
    low = key.low
    high = {VOCAB: float(vocab)}.get(key.high, key.high)
    if key.high == VOCAB and dtype.is_floating_point:
        high = math.log(max(vocab, 2))
    seed = (zlib.crc32(key.name.encode()) + int(ids.sum())) % (2**31)
    gen = torch.Generator().manual_seed(seed)
    if (
        key.name.endswith("mask")
        and key.dtype == "int64"
        and mask is not None
        and key.shape == "batch,seq"
    ):
        out = mask.detach().clone().cpu()
    elif dtype is torch.bool:
        out = torch.rand(shape, generator=gen) < 0.5
    elif dtype.is_floating_point:
        out = (torch.rand(shape, generator=gen, dtype=torch.float32) * (high - low) + low).to(dtype)
    else:
        out = torch.randint(
            int(low), max(int(high), int(low) + 1), shape, generator=gen, dtype=dtype
        )
    moved: torch.Tensor = out.to(ids.device)
    return moved


class SynthesisingBatch(TensorDict):  # type: ignore[no-untyped-call]
    """leakscope's micro-batch: a ``TensorDict`` that synthesises and records the keys read.

    ``overrides`` and ``vocab`` are class attributes of the per-check subclass
    :func:`batch_class` makes (a TensorDict keeps no extra instance attributes,
    and its ``.to()``/``.clone()`` return the same class).
    """

    overrides: tuple[MicroBatchKey, ...] = ()
    vocab: int = 64

    def _fill(self, key: object) -> None:
        if not isinstance(key, str) or not _RECORDING[0]:
            return
        _READ.setdefault(key, None)
        if TensorDict.__contains__(self, key):
            return
        spec = spec_for_key(key, self.overrides)
        if spec is None:
            raise MissingKey(key)
        with torch.no_grad():
            TensorDict.__setitem__(self, key, synthesise(spec, self, self.vocab))

    def complete(self) -> None:
        """Synthesise every key a real batch carries (NOTE [One consistent mapping])."""
        names = dict.fromkeys((*RL_KEYS, *(k.name for k in self.overrides)))
        with torch.no_grad():
            for name in names:
                spec = spec_for_key(name, self.overrides)
                if spec is not None and not TensorDict.__contains__(self, name):
                    TensorDict.__setitem__(self, name, synthesise(spec, self, self.vocab))

    def __contains__(self, key: Any) -> bool:
        if TensorDict.__contains__(self, key):
            if isinstance(key, str) and _RECORDING[0]:
                _READ.setdefault(key, None)
            return True
        if not isinstance(key, str) or not _RECORDING[0]:
            return False
        if spec_for_key(key, self.overrides) is None:
            return False
        self._fill(key)  # any name the convention covers is in it, then listed like the rest
        return True

    def __getitem__(self, key: Any) -> Any:
        self._fill(key)
        return super().__getitem__(key)

    def get(self, key: object, *args: object, **kwargs: object) -> Any:
        if not (args or "default" in kwargs) or spec_for_key(str(key), self.overrides) is not None:
            self._fill(key)
        elif isinstance(key, str) and _RECORDING[0]:
            _READ.setdefault(key, None)
        return super().get(key, *args, **kwargs)


_CLASSES: dict[tuple[tuple[MicroBatchKey, ...], int], type[SynthesisingBatch]] = {}


def batch_class(overrides: tuple[MicroBatchKey, ...], vocab: int) -> type[SynthesisingBatch]:
    """The micro-batch class for these overrides (one per distinct configuration)."""
    key = (overrides, vocab)
    cls = _CLASSES.get(key)
    if cls is None:
        cls = type("MicroBatch", (SynthesisingBatch,), {"overrides": overrides, "vocab": vocab})
        _CLASSES[key] = cls
    return cls


def find_missing_key(exc: BaseException | None) -> MissingKey | None:
    """The :class:`MissingKey` behind ``exc`` (itself, or its cause or context chain)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, MissingKey):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


__all__ = [
    "CONVENTION",
    "RL_KEYS",
    "MissingKey",
    "SynthesisingBatch",
    "batch_class",
    "config_line",
    "find_missing_key",
    "keys_read",
    "recording",
    "reset_reads",
    "spec_for_key",
    "synthesise",
]
