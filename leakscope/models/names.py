"""What ``hf-lora`` needs, found without importing torch (for option validation)."""

from __future__ import annotations

import importlib.util

from leakscope.options import MODELS

#: what ``hf-lora`` imports; :func:`missing_hf` finds which are absent without importing them
HF_MODULES = ("transformers", "peft")
HF_EXTRA_HINT = "install them: pip install 'transformers>=5' 'peft>=0.17' (the hf extra)"


def missing_hf() -> list[str]:
    """The packages ``hf-lora`` needs that are not installed (checked without importing them)."""

    return [name for name in HF_MODULES if importlib.util.find_spec(name) is None]


__all__ = ["HF_EXTRA_HINT", "HF_MODULES", "MODELS", "missing_hf"]
