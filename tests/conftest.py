"""Shared test helpers: real fixtures, real torch, nothing mocked."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

from leakscope.holders import HolderPath, Segment, SegmentKind

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# Fixture engines import as `fixtures.<name>`; make the project root importable.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The fixture corpus and its targets: one rule, shared with benchmarks/isolation_cost.py.
from fixtures import corpus as fixture_modules  # noqa: E402,F401
from fixtures import target as fixture_target  # noqa: E402,F401

# Two-core CI machines stall with competing intra-op threads; the tiny models
# gain nothing from them.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Property tests explore new inputs on every local run; CI (.ci/run sets HYPOTHESIS_PROFILE=ci)
# replays the same ones, so that a run fails on a change, not on the draw.
from hypothesis import settings as _hypothesis  # noqa: E402

_hypothesis.register_profile("ci", derandomize=True, database=None)
_hypothesis.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _run_from_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@functools.cache
def report_validator() -> Any:
    """The shipped JSON report schema's validator, read once per process (a test that audits which
    files rendering opens calls this first)."""
    import jsonschema

    from leakscope.render.json_report import schema

    return jsonschema.Draft202012Validator(schema())


def validate_report(doc: Any) -> None:
    """Fail unless ``doc`` is valid under the shipped JSON report schema (leakscope/render/report.schema.json)."""
    errors = sorted(report_validator().iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        pytest.fail(
            f"the JSON report breaks its schema at {'/'.join(map(str, first.absolute_path))}: "
            f"{first.message[:500]} ({len(errors)} errors)"
        )


@pytest.fixture(autouse=True, scope="session")
def _every_report_valid() -> Any:
    """Every JSON report this process writes (the library, the CLI through CliRunner, ``render``,
    ``fix --format json``) is validated against the shipped schema as it is written; reports of
    child processes are validated where the tests read them (:func:`run_venv_check` and the tests
    of tests/test_report_schema.py)."""
    from leakscope.render import json_report

    written = json_report.report_dict

    def checked(report: Any, *, debug: bool = False) -> dict[str, Any]:
        doc = written(report, debug=debug)
        validate_report(doc)
        return doc

    json_report.report_dict = checked  # type: ignore[assignment]
    try:
        yield
    finally:
        json_report.report_dict = written  # type: ignore[assignment]


def holder_path(root: str, *steps: str | int) -> HolderPath:
    """A hand-built holder path for renderer and policy tests: names are keys, ints are indices
    (``holder_path("output", "model_output", "entropy")`` is ``output.model_output.entropy``)."""
    return HolderPath(
        root,
        tuple(
            Segment(SegmentKind.INDEX, s) if isinstance(s, int) else Segment(SegmentKind.KEY, s)
            for s in steps
        ),
    )


def framework_python(
    venv: Path,
    setup: str,
    required_by: tuple[str, ...] = ("LEAKSCOPE_REQUIRE_FRAMEWORKS", "LEAKSCOPE_REQUIRE_VERL"),
) -> Path:
    """A framework venv's interpreter, or a skip; a failure when CI requires the frameworks
    (any of ``required_by`` set to 1). ``setup`` is the script that creates the venv; its
    ``.pins`` stamp, written last (.ci/framework_env.py), says the venv is complete."""
    python = venv / "bin" / "python"
    if not (python.exists() and (venv / ".pins").is_file()):
        framework_missing(f"{venv.name} is missing; create it with {setup}", required_by)
    return python


def framework_missing(
    message: str,
    required_by: tuple[str, ...] = ("LEAKSCOPE_REQUIRE_FRAMEWORKS", "LEAKSCOPE_REQUIRE_VERL"),
) -> NoReturn:
    """Skip a test whose framework environment is missing (``message`` says which and how to
    create it), or fail it when CI requires the frameworks (any of ``required_by`` set to 1)."""
    if any(os.environ.get(name) == "1" for name in required_by):
        pytest.fail(f"{message} ({' or '.join(f'{name}=1' for name in required_by)})")
    pytest.skip(message)


def venv_env() -> dict[str, str]:
    """The environment a framework venv's leakscope runs in: the venv's own packages only."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    return env


def run_leakscope(
    python: Path, *args: str, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``<venv>/bin/leakscope ARGS`` of the framework venv whose interpreter is ``python``, from the
    repository root, as a user runs it (:func:`venv_env`, updated with ``env``)."""
    return subprocess.run(
        [str(python.parent / "leakscope"), *args],
        cwd=ROOT,
        env={**venv_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_venv_check(python: Path, *args: str, timeout: float = 900) -> tuple[int, dict[str, Any]]:
    """``leakscope check ARGS --format json`` with a framework venv's leakscope: exit code and report."""
    proc = run_leakscope(python, "check", *args, "--format", "json", timeout=timeout)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"leakscope printed no JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
        )
    validate_report(doc)
    return proc.returncode, doc


#: The suite's tiers (NOTE [Test tiers]); every test module sets ``pytestmark`` to exactly one.
TIERS = ("unit", "integration", "frameworks")

# NOTE [Test tiers]
# ``pytest -m unit`` is the inner loop: tests that run in this process on tiny models (no child
# process, no venv), a few minutes in all. ``-m integration`` adds what runs leakscope as a user
# does: the CLI in a child process, isolation, torchrun, watch on a real job, a browser.
# ``-m frameworks`` needs the framework venvs and the real-bug overlays (.ci/setup-*.sh): verl,
# TRL, Lightning, Ray, old releases, the real-bug suite and the docs' examples made in them. The
# README's test command runs all three; docs/performance.md says how long each takes. A module
# sets its tier once (``pytestmark = pytest.mark.unit``); a test that belongs to another tier
# lives in another module, so that ``-m`` selects exactly one tier.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every collected test is in exactly one tier (NOTE [Test tiers])."""
    wrong = []
    for item in items:
        tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: tiers {sorted(tiers) or 'none'}")
    if wrong:
        raise pytest.UsageError(
            "every test module sets exactly one tier (pytestmark = pytest.mark.unit, integration or "
            "frameworks; NOTE [Test tiers] in tests/conftest.py):\n  " + "\n  ".join(wrong[:20])
        )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # NOTE [Slowest modules first]: every worker sorts alike, so the collections still match
        items.sort(key=lambda item: _module_rank(item.nodeid.split("::", 1)[0]))


#: The modules that take longest under the README's command, longest first (measured with
#: ``--durations`` and per-module wall and CPU time; NOTE [Slowest modules first]).
SLOWEST = (
    # every fixture fixed and proven (tests/test_fix_corpus*.py): the two largest modules
    "tests/test_fix_corpus_scripts.py",
    "tests/test_fix_corpus.py",
    # the fix modules are the largest CPU cost (about 17, 13 and 7 CPU minutes in the last quiet
    # run); test_fix.py was 16th here and the other two not listed, so they started late
    "tests/test_fix.py",
    "tests/test_fix_jobs.py",
    "tests/test_doc_examples_jobs.py",
    "tests/test_doc_examples.py",
    "tests/test_fix_scripts.py",
    "tests/test_realbugs.py",
    "tests/test_isolation.py",
    "tests/test_watch_ends.py",
    "tests/test_models.py",
    "tests/test_watch.py",
    "tests/test_reach.py",
    "tests/test_zygote.py",
    "tests/test_torchrun.py",
    "tests/test_watch_ray.py",
    "tests/test_watch_lightning.py",
    "tests/test_lightning.py",
    "tests/test_trainers.py",
    "tests/test_trl.py",
    "tests/test_verl.py",
    "tests/test_adapters_realbugs.py",
    "tests/test_contract.py",
)


def _module_rank(path: str) -> int:
    return SLOWEST.index(path) if path in SLOWEST else len(SLOWEST)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """NOTE [Slowest modules first]: under ``--dist loadfile`` the modules go out in the order the
    workers collected them (:func:`pytest_collection_modifyitems`), not by their number of tests."""
    if config.getoption("dist", None) == "loadfile":
        config.option.loadscopereorder = False


# NOTE [Parallel tests]
# The README's test command runs the suite in three pytest-xdist workers on two cores: much of
# the suite waits on child processes (a watched job past its --timeout, torchrun's ranks, a Ray
# cluster, a browser), and a third worker keeps both cores busy meanwhile. ``--dist loadfile``
# keeps each module in one worker: a module's shared fixture (the docs' examples, run once for
# all their blocks; the fixed copies of fixtures/ in test_fix.py; a framework venv's checks) is
# made once, not once per worker (each worker collects the whole suite). Those fixtures are
# session-scoped, so that a worker that gets a module's tests in two runs does not make it twice.
# (``--dist loadgroup`` would spread the rest test by test, but pytest 9 ignores the group that
# pytest-xdist 3.8 appends to a node id.)

# NOTE [Slowest modules first]
# pytest-xdist hands out whole modules (``--dist loadfile``) largest first by number of tests, so
# the modules with few but long tests (the real-bug suite, a Ray cluster per test, watch tests
# that wait out a --timeout) went out last and ran on one worker while the other two had
# finished: the tail of the run. Here the workers order their collection by SLOWEST (the rest
# after it, in their own order) and the controller keeps that order (``loadscopereorder`` off):
# the longest modules start first and the short ones fill the gaps at the end. A module missing
# from SLOWEST costs only balance, never a test; a module that grows slow belongs in it.
