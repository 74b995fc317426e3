#!/usr/bin/env bash
# Create the virtual environment the Lightning integration tests run leakscope in:
#   .venv-lightning  pytorch-lightning 2.6.6, lightning 2.6.6 (the unified package, for
#                    `import lightning.pytorch`), torchmetrics 1.9.0, and leakscope[lightning]
#                    (greenlet)
# torch 2.13.0 is installed first and pinned in every install so that nothing pulls another
# build. Re-running reuses a venv that already has these versions.
# tests/test_lightning.py runs `.venv-lightning/bin/leakscope check ...` in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
VENV=.venv-lightning
PINS=("pytorch-lightning==2.6.6" "lightning==2.6.6" "torchmetrics==1.9.0")

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
import greenlet  # noqa: F401
sys.exit(not (version("pytorch-lightning") == version("lightning") == "2.6.6" and version("torchmetrics") == "1.9.0"))
PY
    echo "setup-lightning: $VENV already has pytorch-lightning 2.6.6, lightning 2.6.6, torchmetrics 1.9.0"
    exit 0
fi
started=$SECONDS
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q "$TORCH_SPEC"
"$VENV/bin/pip" install -q -e '.[lightning]' "$TORCH_SPEC"
"$VENV/bin/pip" install -q "$TORCH_SPEC" "${PINS[@]}"
"$VENV/bin/python" -c "import torch, pytorch_lightning, lightning, torchmetrics; print('setup-lightning: $VENV: pytorch-lightning', pytorch_lightning.__version__, 'lightning', lightning.__version__, 'torchmetrics', torchmetrics.__version__, 'torch', torch.__version__)"
echo "setup-lightning: $VENV took $((SECONDS - started)) s"
