"""Names of the tiny models, importable without torch (for option validation)."""

#: ``hf-lora`` lives in :mod:`leakscope.models.hf` and needs the ``hf`` extra
MODELS = ("peft-checkpoint", "reentrant-checkpoint", "full-finetune", "hf-lora")
