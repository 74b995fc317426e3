"""The tiny models leakscope owns and hands to engines.

The default is the worst case from verl issue 6698: a frozen embedding whose
output is made to require grad (what PEFT's ``enable_input_require_grads``
does), trainable blocks run through non-reentrant ``torch.utils.checkpoint``,
and an LM head. Every checkpoint input is recorded by weakref: those are the
probes, the cleanest evidence that a step's graph is still alive.

Sizes are tiny and initialisation is seeded inside ``fork_rng``, so a build
costs milliseconds, is deterministic, and leaves the global RNG untouched.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from leakscope.options import MicroBatchKey, ModelKind, ModelSize


class TinyOutput(dict):  # type: ignore[type-arg]
    """Model output readable as ``out.logits`` and ``out["logits"]`` (like ``ModelOutput``)."""

    @property
    def logits(self) -> torch.Tensor:
        logits: torch.Tensor = self["logits"]
        return logits


class Block(nn.Module):
    """A residual MLP block: the part that is checkpointed and trained."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, 2 * hidden)
        self.down = nn.Linear(2 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.down(torch.tanh(self.up(x)))
        return out


class TinyLM(nn.Module):
    """A causal-LM-shaped model: ``model(input_ids=..., ...) -> TinyOutput(logits=[B, S, V])``."""

    #: record the probes (weakrefs to checkpoint inputs); off only to measure their cost
    record_probes: bool = True

    def __init__(
        self, size: ModelSize = ModelSize(), kind: ModelKind = ModelKind.PEFT_CHECKPOINT
    ) -> None:
        super().__init__()
        tiny = [m.value for m in ModelKind if m is not ModelKind.HF_LORA]  # hf-lora: models.hf
        if kind not in tiny:
            raise ValueError(f"unknown model {kind!r}; choose one of {', '.join(tiny)}")
        self.kind = ModelKind(kind)
        self.size = size
        self.embed = nn.Embedding(size.vocab, size.hidden)
        self.pos = nn.Embedding(max(size.seq, 1) * 4, size.hidden)
        self.blocks = nn.ModuleList(Block(size.hidden) for _ in range(size.layers))
        self.head = nn.Linear(size.hidden, size.vocab, bias=False)
        peft_style = self.kind is not ModelKind.FULL_FINETUNE
        if peft_style:
            # Frozen base weights (LoRA trains adapters only); the blocks stay
            # trainable so backward has work to do.
            for p in (*self.embed.parameters(), *self.pos.parameters(), *self.head.parameters()):
                p.requires_grad_(False)
        self.input_requires_grad = peft_style
        #: weakrefs to every checkpoint input of every forward (the probes)
        self.leakscope_probes: list[weakref.ref[torch.Tensor]] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool = False,
        **_: object,
    ) -> TinyOutput:
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[-1], device=input_ids.device).expand_as(
                input_ids
            )
        x = self.embed(input_ids) + self.pos(position_ids.clamp(0, self.pos.num_embeddings - 1))
        if attention_mask is not None:
            x = x * attention_mask.unsqueeze(-1).to(x.dtype)
        if self.input_requires_grad and torch.is_grad_enabled():
            # What PEFT's enable_input_require_grads does to the frozen embedding output.
            x.requires_grad_(True)
        for block in self.blocks:
            if self.kind is ModelKind.FULL_FINETUNE:
                x = block(x)
                continue
            if self.record_probes:
                self.leakscope_probes.append(weakref.ref(x))
            x = checkpoint(block, x, use_reentrant=self.kind is ModelKind.REENTRANT_CHECKPOINT)
        return TinyOutput(logits=self.head(x))


def build_model(
    kind: ModelKind = ModelKind.PEFT_CHECKPOINT, size: ModelSize = ModelSize(), device: str = "cpu"
) -> Any:
    """A fresh, deterministically initialised tiny model in train mode."""
    if kind == ModelKind.HF_LORA:
        from leakscope.models.hf import build_hf_lora

        hf = build_hf_lora(size)
        hf = hf.to(torch.bfloat16) if size.dtype == "bf16" else hf
        return hf.to(device) if device != "cpu" else hf
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(size.seed)
        model = TinyLM(size, kind)
    model.train()
    if size.dtype == "bf16":
        model = model.to(torch.bfloat16)
    return model.to(device) if device != "cpu" else model


def build_micro_batch(
    size: ModelSize = ModelSize(),
    index: int = 0,
    device: str = "cpu",
    keys: tuple[MicroBatchKey, ...] | None = None,
) -> Any:
    """A verl-style micro-batch: ``TensorDict`` of int64 ``[B, S]`` ids, mask and positions.

    With ``keys`` (leakscope's own format), a :class:`~leakscope.models.batch_keys.SynthesisingBatch`
    that also synthesises the other keys an engine reads (``keys`` override the naming convention).
    """
    from tensordict import TensorDict

    cls: Any = TensorDict
    if keys is not None:
        from leakscope.models.batch_keys import batch_class

        cls = batch_class(keys, size.vocab)

    gen = torch.Generator().manual_seed(size.seed * 1000 + index + 1)
    input_ids = torch.randint(
        0, size.vocab, (size.batch, size.seq), generator=gen, dtype=torch.int64
    )
    attention_mask = torch.ones(size.batch, size.seq, dtype=torch.int64)
    if size.seq > 2:
        attention_mask[-1, -2:] = 0  # right padding on the last sample
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    td = cls(
        {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids},
        batch_size=[size.batch],
    )
    if keys is not None:
        td.complete()  # NOTE [One consistent mapping] in leakscope/models/batch_keys.py
    return td.to(device) if device != "cpu" else td


def loss_function(
    model_output: Any, data: Any, dp_group: object = None, **_: object
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss leakscope supplies: masked mean negative log-likelihood.

    Reads ``model_output["log_probs"]`` (``[B, S]``) and returns a scalar loss
    and a dict of Python floats, as verl's policy loss does.
    """
    log_probs = model_output["log_probs"]
    mask = data["attention_mask"].to(log_probs.dtype)
    loss = -(log_probs * mask).sum() / mask.sum().clamp(min=1.0)
    return loss, {"loss": float(loss.detach())}
