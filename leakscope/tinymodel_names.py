"""Names of the tiny models, importable without torch (for option validation)."""

MODELS = ("peft-checkpoint", "reentrant-checkpoint", "full-finetune")
