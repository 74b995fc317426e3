#!/usr/bin/env bash
# Install the real-bug suite's overlays (realbugs/bugs.toml, docs/real-bugs.md): for each bug's
# buggy and fixed release, the packages of its reference venv that .venv lacks at that exact
# version, into realbugs/.envs/<bug>-<version>/ with `uv pip install --target DIR --no-deps`
# (uv from the test extra; exact pins, no resolver, never torch). A release runs on .venv's
# interpreter (torch 2.13.0, leakscope) with PYTHONPATH=<overlay>:<repository root>.
# Idempotent: an overlay whose recorded pins match is kept. About 50 s for all 20 from a cold
# uv cache, 1 s when they are all up to date.
# tests/test_realbugs.py runs them; LEAKSCOPE_REQUIRE_FRAMEWORKS=1 makes a missing overlay fail there.
#   .ci/setup-realbugs.sh            every bug
#   .ci/setup-realbugs.sh NAME...    only these bugs
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
.venv/bin/python -m realbugs.overlays "$@"
echo "setup-realbugs: took $((SECONDS - started)) s"
