#!/usr/bin/env bash
# Create the virtual environment the TRL integration tests run leakscope in:
#   .venv-trl  trl 1.16.0 with the transformers 5.24.0, peft 0.21.2, accelerate 1.15.0 and
#              datasets 5.2.0 it is tested with, and leakscope[hf] (editable)
# torch 2.13.0 is installed first and pinned in every install so that nothing pulls another
# build. Re-running reuses a venv that already has these versions.
# tests/test_trl.py runs `.venv-trl/bin/leakscope check ...` in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 (or LEAKSCOPE_REQUIRE_VERL=1) makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
VENV=.venv-trl
PINS=("trl==1.16.0" "transformers==5.24.0" "peft==0.21.2" "accelerate==1.15.0" "datasets==5.2.0")

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
want = {"trl": "1.16.0", "transformers": "5.24.0", "peft": "0.21.2", "accelerate": "1.15.0", "datasets": "5.2.0"}
sys.exit(any(version(name) != v for name, v in want.items()))
PY
    echo "setup-trl: $VENV already has trl 1.16.0, transformers 5.24.0, peft 0.21.2, accelerate 1.15.0, datasets 5.2.0"
    exit 0
fi
started=$SECONDS
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q "$TORCH_SPEC"
"$VENV/bin/pip" install -q -e '.[hf]' "$TORCH_SPEC"
"$VENV/bin/pip" install -q "$TORCH_SPEC" "${PINS[@]}"
"$VENV/bin/python" -c "import torch, trl, transformers, peft; print('setup-trl: $VENV: trl', trl.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'torch', torch.__version__)"
echo "setup-trl: $VENV took $((SECONDS - started)) s"
