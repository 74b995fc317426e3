"""Every code example in docs/watch.md and docs/distributed.md runs, and every output shown is today's real output.

``docs/gen_watch_examples.py`` runs them (and rewrites the outputs); each block is one test here.
A block that needs a framework venv is skipped without it, and fails under
LEAKSCOPE_REQUIRE_FRAMEWORKS=1, as the framework tests do.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "docs"))
try:
    import gen_watch_examples as examples
finally:
    sys.path.remove(str(ROOT / "docs"))

BLOCKS = [block for doc in examples.DOCS for block in examples.blocks(doc)]


def test_every_block_in_the_docs_can_be_run() -> None:
    assert len(BLOCKS) >= 10
    assert [b.name for b in BLOCKS if examples.kind(b) is None] == []
    # The library example prints what its comment lines say; the outputs are of these commands.
    assert any(b.lang == "python" and "leakscope.watch(" in b.body for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_example_runs_and_shows_its_real_output(block: examples.Block) -> None:
    needs = examples.missing(block)
    if needs is not None:
        message = f"{needs} is missing; create it with .ci/setup-{needs.removeprefix('.venv-').rstrip('0123456789')}.sh"
        if os.environ.get("LEAKSCOPE_REQUIRE_FRAMEWORKS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    assert examples.run(block) == block.body, f"{block.name} is stale: run python docs/gen_watch_examples.py"
