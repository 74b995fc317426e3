"""What the trainer suite checks: every trainer class of each framework release it covers.

``tests/test_trainers.py`` builds and checks each row with no glue in the release's venv;
``docs/gen_frameworks_table.py`` writes the table in docs/frameworks.md from these rows (and
``tests/test_frameworks_table.py`` checks that the two agree). A row is a class as the release
exports it: checked (the stock class clean, its ``Kept`` subclass, which keeps every attached
loss, a leak at ``engine.kept_losses[0]``), or refused in one line.
"""

from __future__ import annotations

import dataclasses

#: the leaky subclass's holder, on every trainer (fixtures/trainers/)
KEPT = "engine.kept_losses[0]"


@dataclasses.dataclass(frozen=True)
class Release:
    """One framework venv of the suite and the trainer classes it exports."""

    #: the venv (``.venv-trl``) and the script that makes it
    venv: str
    setup: str
    #: the framework and its release, as the table names it (``TRL 1.16.0``)
    framework: str
    #: what it runs on (``transformers 5.24.0``)
    beside: str
    #: the fixture module that exports every class under its own name and a ``Kept`` subclass
    fixtures: str
    #: class name -> target of the stock class
    classes: dict[str, str]
    #: class name -> the refusal's distinctive part (the whole line is one line naming the fix)
    refused: dict[str, str] = dataclasses.field(default_factory=dict)
    #: leak paths the release itself keeps in every module when its next step starts, besides the bug
    own: tuple[str, ...] = ()


TRL = "trl.trainer"
#: the classes a TRL release before 0.12 exports that check refuses, and the line it says
BEFORE_TRL_012 = {
    "IterativeSFTTrainer": "IterativeSFTTrainer.__init__ takes no train_dataset (it trains on what the "
    "script hands its own step())",
    "PPOTrainer": "lacks a PPOTrainer built on transformers.Trainer (before TRL 0.12 its step is "
    "PPOTrainer.step)",
}
RELEASES = (
    Release(
        ".venv-trl",
        ".ci/setup-trl.sh",
        "TRL 1.16.0",
        "transformers 5.24.0",
        "fixtures.trainers.every",
        {
            "Trainer": "transformers.trainer:Trainer",
            "DPOTrainer": f"{TRL}.dpo_trainer:DPOTrainer",
            "DistillationTrainer": f"{TRL}.distillation_trainer:DistillationTrainer",
            "GRPOTrainer": f"{TRL}.grpo_trainer:GRPOTrainer",
            "KTOTrainer": f"{TRL}.kto_trainer:KTOTrainer",
            "RLOOTrainer": f"{TRL}.rloo_trainer:RLOOTrainer",
            "RewardTrainer": f"{TRL}.reward_trainer:RewardTrainer",
            "SFTTrainer": f"{TRL}.sft_trainer:SFTTrainer",
        },
    ),
    Release(
        ".venv-trl08",
        ".ci/setup-trl08.sh",
        "TRL 0.8.6",
        "transformers 4.40.2",
        "fixtures.trainers.every",
        {
            "Trainer": "transformers.trainer:Trainer",
            "CPOTrainer": f"{TRL}.cpo_trainer:CPOTrainer",
            "DPOTrainer": f"{TRL}.dpo_trainer:DPOTrainer",
            "IterativeSFTTrainer": f"{TRL}.iterative_sft_trainer:IterativeSFTTrainer",
            "KTOTrainer": f"{TRL}.kto_trainer:KTOTrainer",
            "ORPOTrainer": f"{TRL}.orpo_trainer:ORPOTrainer",
            "PPOTrainer": f"{TRL}.ppo_trainer:PPOTrainer",
            "RewardTrainer": f"{TRL}.reward_trainer:RewardTrainer",
            "SFTTrainer": f"{TRL}.sft_trainer:SFTTrainer",
        },
        refused=BEFORE_TRL_012,
    ),
    Release(
        ".venv-trl07",
        ".ci/setup-trl07.sh",
        "TRL 0.7.11",
        "transformers 4.38.2",
        "fixtures.trainers.every",
        {
            "Trainer": "transformers.trainer:Trainer",
            "DPOTrainer": f"{TRL}.dpo_trainer:DPOTrainer",
            "IterativeSFTTrainer": f"{TRL}.iterative_sft_trainer:IterativeSFTTrainer",
            "PPOTrainer": f"{TRL}.ppo_trainer:PPOTrainer",
            "RewardTrainer": f"{TRL}.reward_trainer:RewardTrainer",
            "SFTTrainer": f"{TRL}.sft_trainer:SFTTrainer",
        },
        refused=BEFORE_TRL_012,
    ),
    Release(
        ".venv-trl04",
        ".ci/setup-trl07.sh",
        "TRL 0.4.7",
        "transformers 4.38.2",
        "fixtures.trainers.every",
        {
            "Trainer": "transformers.trainer:Trainer",
            "PPOTrainer": f"{TRL}.ppo_trainer:PPOTrainer",
            "RewardTrainer": f"{TRL}.reward_trainer:RewardTrainer",
            "SFTTrainer": f"{TRL}.sft_trainer:SFTTrainer",
        },
        refused={
            "PPOTrainer": "lacks a PPOTrainer built on transformers.Trainer (before TRL 0.12 its step is "
            "PPOTrainer.step)",
            "RewardTrainer": "trl 0.4.7 lacks trl.RewardConfig (the config that says a RewardTrainer trains "
            "a scorer, on a score head); check builds it from TRL 0.7.2 on",
        },
    ),
    Release(
        ".venv-lightning",
        ".ci/setup-lightning.sh",
        "pytorch-lightning 2.6.6",
        "lightning 2.6.6",
        "fixtures.trainers.lit",
        {"LightningModule": "fixtures.trainers.lit:LitModel"},
    ),
    Release(
        ".venv-pl1",
        ".ci/setup-pl1.sh",
        "pytorch-lightning 1.4.9",
        "torchmetrics 0.6.2",
        "fixtures.trainers.lit",
        {"LightningModule": "fixtures.trainers.lit:LitModel"},
    ),
    Release(
        ".venv-pl19",
        ".ci/setup-pl19.sh",
        "pytorch-lightning 1.9.5",
        "torchmetrics 0.11.4",
        "fixtures.trainers.lit",
        {"LightningModule": "fixtures.trainers.lit:LitModel"},
    ),
)

#: the bug this suite keeps from TRL's own history (huggingface/trl#1526): its buggy and fixed
#: release, and the holder the buggy one must be reported at
CPO_BUG = {
    ".venv-trl083": ("TRL 0.8.3", "engine._stored_metrics.train.nll_loss[0]"),
    ".venv-trl084": ("TRL 0.8.4", None),
}
CPO_SETUP = ".ci/setup-trl08.sh"
CPO_TARGET = f"{TRL}.cpo_trainer:CPOTrainer"


def rows() -> list[tuple[Release, str]]:
    """Every ``(release, class name)`` the suite checks, in table order."""
    return [(release, name) for release in RELEASES for name in release.classes]


__all__ = ["CPO_BUG", "KEPT", "RELEASES", "Release", "rows"]
