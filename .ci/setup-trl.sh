#!/usr/bin/env bash
# Create the virtual environment the TRL integration tests run leakscope in:
#   .venv-trl  trl 1.16.0 with the transformers 5.24.0, peft 0.21.2, accelerate 1.15.0 and
#              datasets 5.2.0 it is tested with, and leakscope[hf] (editable)
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# tests/test_trl.py runs `.venv-trl/bin/leakscope check ...` in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 (or LEAKSCOPE_REQUIRE_VERL=1) makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
framework_venv setup-trl .venv-trl hf \
    "trl==1.16.0" "transformers==5.24.0" "peft==0.21.2" "accelerate==1.15.0" "datasets==5.2.0"
