"""A made-up framework whose engines cannot be built as Engine(model).

``__init__`` takes a config, the model is attached afterwards, and micro-batches
are ``{"tokens": ..., "mask": ...}`` dicts. ``forward_step`` ignores
``forward_only``: like verl's engines, it relies on its caller's ``no_grad``.
"""

from __future__ import annotations

from typing import Any

import torch


class ConfiguredEngine:
    """Base class of the framework's engines."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config)
        self.model: Any = None

    def attach(self, model: Any) -> None:
        self.model = model

    def forward_step(
        self, micro_batch: Any, loss_function: Any, forward_only: bool
    ) -> tuple[Any, Any]:
        tokens = micro_batch["tokens"]
        logits = self.model(
            input_ids=tokens, attention_mask=micro_batch["mask"], use_cache=False
        ).logits
        log_probs = (
            torch.log_softmax(logits.float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        )
        model_output = {"log_probs": log_probs}
        loss, metrics = loss_function(model_output=model_output, data=micro_batch)
        if self.config["detach_outputs"]:
            model_output = {k: v.detach() for k, v in model_output.items()}
        return loss, {"model_output": model_output, "metrics": metrics}


class LeakyConfiguredEngine(ConfiguredEngine):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__({**config, "detach_outputs": False})


class CleanConfiguredEngine(ConfiguredEngine):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__({**config, "detach_outputs": True})
