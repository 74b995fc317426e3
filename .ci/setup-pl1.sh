#!/usr/bin/env bash
# Create the virtual environment the pytorch_lightning 1.x tests run leakscope in:
#   .venv-pl1  pytorch-lightning 1.4.9 (the oldest 1.x line the Lightning adapter drives; it imports
#              on torch 2.13), torchmetrics 0.6.2 (0.5.x fails to import: `tqdm.auto`), numpy 1.26.4,
#              setuptools 80.9.0 (torchmetrics 0.6 imports pkg_resources, which setuptools 81+ no
#              longer ships; torch 2.13 asks for setuptools>=77), and leakscope[lightning] (greenlet)
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# tests/test_reach_lightning.py runs `.venv-pl1/bin/leakscope check ...` and `... watch ...` in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
framework_venv setup-pl1 .venv-pl1 lightning \
    "pytorch-lightning==1.4.9" "torchmetrics==0.6.2" "numpy==1.26.4" "setuptools==80.9.0"
