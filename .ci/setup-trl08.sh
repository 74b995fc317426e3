#!/usr/bin/env bash
# Create the virtual environments of the TRL 0.8 line, for the old-release TRL / transformers tests:
#   .venv-trl08   trl 0.8.6 (no GRPO, no DPOConfig/SFTConfig: trainers take `tokenizer=` and their
#                 settings as arguments) with transformers 4.40.2 (`tokenizer=`, `training_step(model,
#                 inputs)`), peft 0.10.0, accelerate 0.29.3, datasets 2.19.1, and numpy 1.26.4
#                 (these releases predate numpy 2) with pyarrow 17.0.0 (newer pyarrow needs numpy 2), and leakscope (editable; not the hf extra,
#                 which asks for transformers 5)
#   .venv-trl083  the same with trl 0.8.3: CPOTrainer's bug (huggingface/trl#1526: `get_batch_loss_metrics`
#                 stores `policy_nll_loss.cpu().mean()`, graph and all, in `_stored_metrics`)
#   .venv-trl084  the same with trl 0.8.4, its fix (trl#1531: `.detach()`); the 0.8 line declares the
#                 same requirements, so the three locks differ in trl only
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# tests/test_reach_trl.py runs `.venv-trl08/bin/leakscope check ...` and `... watch ...` in it,
# tests/test_trainers.py every trainer class of 0.8.6 and CPOTrainer on 0.8.3 and 0.8.4;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
for venv in .venv-trl08:0.8.6 .venv-trl083:0.8.3 .venv-trl084:0.8.4; do
    framework_venv setup-trl08 "${venv%%:*}" "" \
        "trl==${venv##*:}" "transformers==4.40.2" "peft==0.10.0" "accelerate==0.29.3" "datasets==2.19.1" "numpy==1.26.4" "pyarrow==17.0.0"
done
