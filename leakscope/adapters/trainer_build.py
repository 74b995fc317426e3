"""Building a trainer the Trainer adapter has never seen, from the installed classes.

A ``transformers.Trainer`` subclass (any of TRL's trainers, any user's) is built as a user's
script builds it, with what its own signature asks for: its config class, a data set in the
format it reads, the models it runs beside the one it trains (NOTE [Deriving a trainer]). No
table of trainer names: a trainer TRL adds tomorrow is built the same way.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any

from leakscope.errors import EngineError

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
#: a chat template for conversational data: each message's content, in order (the vocabulary has
#: no role tokens)
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}{% if not loop.last %} {% endif %}"
    "{% endfor %}{% if add_generation_prompt %} {% endif %}"
)

# NOTE [Deriving a trainer]
# What a trainer needs is read from the installed classes, in this order:
# - its config class: the annotation of `args` in the nearest `__init__` of its MRO, above
#   transformers' own Trainer, that annotates it (`args: CPOConfig | None`, TRL 0.8's
#   `Optional[CPOConfig]`, a postponed string; in a union, the first TrainingArguments
#   subclass), else the config exported beside it (`CPOTrainer` -> `CPOConfig`, in its module or
#   in `trl`), else `TrainingArguments`. A constructor that passes `**kwargs` on (a user's
#   subclass, TRL's deprecated aliases, GMPOTrainer) is read through to its base's. Each
#   setting leakscope needs goes to that config when it has the field, else to `__init__` when it
#   takes the argument, under the first spelling that exists (NOTE [Driving by signature]);
# - its data format: tried in the order of FORMATS (prompt only, prompt + completion,
#   chosen/rejected pairs, unpaired preference with labels, conversational messages, plain
#   text, then the pre-tokenised formats of TRL 0.8's RewardTrainer and of a plain Trainer): the
#   first one the trainer builds with and whose first batch its own train dataloader collates
#   is the one it reads (TRL's trainers tokenise their data set in `__init__` and fail there on
#   a column they lack). The fit is remembered per class; when none fits, one line lists what
#   each format ran into;
# - the models it runs beside the one it trains, by the role its `__init__` names: a
#   `teacher_model` (a tiny causal Llama), a `reward_model` or `value_model` (a tiny Llama with
#   a one-label score head), `reward_funcs` (a plain Python function, the completion's length),
#   a `ref_model` only when it has no default (TRL's trainers otherwise use the policy with its
#   LoRA adapter disabled). A `judge` without a default (an API or a judging model) cannot be
#   built offline: one line says so. A trainer whose config class is a reward or process-reward
#   config (`RewardConfig`, `PRMConfig`) trains a scorer: its model gets the score head; a
#   trainer of a scorer from before its config (TRL 0.4 to 0.7.1's `RewardTrainer`, on a plain
#   `TrainingArguments`) says nothing of the head it needs: it is refused in one line naming the
#   config, the oldest release that has it and the `watch` command, not built on a causal head.
# A trainer whose `__init__` takes no `train_dataset` (TRL 0.8's IterativeSFTTrainer, trained
# on what the script hands its own `step()`) cannot be fed: one line names the method to watch.


def tokenizer() -> Any:
    """A tiny offline tokenizer: WordLevel over :data:`WORDS`, ids 0-3 special (pad, bos, eos, unk),
    with a plain chat template (for conversational data)."""
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
    fast.chat_template = CHAT_TEMPLATE
    return fast


def sentence(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n))


def length_reward(completions: list[object], **_: object) -> list[float]:
    """The stub reward: the completion's length in characters, scaled (a plain Python function)."""
    return [float(len(str(c))) / 10.0 for c in completions]


@dataclasses.dataclass(frozen=True)
class Format:
    """One data format a trainer may read: its name (for messages), its columns for ``rows``
    rows, and the settings it brings (``(spellings, value)`` as in :func:`route`)."""

    name: str
    columns: Callable[[Any, int], dict[str, list[Any]]]
    settings: tuple[tuple[tuple[str, ...], Any], ...] = ()
    #: a plain Trainer's format: tokenised, with the language-modelling collator
    collator: bool = False


def _prompt(tok: object, rows: int) -> dict[str, list[Any]]:
    return {"prompt": [sentence(i, 3) for i in range(rows)]}


def _completion(tok: object, rows: int) -> dict[str, list[Any]]:
    return {**_prompt(tok, rows), "completion": [sentence(i + 1, 3) for i in range(rows)]}


def _pairs(tok: object, rows: int) -> dict[str, list[Any]]:
    return {
        **_prompt(tok, rows),
        "chosen": [sentence(i + 1, 3) for i in range(rows)],
        "rejected": [sentence(i + 2, 2) for i in range(rows)],
    }


def _unpaired(tok: object, rows: int) -> dict[str, list[Any]]:
    return {**_completion(tok, rows), "label": [i % 2 == 0 for i in range(rows)]}


def _messages(tok: object, rows: int) -> dict[str, list[Any]]:
    return {
        "messages": [
            [
                {"role": "user", "content": sentence(i, 3)},
                {"role": "assistant", "content": sentence(i + 1, 3)},
            ]
            for i in range(rows)
        ]
    }


def _text(tok: object, rows: int) -> dict[str, list[Any]]:
    return {"text": [sentence(i, 6) for i in range(rows)]}


def _tokenized_pairs(tok: Any, rows: int) -> dict[str, list[Any]]:
    chosen = [tok(f"{sentence(i, 3)} {sentence(i + 1, 3)}") for i in range(rows)]
    rejected = [tok(f"{sentence(i, 3)} {sentence(i + 2, 2)}") for i in range(rows)]
    return {
        "input_ids_chosen": [c["input_ids"] for c in chosen],
        "attention_mask_chosen": [c["attention_mask"] for c in chosen],
        "input_ids_rejected": [r["input_ids"] for r in rejected],
        "attention_mask_rejected": [r["attention_mask"] for r in rejected],
    }


def _tokenized_text(tok: Any, rows: int) -> dict[str, list[Any]]:
    encoded = [tok(sentence(i, 6), truncation=True, max_length=16) for i in range(rows)]
    return {
        "input_ids": [e["input_ids"] for e in encoded],
        "attention_mask": [e["attention_mask"] for e in encoded],
    }


_RAW = ((("remove_unused_columns",), False),)
#: every data format, in the order they are tried (NOTE [Deriving a trainer])
FORMATS = (
    Format("prompt only", _prompt),
    Format("prompt + completion", _completion),
    Format("chosen/rejected pairs", _pairs, _RAW),
    Format("unpaired preference with labels", _unpaired, _RAW),
    Format("conversational messages", _messages),
    Format("plain text", _text, ((("dataset_text_field",), "text"),)),
    Format("tokenised chosen/rejected pairs", _tokenized_pairs, _RAW),
    Format("tokenised text", _tokenized_text, collator=True),
)

#: models a trainer runs beside the one it trains, by the name of its ``__init__`` argument:
#: ``(head, built only when the argument has no default)`` (NOTE [Deriving a trainer])
MODEL_ROLES = {
    "teacher_model": ("causal", False),
    "reward_model": ("score", False),
    "value_model": ("score", False),
    "ref_model": ("causal", True),
}
#: config classes of trainers that train a scorer (their model gets the score head)
SCORER_CONFIGS = ("RewardConfig", "PRMConfig")
#: the first TRL release that exports a scorer's config, for a trainer of a scorer released before
#: it (TRL 0.4 to 0.7.1's RewardTrainer; PRMTrainer came with PRMConfig)
SCORER_SINCE = {"RewardConfig": "0.7.2"}


def parameters(function: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return {}


def init_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The parameters of ``cls``'s constructor, less ``self``: those of the nearest ``__init__`` in
    its MRO that names any, and, while the ``__init__`` read last takes ``**kwargs`` (passed on to
    its base, as TRL's deprecated aliases and GMPOTrainer's ``(model, reward_funcs, args=None,
    **kwargs)`` do), those of the next one (the nearest one's kind and default first)."""
    out: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        found = list(parameters(init).items())[1:]
        for name, parameter in found:
            if parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                out.setdefault(name, parameter)
        if out and not any(p.kind is p.VAR_KEYWORD for _, p in found):
            break
    return out


def fields(config_cls: object) -> set[str]:
    return (
        {f.name for f in dataclasses.fields(config_cls)}
        if dataclasses.is_dataclass(config_cls)
        else set()
    )


def route(
    settings: list[tuple[tuple[str, ...], object]],
    config_fields: set[str],
    init_parameters: set[str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config kwargs, trainer kwargs)``: each setting under the first spelling the config has as a
    field, else the first one the trainer's ``__init__`` takes; a setting neither knows is left out."""
    config: dict[str, object] = {}
    init: dict[str, object] = {}
    for names, value in settings:
        name = next((n for n in names if n in config_fields), None)
        if name is not None:
            config[name] = value
            continue
        name = next((n for n in names if n in init_parameters), None)
        if name is not None:
            init[name] = value
    return config, init


def _training_arguments() -> type:
    from transformers import TrainingArguments

    return TrainingArguments


def _classes_in(annotation: object, namespace: dict[str, object]) -> list[Any]:
    """The classes an annotation names: a class, a union of them, ``Optional[...]``, or the text
    of a postponed annotation (each name looked up in the function's globals)."""
    if isinstance(annotation, str):
        names = annotation.replace("Optional[", "").replace("]", "").replace("Union[", "")
        out = []
        for part in names.replace(",", "|").split("|"):
            found = namespace.get(part.strip().strip("'\""))
            if found is not None:
                out.append(found)
        return out
    if isinstance(annotation, type):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [c for a in typing.get_args(annotation) for c in _classes_in(a, namespace)]
    return []


def config_class(cls: type) -> type:
    """The config class ``cls`` is built with (NOTE [Deriving a trainer])."""
    base = _training_arguments()
    for klass in _above_trainer(cls):
        init = klass.__dict__.get("__init__")
        parameter = parameters(init).get("args") if init is not None else None
        if parameter is None or parameter.annotation is parameter.empty:
            continue
        namespace = getattr(init, "__globals__", {})
        for found in _classes_in(parameter.annotation, namespace):
            if isinstance(found, type) and issubclass(found, base):
                return found
    for klass in _above_trainer(cls):
        if klass.__name__.endswith("Trainer"):
            name = klass.__name__.removesuffix("Trainer") + "Config"
            module = inspect.getmodule(klass)
            for place in (module, _trl()):
                found = getattr(place, name, None)
                if isinstance(found, type) and issubclass(found, base):
                    return found
    return base


def _above_trainer(cls: type) -> list[type]:
    """The classes of ``cls``'s MRO before transformers' own ``Trainer`` (whose ``args`` annotation,
    ``TrainingArguments``, says nothing of the trainer built on it)."""
    out = []
    for klass in cls.__mro__:
        if (klass.__module__, klass.__name__) == ("transformers.trainer", "Trainer"):
            break
        out.append(klass)
    return out


def _trl() -> object:
    import sys

    return sys.modules.get("trl")


def common_settings() -> list[tuple[tuple[str, ...], Any]]:
    """Settings every trainer is built with: CPU, quiet, tiny (docs/frameworks.md lists them)."""
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
        # lengths: TRL 0.8 takes some as trainer arguments, later releases as config fields
        (("max_length", "max_seq_length"), 16),
        (("max_prompt_length",), 8),
        (("max_completion_length",), 4),
        # online trainers (GRPO, RLOO): 2 completions per prompt, sampled
        (("num_generations",), ROWS),
        (("num_generations_eval",), ROWS),
        (("temperature",), 1.0),
    ]


def cannot_feed(cls: type) -> str | None:
    """Why ``cls`` cannot be built with data leakscope makes (NOTE [Deriving a trainer]), or None."""
    init = init_parameters(cls)
    if "train_dataset" not in init:
        return f"{cls.__name__}.__init__ takes no train_dataset (it trains on what the script hands its own step())"
    judge = init.get("judge")
    if judge is not None and judge.default is judge.empty:
        return f"{cls.__name__} needs a judge (judge=..., no default: an API or a judging model), which leakscope cannot build offline"
    return None


def needs_scorer(cls: type) -> bool:
    """True when ``cls`` trains a scorer (its config is a reward config): its model gets the score head."""
    return config_class(cls).__name__ in SCORER_CONFIGS


def missing_scorer_config(cls: type) -> tuple[str, str] | None:
    """``(config name, first TRL release with it)`` when ``cls`` is a trainer of a scorer (named
    beside a scorer config: ``RewardTrainer`` <-> ``RewardConfig``) whose installed TRL does not
    export that config (TRL 0.4 to 0.7.1): nothing then says its model needs a score head, and a
    causal head would run its loss on the wrong outputs (NOTE [Deriving a trainer]); else None."""
    if needs_scorer(cls):
        return None
    for klass in _above_trainer(cls):
        name = klass.__name__.removesuffix("Trainer") + "Config"
        if name in SCORER_SINCE:
            return name, SCORER_SINCE[name]
    return None


def extra_models(cls: type, model: object) -> dict[str, Any]:
    """The models and reward functions ``cls``'s ``__init__`` asks for beside the trained one."""
    from leakscope.models.hf import build_tiny_llama

    init = init_parameters(cls)
    out: dict[str, object] = {}
    if "reward_funcs" in init:
        out["reward_funcs"] = [length_reward]
    for name, (head, only_required) in MODEL_ROLES.items():
        parameter = init.get(name)
        if parameter is None or (only_required and parameter.default is not parameter.empty):
            continue
        out[name] = build_tiny_llama(getattr(model, "size", None), head)
    return out


#: the format each trainer class was found to read (NOTE [Deriving a trainer]); weak, so no
#: class is kept alive by a check
_FITTED: weakref.WeakKeyDictionary[type, Format] = weakref.WeakKeyDictionary()


def build(cls: type, model: object, fmt: Format) -> Any:
    """``cls`` around ``model`` with data of format ``fmt``, as a user's script builds it."""
    tok = tokenizer()
    rows = ROWS * ACCUMULATION * 2
    config_cls = config_class(cls)
    takes = set(init_parameters(cls))
    config_kwargs, init_kwargs = route(
        common_settings() + list(fmt.settings), fields(config_cls), takes
    )
    init_kwargs["processing_class" if "processing_class" in takes else "tokenizer"] = tok
    if fmt.collator:
        from transformers import DataCollatorForLanguageModeling

        init_kwargs["data_collator"] = DataCollatorForLanguageModeling(tok, mlm=False)
    from datasets import Dataset

    train = Dataset.from_dict(fmt.columns(tok, rows))
    evaluation = Dataset.from_dict(fmt.columns(tok, rows))
    return cls(
        model=model,
        args=config_cls(**config_kwargs),
        train_dataset=train,
        eval_dataset=evaluation,
        **extra_models(cls, model),
        **init_kwargs,
    )


def first_batch(trainer: Any) -> None:
    """Collate the first batch of ``trainer``'s own train dataloader (raises when the data does not fit)."""
    for _ in trainer.get_train_dataloader():
        return


def fitting_format(cls: type, model: object, head: str) -> Format:
    """The first data format ``cls`` reads (NOTE [Deriving a trainer]), each tried on a scratch copy
    of the tiny model (a trainer that fails half-way may already have changed the model it was
    given: DPO adds its reference adapter); remembered per class."""
    from leakscope.models.hf import build_hf_lora

    known = _FITTED.get(cls)
    if known is not None:
        return known
    tried: list[str] = []
    for fmt in FORMATS:
        try:
            scratch = build_hf_lora(getattr(model, "size", None), head)
            first_batch(build(cls, scratch, fmt))
        except Exception as exc:  # the trainer's own error on data it does not read
            text = str(exc).strip().splitlines()
            tried.append(f"{fmt.name}: {type(exc).__name__}: {text[0] if text else ''}".rstrip())
            continue
        finally:
            scratch = None
        _FITTED[cls] = fmt
        return fmt
    raise EngineError(
        f"no data format leakscope makes fits {cls.__qualname__} (tried {'; '.join(tried)}); build it with "
        "--factory pkg.mod:make_trainer (a function make_trainer(model) that returns the trainer)"
    )


def build_fitting(cls: type, model: object, head: str = "causal") -> object:
    """``cls`` around ``model`` on the first data format it reads (NOTE [Deriving a trainer])."""
    return build(cls, model, fitting_format(cls, model, head))


__all__ = [
    "ACCUMULATION",
    "FORMATS",
    "MODEL_ROLES",
    "ROWS",
    "Format",
    "build",
    "build_fitting",
    "cannot_feed",
    "config_class",
    "extra_models",
    "init_parameters",
    "length_reward",
    "missing_scorer_config",
    "needs_scorer",
    "route",
    "tokenizer",
]
