"""The built-in adapter for ``transformers.Trainer``, every TRL trainer built on it (``GRPOTrainer``,
``DPOTrainer``, ``CPOTrainer``, ``KTOTrainer``, ``RewardTrainer``, ...) and user subclasses of any of them.

A Trainer cannot be built as ``Trainer(model)``: it wants its config, a data set, a tokenizer
(and, by trainer, reward functions, a teacher, a reward model). This adapter builds what a
user's script would, offline and tiny, reading what each trainer needs from its installed
signature (:mod:`leakscope.adapters.trainer_build`, NOTE [Deriving a trainer]), and then runs the
trainer's own code:

- the model is leakscope's ``hf-lora`` model (a transformers Llama with PEFT
  LoRA, gradient checkpointing and input grads): ``model_kind = "hf-lora"``; a trainer of a
  reward model gets the same model with a one-label score head;
- the tokenizer is a ``tokenizers`` WordLevel vocabulary wrapped in
  ``PreTrainedTokenizerFast`` (built in memory, nothing downloaded);
- the data sets are ``datasets.Dataset.from_dict`` in the first format the trainer reads
  (prompts, prompt/completion, chosen/rejected pairs, labelled completions, messages, text);
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

from leakscope.adapters import trainer_build
from leakscope.adapters.trainer_build import ACCUMULATION, length_reward, tokenizer
from leakscope.harness.target import ResolvedTarget
from leakscope.probe import safe

#: ``(module, class)`` of transformers' Trainer: every class built on it is driven
TRAINER = ("transformers.trainer", "Trainer")
#: TRL's PPOTrainer before 0.12: not a transformers.Trainer (recognised to say how to watch it instead)
PPO = ("trl.trainer.ppo_trainer", "PPOTrainer")


def kind_of(obj: Any) -> str | None:
    """``trainer`` for a class built on transformers.Trainer, ``ppo`` for TRL's PPOTrainer before
    0.12, ``loop`` for another TRL trainer class with a loop of its own (not a Trainer: DDPO),
    else None (no imports)."""
    if not safe.is_instance(obj, type):
        return None
    names = {(safe.type_module(k), safe.type_name(k)) for k in safe.mro(obj)}
    if TRAINER in names:
        return "trainer"
    if PPO in names:
        return "ppo"
    if any(
        module.startswith("trl.") and name.endswith("Trainer") and name != "BaseTrainer"
        for module, name in names
    ):
        return "loop"
    return None


#: the transformers.Trainer API the adapter drives, found by its signatures (NOTE [Driving by signature])
NEEDED_METHODS = ("training_step", "prediction_step", "get_train_dataloader", "get_eval_dataloader")
#: TrainingArguments fields the adapter needs: each entry is one setting, spelled as in the newest release first
NEEDED_FIELDS = (("use_cpu", "no_cuda"), ("report_to",), ("save_strategy",), ("logging_strategy",))
#: what `check` drives, for the one line a target outside it gets
SUPPORTED = "transformers.Trainer from 4.x and every TRL trainer built on it"


def watch_command(kind: str, cls: Any = None) -> str:
    """The ``leakscope watch`` command that watches the job's own step instead (any version).

    TRL's PPOTrainer before 0.12 (``cls``): one ``step()`` runs every minibatch of a batch through
    ``train_minibatch`` (0.4 to 0.11) and keeps what each returns until it returns; a graph kept
    between minibatches is a leak inside one ``step()``, which only the minibatch call shows
    (watching ``step`` sees each batch's graphs released at its end), so the minibatch is the
    method to watch where the class has one. Another trainer with a loop of its own (``loop``)
    or trained through its own ``step()`` (``step``): that method of the class."""
    if kind == "ppo":
        name = "train_minibatch" if callable(getattr(cls, "train_minibatch", None)) else "step"
        method = f"trl.trainer.ppo_trainer:PPOTrainer.{name}"
    elif kind in ("loop", "step") and cls is not None:
        name = "step" if callable(getattr(cls, "step", None)) else "train"
        method = f"{cls.__module__}:{cls.__qualname__}.{name}"
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
# the trainer's `__init__` when its signature takes it, under the first spelling that exists
# (leakscope.adapters.trainer_build.route; which config, data and models: NOTE [Deriving a
# trainer]). A release without what the adapter needs (e.g. transformers 3.x, whose
# TrainingArguments has no `save_strategy`) gets one line naming the supported range and the
# `watch` command.


def missing_api(kind: str, cls: type) -> list[str]:
    """What of the API the adapter drives the installed release lacks (empty when it can be driven)."""
    if kind == "ppo":
        return [
            "a PPOTrainer built on transformers.Trainer (before TRL 0.12 its step is PPOTrainer.step)"
        ]
    if kind == "loop":
        return [f"a {cls.__name__} built on transformers.Trainer (it runs a loop of its own)"]
    missing = [
        f"Trainer.{name}" for name in NEEDED_METHODS if not callable(getattr(cls, name, None))
    ]
    try:
        from transformers import TrainingArguments
    except ImportError as exc:  # pragma: no cover - recognised classes come from transformers
        return [f"transformers.TrainingArguments ({exc})"]
    fields = trainer_build.fields(TrainingArguments)
    missing.extend(
        f"TrainingArguments.{names[0]}" for names in NEEDED_FIELDS if not fields.intersection(names)
    )
    init = set(trainer_build.init_parameters(cls))
    if "args" not in init or not init.intersection(("processing_class", "tokenizer")):
        missing.append("Trainer(args=..., processing_class= or tokenizer=...)")
    return missing


class TrainerAdapter:
    """Builds and drives ``transformers.Trainer`` subclasses (every TRL trainer built on it included)."""

    name = "transformers-trainer"
    #: Trainer.prediction_step runs its forward under torch.no_grad() itself
    caller_no_grad_forward_only = False
    #: training_step runs accelerator.backward(loss) itself and returns loss.detach()
    runs_backward = True
    model_kind = "hf-lora"
    prefixes = ("trl.", "transformers.")
    #: ``--factory`` builds the trainer (an ``__init__`` of its own) and this adapter drives it
    accepts_factory = True

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
        """One line when the installed release lacks what the adapter drives (NOTE [Driving by
        signature]) or the trainer needs what leakscope cannot make (NOTE [Deriving a trainer])."""
        kind = kind_of(resolved.obj)
        assert kind is not None
        missing = missing_api(kind, resolved.obj)
        if missing:
            return (
                f"{resolved.spec} cannot be driven by leakscope check: {_release(kind)} lacks {', '.join(missing)}; "
                f"check drives {SUPPORTED}; watch the job's own step instead: {watch_command(kind, resolved.obj)}"
            )
        scorer = trainer_build.missing_scorer_config(resolved.obj)
        if scorer is not None:
            config, since = scorer
            return (
                f"{resolved.spec} cannot be built by leakscope check: {_release('trl')} lacks trl.{config} "
                f"(the config that says a {config.removesuffix('Config')}Trainer trains a scorer, on a score head); "
                f"check builds it from TRL {since} on; watch the job's own step instead: "
                f"{watch_command(kind, resolved.obj)}"
            )
        why = trainer_build.cannot_feed(resolved.obj)
        if why is None:
            return None
        fed_by_step = "train_dataset" not in trainer_build.init_parameters(resolved.obj)
        return (
            f"{resolved.spec} cannot be built by leakscope check: {why}; build it with --factory "
            f"pkg.mod:make_trainer (a function make_trainer(model) that returns the trainer), or watch the job's "
            f"own step instead: {watch_command('step' if fed_by_step else kind, resolved.obj)}"
        )

    def build_engine(self, resolved: ResolvedTarget, model: Any) -> Any:
        """The trainer around ``model``, as a user's script builds it (see the module docstring)."""
        cls = resolved.obj
        with _quiet():
            head = "score" if trainer_build.needs_scorer(cls) else "causal"
            if head == "score":
                from leakscope.models.hf import build_hf_lora

                # the same tiny Llama with a score head; its checkpoint inputs are recorded where
                # leakscope reads the given model's (its ``leakscope_probes``)
                model = build_hf_lora(model.size, head, probes=model.leakscope_probes)
            trainer = trainer_build.build_fitting(cls, model, head)
        return self.adopt(trainer, model)

    def adopt(self, built: Any, model: object) -> Any:
        """The trainer to drive: what :meth:`build_engine` or ``--factory`` built, set up as
        ``Trainer._inner_training_loop`` sets it up before its first step."""
        with _quiet():
            built.current_gradient_accumulation_steps = ACCUMULATION
            built._leakscope_batches = _batches(built)
        built._leakscope_counts_items = "num_items_in_batch" in trainer_build.parameters(
            type(built).training_step
        )
        return built

    def micro_batch(self, size: object, index: int) -> Any:
        """The index of the trainer's own batch to run (the trainer's dataloader makes it)."""
        return {"micro_batch_index": index}

    def step(self, engine: object, micro_batch: object, forward_only: bool) -> Any:
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
    """``transformers 3.5.1`` or ``trl 0.8.6``: the installed release a target comes from (TRL's
    for any ``kind`` but ``trainer``)."""
    from importlib import metadata

    package = "transformers" if kind == "trainer" else "trl"
    try:
        return f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        return package


def _quiet() -> Any:
    """transformers 5 deprecation warnings (gradient_checkpointing renamed) and the libraries' info
    lines are not the user's."""
    return _Quiet()


class _Quiet:
    def __enter__(self) -> None:
        import logging
        import warnings

        import datasets
        import transformers

        datasets.disable_progress_bars()
        transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        logging.getLogger("datasets").setLevel(logging.ERROR)
        self._manager = warnings.catch_warnings()
        self._manager.__enter__()
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)

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
    "kind_of",
    "length_reward",
    "missing_api",
    "tokenizer",
    "watch_command",
]
