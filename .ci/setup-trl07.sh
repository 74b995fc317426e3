#!/usr/bin/env bash
# Create the virtual environments of TRL's oldest lines, for tests/test_trainers.py:
#   .venv-trl07  trl 0.7.11 (the last 0.7: RewardConfig, DPO, IterativeSFT, SFT, the old PPOTrainer)
#   .venv-trl04  trl 0.4.7 (the 0.4 line: SFT, a RewardTrainer with no RewardConfig, the old PPOTrainer)
# each with transformers 4.38.2 (`tokenizer=`, `no_cuda`), tokenizers 0.15.2, peft 0.9.0,
# accelerate 0.29.3, datasets 2.19.1, numpy 1.26.4 (these releases predate numpy 2) with pyarrow
# 17.0.0 (newer pyarrow needs numpy 2), and leakscope (editable; not the hf extra, which asks for
# transformers 5); the two locks differ in trl and what it asks for (0.7: tyro)
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
for venv in .venv-trl07:0.7.11 .venv-trl04:0.4.7; do
    framework_venv setup-trl07 "${venv%%:*}" "" \
        "trl==${venv##*:}" "transformers==4.38.2" "tokenizers==0.15.2" "peft==0.9.0" "accelerate==0.29.3" "datasets==2.19.1" "numpy==1.26.4" "pyarrow==17.0.0"
done
