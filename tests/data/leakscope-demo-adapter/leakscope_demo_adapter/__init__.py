"""The adapter: recognise ConfiguredEngine subclasses, build them, feed them their micro-batches."""

from __future__ import annotations

from typing import Any

ENGINES = "leakscope_demo_adapter.engines"


class ConfiguredEngineAdapter:
    name = "demo-configured"
    #: the framework's caller runs forward-only steps under torch.no_grad()
    caller_no_grad_forward_only = True

    def recognises(self, resolved: Any) -> bool:
        mro = getattr(resolved.obj, "__mro__", ()) if isinstance(resolved.obj, type) else ()
        return any(k.__module__ == ENGINES and k.__name__ == "ConfiguredEngine" for k in mro)

    def build_engine(self, resolved: Any, model: Any) -> Any:
        engine = resolved.obj({"name": "leakscope"})
        engine.attach(model)
        return engine

    def micro_batch(self, size: Any, index: int) -> Any:
        from leakscope.models.tiny import build_micro_batch

        padded = build_micro_batch(size, index)
        return {"tokens": padded["input_ids"], "mask": padded["attention_mask"]}

    def loss_function(self, model_output: Any, data: Any, **_: Any) -> Any:
        mask = data["mask"].to(model_output["log_probs"].dtype)
        loss = -(model_output["log_probs"] * mask).sum() / mask.sum()
        return loss, {"loss": float(loss.detach())}


ADAPTER = ConfiguredEngineAdapter()
