#!/usr/bin/env bash
# Create the virtual environments the verl integration tests run leakscope in:
#   .venv-verl080  verl 0.8.0 (+ pyarrow 24.0.0, without which it does not import): has the 6698 leak
#   .venv-verl091  verl 0.9.1: fixed
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh. Usage: .ci/setup-verl.sh [080|091]...
# tests/test_verl.py runs `<venv>/bin/leakscope check ...` in these venvs;
# LEAKSCOPE_REQUIRE_VERL=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh

wanted=${*:-080 091}
for which in $wanted; do
    case $which in
        080) framework_venv setup-verl .venv-verl080 "" "verl==0.8.0" "pyarrow==24.0.0" ;;
        091) framework_venv setup-verl .venv-verl091 "" "verl==0.9.1" ;;
        *) echo "setup-verl: unknown version '$which' (use 080 or 091)" >&2; exit 2 ;;
    esac
done
