#!/usr/bin/env bash
# Create the virtual environments the verl integration tests run leakscope in:
#   .venv-verl080  verl 0.8.0 (+ pyarrow 24.0.0, without which it does not import): has the 6698 leak
#   .venv-verl091  verl 0.9.1: fixed
# torch 2.13.0 is installed first so that nothing pulls another build, then
# leakscope (editable), then verl. Re-running reuses an existing venv whose
# verl version is already right. Usage: .ci/setup-verl.sh [080|091]...
# tests/test_verl.py runs `<venv>/bin/leakscope check ...` in these venvs;
# LEAKSCOPE_REQUIRE_VERL=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

setup() {  # setup <venv> <verl version> <extra pip specs...>
    local venv=$1 version=$2
    shift 2
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import verl, sys; sys.exit(verl.__version__ != '$version')" 2>/dev/null; then
        echo "setup-verl: $venv already has verl $version"
        return
    fi
    local started=$SECONDS
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q "$TORCH_SPEC"
    "$venv/bin/pip" install -q -e .
    "$venv/bin/pip" install -q "$TORCH_SPEC" "verl==$version" "$@"
    # pip never replaces torch here (it is pinned in every install), but say so loudly if it did.
    "$venv/bin/python" -c "import torch, verl; print('setup-verl: $venv: verl', verl.__version__, 'torch', torch.__version__)"
    echo "setup-verl: $venv took $((SECONDS - started)) s"
}

wanted=${*:-080 091}
for which in $wanted; do
    case $which in
        080) setup .venv-verl080 0.8.0 "pyarrow==24.0.0" ;;
        091) setup .venv-verl091 0.9.1 ;;
        *) echo "setup-verl: unknown version '$which' (use 080 or 091)" >&2; exit 2 ;;
    esac
done
