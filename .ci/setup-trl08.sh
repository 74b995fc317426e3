#!/usr/bin/env bash
# Create the virtual environment the old-release TRL / transformers tests run leakscope in:
#   .venv-trl08  trl 0.8.6 (no GRPO, no DPOConfig/SFTConfig: trainers take `tokenizer=` and their
#                settings as arguments) with transformers 4.40.2 (`tokenizer=`, `training_step(model,
#                inputs)`), peft 0.10.0, accelerate 0.29.3, datasets 2.19.1, and numpy 1.26.4
#                (these releases predate numpy 2) with pyarrow 17.0.0 (newer pyarrow needs numpy 2), and leakscope (editable; not the hf extra,
#                which asks for transformers 5)
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# tests/test_reach_trl.py runs `.venv-trl08/bin/leakscope check ...` and `... watch ...` in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
framework_venv setup-trl08 .venv-trl08 "" \
    "trl==0.8.6" "transformers==4.40.2" "peft==0.10.0" "accelerate==0.29.3" "datasets==2.19.1" "numpy==1.26.4" "pyarrow==17.0.0"
