#!/usr/bin/env bash
# Create the two virtual environments of TRL's CPOTrainer bug (huggingface/trl#1526: 0.8.3's
# `get_batch_loss_metrics` stores `policy_nll_loss.cpu().mean()`, graph and all, in
# `_stored_metrics`; fixed in 0.8.4 by trl#1531, `.detach()`):
#   .venv-trl083  trl 0.8.3 (the bug)
#   .venv-trl084  trl 0.8.4 (the fix)
# each with what .venv-trl08 has (transformers 4.40.2, peft 0.10.0, accelerate 0.29.3,
# datasets 2.19.1, numpy 1.26.4, pyarrow 17.0.0: the 0.8 line declares the same requirements),
# and leakscope (editable). The recipe (no torch of its own: the framework in front of .venv,
# pinned by .ci/locks/) is .ci/framework-venv.sh.
# tests/test_trainers.py runs `leakscope check trl.trainer.cpo_trainer:CPOTrainer` in both;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
for release in 0.8.3 0.8.4; do
    framework_venv setup-trl-cpo ".venv-trl${release//./}" "" \
        "trl==${release}" "transformers==4.40.2" "peft==0.10.0" "accelerate==0.29.3" "datasets==2.19.1" "numpy==1.26.4" "pyarrow==17.0.0"
done
