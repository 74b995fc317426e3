#!/usr/bin/env bash
# Create the virtual environment the Ray integration tests run leakscope in:
#   .venv-ray  ray 2.60.0 (plain `ray`: core only, no dashboard extras) and leakscope (editable)
# The recipe (no torch of its own: the framework in front of .venv, pinned by .ci/locks/) is
# .ci/framework-venv.sh.
# tests/test_watch_ray.py runs `.venv-ray/bin/leakscope watch ...` (a local Ray cluster) and
# the fixture driver with Ray's worker_process_setup_hook in it;
# LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing venv fail those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/framework-venv.sh
framework_venv setup-ray .venv-ray "" "ray==2.60.0"
