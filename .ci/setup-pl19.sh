#!/usr/bin/env bash
# Create the virtual environment the pytorch_lightning 1.9 tests run leakscope in:
#   .venv-pl19  pytorch-lightning 1.9.5 (the last 1.x release: the loops of 1.x's last shape, the
#               module's trainer proxy), torchmetrics 0.11.4 and lightning-utilities 0.8.0 (its
#               contemporaries), numpy 1.26.4 (1.9 predates numpy 2: `np.Inf`), setuptools 80.9.0
#               (lightning-utilities 0.8 imports pkg_resources, which setuptools 81+ no longer
#               ships; torch 2.13 asks for setuptools>=77), and leakscope[lightning] (greenlet)
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# tests/test_trainers.py checks a stock module and its leaky subclass in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
framework_venv setup-pl19 .venv-pl19 lightning \
    "pytorch-lightning==1.9.5" "torchmetrics==0.11.4" "lightning-utilities==0.8.0" "numpy==1.26.4" "setuptools==80.9.0"
