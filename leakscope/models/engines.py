"""Reference engines: a real FSDP2 engine with the verl 6698 fix, and its leaky twin.

``FSDPEngine`` shards the model with ``torch.distributed.fsdp.fully_shard`` over
the default process group (leakscope creates a single-process gloo group when
none exists), computes per-token log-probs and entropy, the loss, and then
detaches ``model_output`` before returning it: the fix verl shipped.
``LeakyFSDPEngine`` is the same engine returning ``model_output`` attached: the
bug. Both follow the engine protocol in docs/protocol.md.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token log-probabilities of ``labels`` under ``logits`` (``[B, S]``)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-token entropy of the distribution ``logits`` defines (``[B, S]``)."""
    log_p = torch.log_softmax(logits.float(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def detach_tree(tree: object) -> Any:
    """Detach every tensor in nested dicts, lists and tuples (the verl fix)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach()
    if isinstance(tree, dict):
        return {k: detach_tree(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(detach_tree(v) for v in tree)
    return tree


class FSDPEngine:
    """A minimal FSDP2 training engine with verl's ``forward_step`` signature (fixed)."""

    detach_outputs = True

    def __init__(self, model: nn.Module) -> None:
        if not dist.is_initialized():
            raise RuntimeError(
                "FSDPEngine needs a process group; run it through `leakscope check`, "
                "torchrun, or call torch.distributed.init_process_group first"
            )
        device_type = next(model.parameters()).device.type
        mesh = init_device_mesh(device_type, (dist.get_world_size(),))
        for block in getattr(model, "blocks", ()):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self.model = model

    def forward_step(
        self, micro_batch: Any, loss_function: Any, forward_only: bool
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Run one micro-batch; return ``(loss, output)`` like verl's engines."""
        grad_context = torch.no_grad() if forward_only else nullcontext()
        with grad_context:
            input_ids = micro_batch["input_ids"]
            out = self.model(
                input_ids=input_ids,
                attention_mask=micro_batch["attention_mask"],
                position_ids=micro_batch["position_ids"],
                use_cache=False,
            )
            logits = out.logits
            model_output = {
                "log_probs": log_probs_from_logits(logits, input_ids),
                "entropy": entropy_from_logits(logits),
            }
            loss, metrics = loss_function(model_output=model_output, data=micro_batch, dp_group=None)
        if self.detach_outputs:
            # The verl 6698 fix: the loss stays attached for backward(), but
            # nothing the caller keeps until the end of the batch holds the graph.
            model_output = detach_tree(model_output)
        return loss, {"model_output": model_output, "metrics": metrics}


class LeakyFSDPEngine(FSDPEngine):
    """The same engine without the fix: ``model_output`` is returned attached (verl 0.8.0)."""

    detach_outputs = False
