#!/usr/bin/env bash
# Create the virtual environment the Ray integration tests run leakscope in:
#   .venv-ray  ray 2.60.0 (plain `ray`: core only, no dashboard extras) and leakscope
# torch 2.13.0 is installed first and pinned in every install so that nothing pulls another
# build. Re-running reuses a venv that already has these versions.
# tests/test_watch_ray.py runs `.venv-ray/bin/leakscope watch ...` (a local Ray cluster) and
# the fixture driver with Ray's worker_process_setup_hook in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
VENV=.venv-ray
PINS=("ray==2.60.0")

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
import leakscope  # noqa: F401
sys.exit(version("ray") != "2.60.0")
PY
    echo "setup-ray: $VENV already has ray 2.60.0"
    exit 0
fi
started=$SECONDS
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q "$TORCH_SPEC"
"$VENV/bin/pip" install -q -e . "$TORCH_SPEC"
"$VENV/bin/pip" install -q "$TORCH_SPEC" "${PINS[@]}"
"$VENV/bin/python" -c "import torch, ray; print('setup-ray: $VENV: ray', ray.__version__, 'torch', torch.__version__)"
echo "setup-ray: $VENV took $((SECONDS - started)) s"
