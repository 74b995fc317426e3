"""The examples of README.md, docs/watch.md, docs/frameworks.md, docs/adapters.md and docs/distributed.md
run and show their real output: tests/test_doc_examples.py's check (the rest of the documents are
there), in a module of its own so that the two halves of the examples run in two workers (NOTE
[Parallel tests] in tests/conftest.py).
"""

from __future__ import annotations

import sys

import pytest

from docs import gen
from tests.test_doc_examples import JOBS_DOCS, RUNS, check_block, run_selected

pytestmark = pytest.mark.frameworks

#: the blocks this file runs
RUN = [block for block in RUNS if block.doc.name in JOBS_DOCS]


@pytest.fixture(scope="session")
def runs(request: pytest.FixtureRequest) -> dict[str, str | BaseException]:
    return run_selected(request, sys.modules[__name__])


@pytest.mark.parametrize("block", RUN, ids=[block.name for block in RUN])
def test_example_runs_and_shows_its_real_output(
    block: gen.Block, runs: dict[str, str | BaseException]
) -> None:
    check_block(block, runs)
