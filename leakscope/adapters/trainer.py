"""The built-in adapter for ``transformers.Trainer`` and TRL's trainers (``GRPOTrainer``,
``DPOTrainer``, ``SFTTrainer``) and user subclasses of any of them.

A Trainer cannot be built as ``Trainer(model)``: it wants training arguments, a
dataset, a tokenizer (and for GRPO, reward functions). This adapter builds what
a user's script would, offline and tiny, and then runs the trainer's own code:

- the model is leakscope's ``hf-lora`` model (a transformers Llama with PEFT
  LoRA, gradient checkpointing and input grads): ``model_kind = "hf-lora"``;
- the tokenizer is a ``tokenizers`` WordLevel vocabulary wrapped in
  ``PreTrainedTokenizerFast`` (built in memory, nothing downloaded);
- the datasets are ``datasets.Dataset.from_dict`` of the shape each trainer
  reads: prompts for GRPO (with a stub reward function: the completion's
  length), prompt/chosen/rejected for DPO, text for SFT and plain Trainers;
- train mode is the trainer's real ``training_step`` (GRPO: generation,
  rewards, advantages, loss and metrics; DPO: the reference pass with the
  adapter disabled), which runs ``accelerator.backward`` itself
  (``runs_backward = True``); what it returns is what the loop keeps;
- forward-only is the real evaluation path: ``prediction_step(model, inputs,
  prediction_loss_only=True)`` with the model in eval mode;
- several micro-batches are real gradient accumulation:
  ``gradient_accumulation_steps`` is 4 and the trainer's own batches follow
  each other (GRPO generates once for the 4 and serves them from its buffer).

Findings name the trainer's state under ``engine.`` (e.g.
``engine._metrics.train.entropy[0]``). Recognising a target imports nothing:
it compares the names in the class's MRO. docs/frameworks.md has the list of
what runs for real and what is stubbed.
"""

from __future__ import annotations

import os
from typing import Any

from leakscope.harness.target import ResolvedTarget

#: ``(module, class)`` of the trainers this adapter drives, most specific first
GRPO = ("trl.trainer.grpo_trainer", "GRPOTrainer")
DPO = ("trl.trainer.dpo_trainer", "DPOTrainer")
SFT = ("trl.trainer.sft_trainer", "SFTTrainer")
TRAINER = ("transformers.trainer", "Trainer")
KINDS = {GRPO: "grpo", DPO: "dpo", SFT: "sft", TRAINER: "trainer"}

#: micro-batches one accumulated optimizer step is made of (enough for ``--micro-batches`` 3)
ACCUMULATION = 4
#: rows per micro-batch (GRPO: 2 completions of 1 prompt)
ROWS = 2
WORDS = ("the", "a", "cat", "dog", "sat", "ran", "on", "mat", "big", "small", "red", "blue", "and", "then", "yes", "no")
SPECIAL = ("<pad>", "<s>", "</s>", "<unk>")


def kind_of(obj: Any) -> str | None:
    """``grpo``/``dpo``/``sft``/``trainer`` for a Trainer class or subclass, else None (no imports)."""
    if not isinstance(obj, type):
        return None
    names = {(getattr(k, "__module__", ""), k.__name__) for k in getattr(obj, "__mro__", ())}
    for key in (GRPO, DPO, SFT, TRAINER):
        if key in names:
            return KINDS[key]
    return None


def tokenizer() -> Any:
    """A tiny offline tokenizer: WordLevel over :data:`WORDS`, ids 0-3 special (pad, bos, eos, unk)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIAL, *WORDS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.padding_side = "left"
    # A chat template is not needed: every dataset below is in the plain (non-conversational) format.
    return fast


def _sentence(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n))


def dataset(kind: str, rows: int) -> Any:
    """``rows`` synthetic examples in the format ``kind``'s trainer reads."""
    from datasets import Dataset

    if kind == "grpo":
        return Dataset.from_dict({"prompt": [_sentence(i, 3) for i in range(rows)]})
    if kind == "dpo":
        return Dataset.from_dict({
            "prompt": [_sentence(i, 3) for i in range(rows)],
            "chosen": [_sentence(i + 1, 3) for i in range(rows)],
            "rejected": [_sentence(i + 2, 2) for i in range(rows)],
        })
    return Dataset.from_dict({"text": [_sentence(i, 6) for i in range(rows)]})


def length_reward(completions: list[Any], **_: Any) -> list[float]:
    """GRPO's stub reward: the completion's length in characters, scaled (a plain Python function)."""
    return [float(len(str(c))) / 10.0 for c in completions]


def _common_args() -> dict[str, Any]:
    return {
        "output_dir": os.path.join(os.environ.get("TMPDIR", "/tmp"), "leakscope-trainer"),
        "use_cpu": True,
        "report_to": [],
        "save_strategy": "no",
        "logging_strategy": "no",
        "bf16": False,
        "fp16": False,
        "per_device_train_batch_size": ROWS,
        "per_device_eval_batch_size": ROWS,
        "gradient_accumulation_steps": ACCUMULATION,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "seed": 0,
        "max_steps": 1,
    }


def _build(kind: str, cls: type, model: Any) -> Any:
    tok = tokenizer()
    rows = ROWS * ACCUMULATION * 2
    train, evaluation = dataset(kind, rows), dataset(kind, rows)
    args = _common_args()
    if kind == "grpo":
        from trl import GRPOConfig

        config = GRPOConfig(**args, num_generations=ROWS, max_completion_length=4, temperature=1.0,
                            num_generations_eval=ROWS)
        return cls(model=model, reward_funcs=[length_reward], args=config, train_dataset=train,
                   eval_dataset=evaluation, processing_class=tok)
    if kind == "dpo":
        from trl import DPOConfig

        config = DPOConfig(**args, max_length=16)
        return cls(model=model, args=config, train_dataset=train, eval_dataset=evaluation, processing_class=tok)
    if kind == "sft":
        from trl import SFTConfig

        config = SFTConfig(**args, max_length=16)
        return cls(model=model, args=config, train_dataset=train, eval_dataset=evaluation, processing_class=tok)
    from transformers import DataCollatorForLanguageModeling, TrainingArguments

    def encode(example: dict[str, Any]) -> Any:
        return tok(example["text"], truncation=True, max_length=16)

    train, evaluation = (d.map(encode, remove_columns=["text"]) for d in (train, evaluation))
    return cls(model=model, args=TrainingArguments(**args), train_dataset=train, eval_dataset=evaluation,
               processing_class=tok, data_collator=DataCollatorForLanguageModeling(tok, mlm=False))


class TrainerAdapter:
    """Builds and drives ``transformers.Trainer`` subclasses (TRL's GRPO, DPO and SFT trainers included)."""

    name = "transformers-trainer"
    #: Trainer.prediction_step runs its forward under torch.no_grad() itself
    caller_no_grad_forward_only = False
    #: training_step runs accelerator.backward(loss) itself and returns loss.detach()
    runs_backward = True
    model_kind = "hf-lora"
    prefixes = ("trl.", "transformers.")

    def prepare(self) -> None:
        """Offline and quiet before transformers/TRL are imported."""
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            os.environ.setdefault(var, "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("WANDB_DISABLED", "true")

    def recognises(self, resolved: ResolvedTarget) -> bool:
        """True for transformers.Trainer, TRL's trainers, and subclasses of them."""
        return kind_of(resolved.obj) is not None

    def build_engine(self, resolved: ResolvedTarget, model: Any) -> Any:
        """The trainer around ``model``, as a user's script builds it (see the module docstring)."""
        import logging

        import datasets
        import transformers

        datasets.disable_progress_bars()
        kind = kind_of(resolved.obj)
        assert kind is not None
        transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        logging.getLogger("datasets").setLevel(logging.ERROR)
        with _quiet():
            trainer = _build(kind, resolved.obj, model)
        # _inner_training_loop sets these before the first step; training_step reads them.
        trainer.current_gradient_accumulation_steps = ACCUMULATION
        trainer._leakscope_batches = _batches(trainer)
        return trainer

    def micro_batch(self, size: Any, index: int) -> Any:
        """The index of the trainer's own batch to run (the trainer's dataloader makes it)."""
        return {"micro_batch_index": index}

    def step(self, engine: Any, micro_batch: Any, forward_only: bool) -> Any:
        """``training_step`` (train) or ``prediction_step`` (forward-only) on the trainer's own batch."""
        with _quiet():
            return self._step(engine, micro_batch, forward_only)

    def _step(self, engine: Any, micro_batch: Any, forward_only: bool) -> Any:
        index = int(micro_batch["micro_batch_index"])
        train, evaluation = engine._leakscope_batches
        model = engine.model_wrapped
        if forward_only:
            model.eval()
            try:
                return engine.prediction_step(model, evaluation[index % len(evaluation)], prediction_loss_only=True)
            finally:
                model.train()
        model.train()
        return engine.training_step(model, train[index % len(train)], None)


def _quiet() -> Any:
    """transformers 5 deprecation warnings (gradient_checkpointing renamed) are not the user's."""
    return _Quiet()


class _Quiet:
    def __enter__(self) -> None:
        import warnings

        self._manager = warnings.catch_warnings()
        self._manager.__enter__()
        warnings.simplefilter("ignore", FutureWarning)

    def __exit__(self, *exc: Any) -> None:
        self._manager.__exit__(*exc)


def _batches(trainer: Any) -> tuple[list[Any], list[Any]]:
    """The first batches of the trainer's own train and eval dataloaders (collated as in a real run)."""
    train = list(_take(trainer.get_train_dataloader(), ACCUMULATION))
    evaluation = list(_take(trainer.get_eval_dataloader(), ACCUMULATION))
    return train, evaluation


def _take(loader: Any, n: int) -> Any:
    for i, batch in enumerate(loader):
        if i >= n:
            return
        yield batch


ADAPTER = TrainerAdapter()

__all__ = ["ADAPTER", "TrainerAdapter", "dataset", "kind_of", "length_reward", "tokenizer"]
