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
from leakscope.probe import safe

#: ``(module, class)`` of the trainers this adapter drives, most specific first
GRPO = ("trl.trainer.grpo_trainer", "GRPOTrainer")
DPO = ("trl.trainer.dpo_trainer", "DPOTrainer")
SFT = ("trl.trainer.sft_trainer", "SFTTrainer")
TRAINER = ("transformers.trainer", "Trainer")
#: TRL's PPOTrainer before 0.12: not a transformers.Trainer (recognised to say how to watch it instead)
PPO = ("trl.trainer.ppo_trainer", "PPOTrainer")
KINDS = {GRPO: "grpo", DPO: "dpo", SFT: "sft", TRAINER: "trainer", PPO: "ppo"}

#: micro-batches one accumulated optimizer step is made of (enough for ``--micro-batches`` 3)
ACCUMULATION = 4
#: rows per micro-batch (GRPO: 2 completions of 1 prompt)
ROWS = 2
WORDS = (
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "mat",
    "big",
    "small",
    "red",
    "blue",
    "and",
    "then",
    "yes",
    "no",
)
SPECIAL = ("<pad>", "<s>", "</s>", "<unk>")


def kind_of(obj: Any) -> str | None:
    """``grpo``/``dpo``/``sft``/``trainer`` for a Trainer class or subclass, ``ppo`` for TRL's
    PPOTrainer before 0.12 (which is not a Trainer), else None (no imports)."""
    if not safe.is_instance(obj, type):
        return None
    names = {(safe.type_module(k), safe.type_name(k)) for k in safe.mro(obj)}
    for key in (GRPO, DPO, SFT, TRAINER, PPO):
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
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
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
        return Dataset.from_dict(
            {
                "prompt": [_sentence(i, 3) for i in range(rows)],
                "chosen": [_sentence(i + 1, 3) for i in range(rows)],
                "rejected": [_sentence(i + 2, 2) for i in range(rows)],
            }
        )
    return Dataset.from_dict({"text": [_sentence(i, 6) for i in range(rows)]})


def length_reward(completions: list[Any], **_: Any) -> list[float]:
    """GRPO's stub reward: the completion's length in characters, scaled (a plain Python function)."""
    return [float(len(str(c))) / 10.0 for c in completions]


#: the transformers.Trainer API the adapter drives, found by its signatures (NOTE [Driving by signature])
NEEDED_METHODS = ("training_step", "prediction_step", "get_train_dataloader", "get_eval_dataloader")
#: TrainingArguments fields the adapter needs: each entry is one setting, spelled as in the newest release first
NEEDED_FIELDS = (("use_cpu", "no_cuda"), ("report_to",), ("save_strategy",), ("logging_strategy",))
#: what `check` drives, for the one line a target outside it gets
SUPPORTED = "transformers.Trainer from 4.x and TRL's DPO/SFT trainers from 0.8 and GRPO from its first release"


def watch_command(kind: str, cls: Any = None) -> str:
    """The ``leakscope watch`` command that watches the job's own step instead (any version).

    TRL's PPOTrainer before 0.12 (``cls``): one ``step()`` runs every minibatch of a batch through
    ``train_minibatch`` (0.4 to 0.11) and keeps what each returns until it returns; a graph kept
    between minibatches is a leak inside one ``step()``, which only the minibatch call shows
    (watching ``step`` sees each batch's graphs released at its end), so the minibatch is the
    method to watch where the class has one."""
    if kind == "ppo":
        name = "train_minibatch" if callable(getattr(cls, "train_minibatch", None)) else "step"
        method = f"trl.trainer.ppo_trainer:PPOTrainer.{name}"
    else:
        method = "transformers.trainer:Trainer.training_step"
    return f"leakscope watch --method {method} your_train.py"


# NOTE [Driving by signature]
# Trainer APIs move between releases: transformers 4.46 renamed the trainer's `tokenizer=` to
# `processing_class=` and gave `training_step` a `num_items_in_batch` argument; TRL 0.8 has
# no DPOConfig or SFTConfig (its trainers take `max_length`, `dataset_text_field`,
# `max_seq_length` as arguments, next to a plain TrainingArguments), later releases moved
# them into their configs and renamed `max_seq_length` to `max_length`; TrainingArguments
# spelled `use_cpu` as `no_cuda` before 4.34. So the adapter asks the installed classes, not
# a version table: each setting goes to the config when the config class has that field, to
# the trainer's `__init__` when its signature takes it, under the first spelling that exists.
# A release without what the adapter needs (e.g. transformers 3.x, whose TrainingArguments
# has no `save_strategy`) gets one line naming the supported range and the `watch` command.


def _fields(config_cls: Any) -> set[str]:
    import dataclasses

    return (
        {f.name for f in dataclasses.fields(config_cls)}
        if dataclasses.is_dataclass(config_cls)
        else set()
    )


def _parameters(function: Any) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return set()


def _route(
    settings: list[tuple[tuple[str, ...], Any]], config_fields: set[str], init_parameters: set[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config kwargs, trainer kwargs)``: each setting under the first spelling the config has as a
    field, else the first one the trainer's ``__init__`` takes; a setting neither knows is left out."""
    config: dict[str, Any] = {}
    init: dict[str, Any] = {}
    for names, value in settings:
        name = next((n for n in names if n in config_fields), None)
        if name is not None:
            config[name] = value
            continue
        name = next((n for n in names if n in init_parameters), None)
        if name is not None:
            init[name] = value
    return config, init


def missing_api(kind: str, cls: type) -> list[str]:
    """What of the API the adapter drives the installed release lacks (empty when it can be driven)."""
    if kind == "ppo":
        return [
            "a PPOTrainer built on transformers.Trainer (before TRL 0.12 its step is PPOTrainer.step)"
        ]
    missing = [
        f"Trainer.{name}" for name in NEEDED_METHODS if not callable(getattr(cls, name, None))
    ]
    try:
        from transformers import TrainingArguments
    except ImportError as exc:  # pragma: no cover - recognised classes come from transformers
        return [f"transformers.TrainingArguments ({exc})"]
    fields = _fields(TrainingArguments)
    missing.extend(
        f"TrainingArguments.{names[0]}" for names in NEEDED_FIELDS if not fields.intersection(names)
    )
    init = _parameters(cls)
    if "args" not in init or not init.intersection(("processing_class", "tokenizer")):
        missing.append("Trainer(args=..., processing_class= or tokenizer=...)")
    return missing


def _common_args() -> list[tuple[tuple[str, ...], Any]]:
    return [
        (("output_dir",), os.path.join(os.environ.get("TMPDIR", "/tmp"), "leakscope-trainer")),
        (("use_cpu", "no_cuda"), True),
        (("report_to",), []),
        (("save_strategy",), "no"),
        (("logging_strategy",), "no"),
        (("bf16",), False),
        (("fp16",), False),
        (("per_device_train_batch_size",), ROWS),
        (("per_device_eval_batch_size",), ROWS),
        (("gradient_accumulation_steps",), ACCUMULATION),
        (("dataloader_num_workers",), 0),
        (("disable_tqdm",), True),
        (("seed",), 0),
        (("max_steps",), 1),
    ]


def _kind_settings(kind: str) -> list[tuple[tuple[str, ...], Any]]:
    if kind == "grpo":
        return [
            (("num_generations",), ROWS),
            (("max_completion_length",), 4),
            (("temperature",), 1.0),
            (("num_generations_eval",), ROWS),
            (("reward_funcs",), [length_reward]),
        ]
    if kind == "dpo":
        # TRL 0.8: arguments of DPOTrainer; later: DPOConfig fields
        return [
            (("max_length",), 16),
            (("max_prompt_length",), 8),
            (("remove_unused_columns",), False),
        ]
    if kind == "sft":
        # TRL 0.8: `max_seq_length` and `dataset_text_field` are SFTTrainer arguments; later SFTConfig fields
        return [(("max_length", "max_seq_length"), 16), (("dataset_text_field",), "text")]
    return []


def _config_class(kind: str) -> Any:
    """TRL's own config for ``kind`` when the installed TRL has one (GRPOConfig, DPOConfig, SFTConfig),
    else transformers' TrainingArguments (TRL 0.8's DPO and SFT trainers take those)."""
    from transformers import TrainingArguments

    names = {"grpo": "GRPOConfig", "dpo": "DPOConfig", "sft": "SFTConfig"}
    if kind in names:
        import trl

        found = getattr(trl, names[kind], None)
        if found is not None:
            return found
    return TrainingArguments


def _build(kind: str, cls: type, model: Any) -> Any:
    tok = tokenizer()
    rows = ROWS * ACCUMULATION * 2
    train, evaluation = dataset(kind, rows), dataset(kind, rows)
    config_cls = _config_class(kind)
    fields = _fields(config_cls)
    init_parameters = _parameters(cls)
    config_kwargs, init_kwargs = _route(
        _common_args() + _kind_settings(kind), fields, init_parameters
    )
    init_kwargs["processing_class" if "processing_class" in init_parameters else "tokenizer"] = tok
    if kind == "trainer":
        from transformers import DataCollatorForLanguageModeling

        def encode(example: dict[str, Any]) -> Any:
            return tok(example["text"], truncation=True, max_length=16)

        train, evaluation = (d.map(encode, remove_columns=["text"]) for d in (train, evaluation))
        init_kwargs["data_collator"] = DataCollatorForLanguageModeling(tok, mlm=False)
    return cls(
        model=model,
        args=config_cls(**config_kwargs),
        train_dataset=train,
        eval_dataset=evaluation,
        **init_kwargs,
    )


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

    def unsupported(self, resolved: ResolvedTarget) -> str | None:
        """One line when the installed release lacks what the adapter drives (NOTE [Driving by signature])."""
        kind = kind_of(resolved.obj)
        assert kind is not None
        missing = missing_api(kind, resolved.obj)
        if not missing:
            return None
        return (
            f"{resolved.spec} cannot be driven by leakscope check: {_release(kind)} lacks {', '.join(missing)}; "
            f"check drives {SUPPORTED}; watch the job's own step instead: {watch_command(kind, resolved.obj)}"
        )

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
        trainer._leakscope_counts_items = "num_items_in_batch" in _parameters(
            type(trainer).training_step
        )
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
                return engine.prediction_step(
                    model, evaluation[index % len(evaluation)], prediction_loss_only=True
                )
            finally:
                model.train()
        model.train()
        batch = train[index % len(train)]
        if (
            engine._leakscope_counts_items
        ):  # transformers >= 4.46: training_step(model, inputs, num_items_in_batch)
            return engine.training_step(model, batch, None)
        return engine.training_step(model, batch)


def _release(kind: str) -> str:
    """``transformers 3.5.1`` or ``trl 0.8.6``: the installed release a target comes from."""
    from importlib import metadata

    package = "transformers" if kind == "trainer" else "trl"
    try:
        return f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        return package


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

__all__ = [
    "ADAPTER",
    "TrainerAdapter",
    "dataset",
    "kind_of",
    "length_reward",
    "missing_api",
    "tokenizer",
    "watch_command",
]
