"""The Trainer adapter's derivation rules (NOTE [Deriving a trainer]), on the main venv's real
transformers classes: the config class from the ``args`` annotation or the config exported
beside the trainer, the constructor of a pass-through alias, the refusals for what leakscope
cannot feed. Every trainer class of real TRL releases is built by tests/test_trainers.py."""

# No `from __future__ import annotations`: the trainers below annotate `args` with real classes, as
# TRL's modules do; `Postponed` spells its annotation as a string.
import types
from typing import Any, Optional

import pytest

pytestmark = pytest.mark.unit

transformers = pytest.importorskip("transformers")


def test_config_class_is_read_from_the_args_annotation_in_every_spelling() -> None:
    import dataclasses

    from leakscope.adapters.trainer_build import config_class

    @dataclasses.dataclass
    class CPOConfig(transformers.TrainingArguments):  # type: ignore[misc]
        beta: float = 0.1

    class Modern(transformers.Trainer):  # type: ignore[misc]
        def __init__(self, model: Any = None, args: CPOConfig | None = None) -> None: ...

    class Old(transformers.Trainer):  # type: ignore[misc]
        def __init__(self, model: Any = None, args: Optional[CPOConfig] = None) -> None: ...  # noqa: UP045

    class Postponed(transformers.Trainer):  # type: ignore[misc]
        def __init__(self, model: Any = None, args: "CPOConfig | None" = None) -> None: ...

    class Mine(Modern):  # a user's subclass with an __init__ of its own, unannotated
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    Postponed.__init__.__globals__["CPOConfig"] = CPOConfig  # as the trainer's module defines it
    try:
        assert [config_class(c) for c in (Modern, Old, Postponed, Mine)] == [CPOConfig] * 4
    finally:
        del Postponed.__init__.__globals__["CPOConfig"]
    assert config_class(transformers.Trainer) is transformers.TrainingArguments


def test_config_class_exported_beside_the_trainer_when_args_is_not_annotated() -> None:
    import dataclasses

    from leakscope.adapters.trainer_build import config_class

    module = types.ModuleType("leakscope_test_orpo")

    @dataclasses.dataclass
    class ORPOConfig(transformers.TrainingArguments):  # type: ignore[misc]
        alpha: float = 0.1

    def init(self: Any, model: Any = None, args: Any = None) -> None: ...

    module.ORPOConfig = ORPOConfig  # type: ignore[attr-defined]
    trainer = type("ORPOTrainer", (transformers.Trainer,), {"__init__": init})
    trainer.__module__ = module.__name__
    import sys

    sys.modules[module.__name__] = module
    try:
        assert config_class(trainer) is ORPOConfig
    finally:
        del sys.modules[module.__name__]


def test_a_pass_through_alias_takes_its_base_s_constructor_and_what_cannot_be_fed_is_one_line() -> (
    None
):
    from leakscope.adapters.trainer_build import cannot_feed, init_parameters

    class Base(transformers.Trainer):  # type: ignore[misc]
        def __init__(self, model: Any, args: Any = None, train_dataset: Any = None) -> None: ...

    class Alias(Base):  # TRL's deprecated aliases: __init__(*args, **kwargs) with a warning
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    assert list(init_parameters(Alias)) == ["model", "args", "train_dataset"]
    assert cannot_feed(Alias) is None

    class StepFed(transformers.Trainer):  # type: ignore[misc]
        def __init__(self, model: Any, args: Any = None, tokenizer: Any = None) -> None: ...

    class Judged(Base):
        def __init__(self, model: Any, judge: Any, train_dataset: Any = None) -> None: ...

    assert cannot_feed(StepFed) == (
        "StepFed.__init__ takes no train_dataset (it trains on what the script hands its own step())"
    )
    assert cannot_feed(Judged) == (
        "Judged needs a judge (judge=..., no default: an API or a judging model), which leakscope "
        "cannot build offline"
    )


def test_a_constructor_passing_kwargs_on_takes_its_base_s_too_and_one_without_stops_there() -> None:
    """GMPOTrainer's shape: ``(model, reward_funcs, args=None, **kwargs)`` passed on to GRPOTrainer,
    whose ``processing_class`` and ``train_dataset`` it takes; the nearest default wins."""
    from leakscope.adapters.trainer_build import cannot_feed, init_parameters

    class Base(transformers.Trainer):  # type: ignore[misc]
        def __init__(
            self,
            model: Any,
            args: Any = None,
            train_dataset: Any = None,
            processing_class: Any = None,
        ) -> None: ...

    class Variant(Base):
        def __init__(self, model: Any, reward_funcs: Any, args: Any = 1, **kwargs: Any) -> None:
            super().__init__(model, args, **kwargs)

    class Closed(Base):  # takes no **kwargs: its base's arguments are not its own
        def __init__(self, model: Any, args: Any = None) -> None: ...

    found = init_parameters(Variant)
    assert list(found) == ["model", "reward_funcs", "args", "train_dataset", "processing_class"]
    assert found["args"].default == 1
    assert cannot_feed(Variant) is None
    assert list(init_parameters(Closed)) == ["model", "args"]


def test_a_reward_trainer_without_its_reward_config_is_named_with_the_first_release_that_has_it() -> (
    None
):
    """TRL 0.4 to 0.7.1's RewardTrainer takes a plain TrainingArguments: nothing says its model needs
    a score head, so it is refused (the one line names trl.RewardConfig and TRL 0.7.2), never built
    on a causal head; with a RewardConfig (0.7.2 on) it is built on the score head."""
    import dataclasses

    from leakscope.adapters.trainer_build import missing_scorer_config, needs_scorer

    class RewardTrainer(transformers.Trainer):  # type: ignore[misc]
        def __init__(
            self, model: Any, args: transformers.TrainingArguments | None = None
        ) -> None: ...

    class MyRewardTrainer(RewardTrainer):
        pass

    class SFTTrainer(transformers.Trainer):  # type: ignore[misc]
        pass

    assert missing_scorer_config(RewardTrainer) == ("RewardConfig", "0.7.2")
    assert missing_scorer_config(MyRewardTrainer) == ("RewardConfig", "0.7.2")
    assert missing_scorer_config(SFTTrainer) is None

    @dataclasses.dataclass
    class RewardConfig(transformers.TrainingArguments):  # type: ignore[misc]
        pass

    class ConfiguredRewardTrainer(transformers.Trainer):  # type: ignore[misc]
        def __init__(self, model: Any, args: RewardConfig | None = None) -> None: ...

    assert needs_scorer(ConfiguredRewardTrainer)
    assert missing_scorer_config(ConfiguredRewardTrainer) is None


def test_settings_go_to_the_config_field_else_to_init_under_the_first_spelling() -> None:
    from leakscope.adapters.trainer_build import route

    config, init = route(
        [(("max_length", "max_seq_length"), 16), (("dataset_text_field",), "text"), (("x",), 1)],
        {"dataset_text_field"},
        {"max_seq_length", "model"},
    )
    assert (config, init) == ({"dataset_text_field": "text"}, {"max_seq_length": 16})
