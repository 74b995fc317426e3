"""``--model hf-lora``: the exact stack of the upstream OOM, built from a config.

A randomly initialised tiny ``transformers`` Llama (nothing is downloaded),
with ``gradient_checkpointing_enable()`` (non-reentrant), a PEFT LoRA adapter
on ``q_proj``/``v_proj`` and ``enable_input_require_grads()``: the frozen
embedding's output becomes a leaf that requires grad, and every decoder layer
runs through ``torch.utils.checkpoint``. This module is imported only when
``hf-lora`` is chosen; it needs the ``hf`` extra (``pip install -e '.[hf]'`` in a checkout).

The model follows leakscope's model contract (see docs/models.md):

- ``leakscope_probes``: weakrefs to every checkpoint input. transformers (>= 5)
  checkpoints a decoder layer's ``forward``, so a forward *pre*-hook on each
  layer runs once per forward, outside the checkpoint, and sees exactly the
  ``hidden_states`` the checkpoint saves (layer 0's is the embedding leaf).
- ``blocks``: the decoder layers (a plain attribute, not a registered
  submodule), so engines and fixtures can address "the checkpointed blocks" on
  every leakscope model.
- ``size``: the :class:`~leakscope.options.ModelSize` it was built with.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Any

from leakscope.options import ModelKind, ModelSize

# Built from a config only: never let a stray call reach the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

INSTALL_HINT = (
    "install them: pip install 'transformers>=5' 'peft>=0.17' (the hf extra of leakscope-autograd)"
)


#: the heads a tiny Llama can have: ``causal`` (next-token logits, a policy or a teacher) and
#: ``score`` (one scalar per sequence, ``LlamaForSequenceClassification`` with one label: a reward
#: or value model)
HEADS = {
    "causal": ("LlamaForCausalLM", "CAUSAL_LM"),
    "score": ("LlamaForSequenceClassification", "SEQ_CLS"),
}


def _imports() -> tuple[Any, Any, Any]:
    try:
        import transformers
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        from leakscope.errors import UsageError

        raise UsageError(
            f"--model hf-lora needs {exc.name or 'transformers and peft'}; {INSTALL_HINT}"
        ) from None
    return transformers, LoraConfig, get_peft_model


def _config(transformers: Any, size: ModelSize, head: str) -> object:
    config = transformers.LlamaConfig(
        vocab_size=size.vocab,
        hidden_size=size.hidden,
        intermediate_size=size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max(64, 4 * size.seq),
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    if head == "score":
        config.num_labels = 1
    # eager attention: deterministic and the same on every torch build.
    config._attn_implementation = "eager"
    return config


def build_tiny_llama(size: ModelSize | None = None, head: str = "causal") -> object:
    """A fresh tiny Llama with ``head`` (:data:`HEADS`), no adapter, in eval mode: a model a
    trainer runs beside the one it trains (a teacher, a reward or value model)."""
    import torch

    size = size or ModelSize()
    transformers, _, _ = _imports()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(size.seed + 1)
        model = getattr(transformers, HEADS[head][0])(_config(transformers, size, head))
    return model.eval()


def build_hf_lora(
    size: ModelSize | None = None, head: str = "causal", probes: list[object] | None = None
) -> Any:
    """A fresh tiny Llama + LoRA + gradient checkpointing + input grads, in train mode.

    ``head``: :data:`HEADS` (``score`` for a trainer that trains a reward model); ``probes``: the
    list its checkpoint inputs are recorded in (a new one by default)."""
    size = size or ModelSize()
    import torch

    transformers, LoraConfig, get_peft_model = _imports()
    config = _config(transformers, size, head)
    class_name, task = HEADS[head]
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # transformers 5 renamed gradient_checkpointing_enable (FutureWarning);
        # the old name is what users' code calls, so leakscope calls it too.
        warnings.simplefilter("ignore", FutureWarning)
        torch.manual_seed(size.seed)
        base = getattr(transformers, class_name)(config)
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model = get_peft_model(
            base,
            LoraConfig(
                r=4,
                lora_alpha=8,
                lora_dropout=0.0,
                target_modules=["q_proj", "v_proj"],
                task_type=task,
            ),
        )
        model.enable_input_require_grads()
    layers = base.model.layers
    if probes is None:
        probes = []

    def record_checkpoint_input(
        module: object, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states")
        if isinstance(hidden, torch.Tensor):
            probes.append(weakref.ref(hidden))

    for layer in layers:
        layer.register_forward_pre_hook(record_checkpoint_input, with_kwargs=True)
    # Plain attributes (object.__setattr__): not registered as submodules, so
    # parameters and state_dict are unchanged.
    object.__setattr__(model, "leakscope_probes", probes)
    object.__setattr__(model, "blocks", layers)
    object.__setattr__(model, "size", size)
    object.__setattr__(model, "kind", ModelKind.HF_LORA)
    model.train()
    return model


__all__ = ["HEADS", "INSTALL_HINT", "build_hf_lora", "build_tiny_llama"]
