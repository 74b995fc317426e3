"""Every example in README.md and docs/*.md runs, and every output shown is what leakscope prints today.

docs/gen.py says what each fenced block is (a session, a command's output, a program, a pytest file,
a configuration, a part of a file, or shown only, with the reason) and runs it; ``python docs/gen.py``
rewrites the outputs. Each block is one test here. The selected blocks are run once, two at a time
(``LEAKSCOPE_DOC_JOBS``), before the first of them is checked, and a command that several blocks show
a part of runs once. A block that needs a framework venv is skipped without it and fails under
LEAKSCOPE_REQUIRE_FRAMEWORKS=1, as the framework tests do. docs/real-bugs.md's reports are the
real-bug suite's, checked by tests/test_realbugs.py against the runs it makes anyway.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from docs import gen
from tests.conftest import ROOT, framework_missing

pytestmark = pytest.mark.frameworks

BLOCKS = [block for doc in gen.documents() for block in gen.blocks(doc)]
#: every block that runs (the others are shown only, or run by another test file)
RUNS = [block for block in BLOCKS if gen.kind(block) not in ("not run", "pre-commit", "realbugs")]
#: documents whose blocks tests/test_doc_examples_jobs.py runs: the examples are the largest piece of
#: the suite, and two modules run in two workers (NOTE [Parallel tests] in tests/conftest.py); the
#: README and docs/watch.md stay together, since they show one command
JOBS_DOCS = frozenset({"README.md", "watch.md", "frameworks.md", "adapters.md", "distributed.md"})
#: the blocks this file runs
RUN = [block for block in RUNS if block.doc.name not in JOBS_DOCS]


def test_every_block_is_run_or_says_why_not() -> None:
    assert len(BLOCKS) > 100
    assert [problem for block in BLOCKS for problem in gen.problems(block)] == []
    # Every python block runs: as a program, a pytest file, the output of a command (the test that
    # `watch --emit-test` writes), a file the tests install, or it says why it is shown only.
    python = {gen.kind(block) for block in BLOCKS if block.lang == "python"}
    assert python <= {"python", "pytest", "output", "file", "not run"}, python
    # The README's quick start shows the real report of the leaky reference engine.
    readme = [block for block in BLOCKS if block.doc.name == "README.md"]
    assert any(
        block.directive("output") == "leakscope check leakscope.models.engines:LeakyFSDPEngine"
        for block in readme
    )


def selected(request: pytest.FixtureRequest, module: types.ModuleType) -> list[gen.Block]:
    """The blocks of this session's selected example tests in ``module`` (so that ``-k`` runs only
    what it picks)."""
    items = [item for item in request.session.items if getattr(item, "module", None) is module]
    return [
        item.callspec.params["block"]
        for item in items
        if hasattr(item, "callspec") and "block" in item.callspec.params
    ]


def run_selected(
    request: pytest.FixtureRequest, module: types.ModuleType
) -> dict[str, str | BaseException]:
    """Every selected block of ``module`` that can run here, run once: its name -> what it shows
    today (or how it failed)."""
    chosen = [block for block in selected(request, module) if gen.missing(block) is None]
    jobs = int(os.environ.get("LEAKSCOPE_DOC_JOBS", "2"))
    return {
        block.name: result for block, result in zip(chosen, gen.run_all(chosen, jobs), strict=True)
    }


@pytest.fixture(scope="session")
def runs(request: pytest.FixtureRequest) -> dict[str, str | BaseException]:
    return run_selected(request, sys.modules[__name__])


@pytest.mark.parametrize("block", RUN, ids=[block.name for block in RUN])
def test_example_runs_and_shows_its_real_output(
    block: gen.Block, runs: dict[str, str | BaseException]
) -> None:
    check_block(block, runs)


def check_block(block: gen.Block, runs: dict[str, str | BaseException]) -> None:
    """``block`` ran (:func:`run_selected`) and printed exactly what it shows."""
    problem = gen.missing(block)
    if problem is not None:
        framework_missing(problem)
    result = runs[block.name]
    if isinstance(result, BaseException):
        raise result
    assert result == block.body, (
        f"{block.name} is stale: run python docs/gen.py {block.doc.relative_to(ROOT)}"
    )


# --- the mechanism itself, on small documents -------------------------------------------------------


def _doc(tmp_path: Path, text: str) -> list[gen.Block]:
    doc = tmp_path / "page.md"
    doc.write_text(text, encoding="utf-8")
    return gen.blocks(doc)


def test_a_stray_fence_or_an_unclosed_block_is_refused(tmp_path: Path) -> None:
    # docs/cli.md once had a closing fence too many: the options table below it became a code block.
    with pytest.raises(gen.DocError, match="page.md:5: a fence without a language"):
        _doc(tmp_path, "```text\nleakscope check\n```\n\n```\n| table |\n")
    with pytest.raises(gen.DocError, match="page.md:1: the ```text block is never closed"):
        _doc(tmp_path, "```text\nleakscope check\n")


def test_an_unmarked_block_and_a_reasonless_one_are_named(tmp_path: Path) -> None:
    blocks = _doc(
        tmp_path,
        "```text\nLEAK\n```\n\n<!-- not run: x -->\n```text\nLEAK\n```\n\n<!-- outptu: ls -->\n```text\na\n```\n",
    )
    problems = [problem for block in blocks for problem in gen.problems(block)]
    assert any("page.md:1: a ```text block that is not run" in p for p in problems), problems
    assert any("page.md:6: `not run` needs a reason" in p for p in problems), problems
    assert any("page.md:11: unknown directive 'outptu'" in p for p in problems), problems


def test_a_stale_output_is_rewritten_and_a_failing_command_named(tmp_path: Path) -> None:
    blocks = _doc(
        tmp_path,
        (
            "```console\n$ echo one; echo two\nold\n$ x=3\n$ echo $x\n```\n\n"
            "<!-- output: printf 'a\\nb\\nc\\n' | grep -v b -->\n```text\nb\n```\n\n"
            "```bash\nexit 4\n```\n"
        ),
    )
    session, output, failing = blocks
    assert gen.kind(session) == "session" and session.commands == [
        "echo one; echo two",
        "x=3",
        "echo $x",
    ]
    assert gen.expected(session) == "$ echo one; echo two\none\ntwo\n$ x=3\n$ echo $x\n3\n"
    assert gen.expected(output) == "a\nc\n"
    with pytest.raises(AssertionError, match="`exit 4` exited 4"):
        gen.expected(failing)


def test_what_varies_between_runs_and_machines_is_normalised_in_one_place() -> None:
    printed = (
        "leakscope 0.1.0 · torch 2.13.0+cpu · Python 3.11.7\n\n"
        f"created at {ROOT}/fixtures/x.py:3 {{'pid': 4242}} report-4242.json (pid 17) /tmp/tmpab_3x/y\n"
        '"python_version": "3.11.7", "seconds": 0.25\n'
    )
    assert gen.clean(printed) == (
        "created at fixtures/x.py:3 {'pid': PID} report-PID.json (pid PID) /tmp/TMP/y\n"
        '"python_version": "3.11.x", "seconds": S\n'
    )


def test_a_block_that_needs_a_missing_venv_says_how_to_make_it(tmp_path: Path) -> None:
    (block,) = _doc(tmp_path, "```console\n$ .venv-nosuch/bin/leakscope check x:Y\n```\n")
    assert gen.needs(block) == [".venv-nosuch"]
    assert gen.missing(block) == ".venv-nosuch is missing; create it with .ci/setup-*.sh"
    (block,) = [b for b in BLOCKS if b.directive("needs") == ".venv-ray" and b.lang == "python"]
    assert gen.needs(block) == [".venv-ray"]
