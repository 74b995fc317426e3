"""Engine factories for the --factory tests: ``make(model) -> engine``."""

from __future__ import annotations

from typing import Any

from fixtures._common import StepEngine


class ConfiguredEngine(StepEngine):
    """An engine whose __init__ needs more than the model (so Engine(model) cannot build it)."""

    def __init__(self, model: Any, config: dict[str, Any]) -> None:
        super().__init__(model)
        self.detach = config["detach_outputs"]

    def keep(self, micro_batch, logits, log_probs, entropy, loss, metrics):  # type: ignore[no-untyped-def]
        if self.detach:
            return super().keep(micro_batch, logits, log_probs, entropy, loss, metrics)
        return {"model_output": {"log_probs": log_probs}, "metrics": metrics}


def make_leaky_engine(model: Any) -> ConfiguredEngine:
    return ConfiguredEngine(model, {"detach_outputs": False})


def returns_none(model: Any) -> None:
    return None


def needs_gpu(model: Any) -> Any:
    raise RuntimeError("this engine needs a GPU")
