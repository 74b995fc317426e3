#!/usr/bin/env bash
# Create the virtual environment the Lightning integration tests run leakscope in:
#   .venv-lightning  pytorch-lightning 2.6.6, lightning 2.6.6 (the unified package, for
#                    `import lightning.pytorch`), torchmetrics 1.9.0, and leakscope[lightning]
#                    (greenlet)
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# tests/test_lightning.py and tests/test_watch_lightning.py run `.venv-lightning/bin/leakscope ...`
# in it; LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
framework_venv setup-lightning .venv-lightning lightning \
    "pytorch-lightning==2.6.6" "lightning==2.6.6" "torchmetrics==1.9.0"
