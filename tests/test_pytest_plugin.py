"""The pytest plugin, run through pytester on real fixture engines."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# NOTE [inline pytester and torch]: an inline pytester run restores sys.modules
# afterwards, dropping every module first imported inside it. Re-importing torch
# (or tensordict) in the same process then crashes in the garbage collector, so
# this module imports them before any inline run: they stay loaded throughout.
import tensordict  # noqa: F401
import torch  # noqa: F401

import leakscope.api  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent


def _lit(text: str) -> str:
    """``text`` as an fnmatch pattern that matches its brackets literally."""
    return re.sub(r"[\[\]]", lambda m: f"[{m.group()}]", text)


# Fast options for the leaky runs: the verdict does not depend on confirmation.
FAST = 'mode="train", confirm=False, micro_batches=1'

TESTS = f"""
import pytest
from leakscope.gate.pytest_plugin import assert_no_graph_retention

def test_fixture_leaky(leakscope):
    leakscope.check("fixtures.verl_bug:Engine", {FAST})

def test_fixture_clean(leakscope):
    report = leakscope.check("fixtures.verl_fix:Engine", mode="train", micro_batches=1)
    assert [r.verdict.value for r in report.results] == ["clean"]

@pytest.mark.leakscope(target="fixtures.verl_bug:Engine", {FAST})
def test_marker_leaky():
    pass

@pytest.mark.leakscope("fixtures.verl_fix:Engine", mode="train", micro_batches=1)
def test_marker_clean():
    pass

def test_helper_leaky_forward_only():
    assert_no_graph_retention("fixtures.forward_only_graph:Engine", mode="forward-only", confirm=False, micro_batches=1)
"""


def test_plugin_import_loads_no_torch() -> None:
    code = (
        "import importlib.metadata as md, sys\n"
        "[ep] = [e for e in md.entry_points(group='pytest11') if e.name == 'leakscope']\n"
        "assert ep.value == 'leakscope.gate.pytest_plugin', ep.value\n"
        "ep.load()\n"
        "loaded = sorted(m for m in ('torch', 'tensordict') if m in sys.modules)\n"
        "print('loaded:', loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout == "loaded: []\n", out.stderr


def test_fixture_marker_and_helper_gate_real_engines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_engines=TESTS)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--junit-xml={junit}", "-rA")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_fixture_leaky*",
            "*leakscope: 1 leak, 0 clean, 0 error (exit 1)",
            _lit("*fixtures.verl_bug:Engine [train]: graph retained by 2 references*")
            + "output.model_output.log_probs, output.model_output.entropy",
            "*created at *fixtures/verl_bug.py:25 in forward_step",
            "*stored at *fixtures/verl_bug.py:30 in forward_step (return)",
            "*fix: detach output*before it is returned*",
        ]
    )
    # The full text report rides along as a "leakscope" section of the test's report.
    result.stdout.fnmatch_lines(
        ["*Captured leakscope call*", _lit("*fixtures.verl_bug:Engine [train] LEAK*")]
    )
    result.stdout.fnmatch_lines(
        [_lit("*forward_only_graph:Engine [forward-only]: graph retained*")]
    )
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert sorted(cases) == [
        "test_fixture_clean",
        "test_fixture_leaky",
        "test_helper_leaky_forward_only",
        "test_marker_clean",
        "test_marker_leaky",
    ]
    for name in ("test_fixture_leaky", "test_marker_leaky"):
        failure = cases[name].find("failure")
        assert failure is not None
        assert "output.model_output.log_probs" in (failure.get("message") or "") + (
            failure.text or ""
        )
    for name in ("test_fixture_clean", "test_marker_clean"):
        assert cases[name].find("failure") is None


def test_project_allowlist_and_config_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        '[tool.leakscope]\nmode = "train"\nconfirm = false\nmicro-batches = 1\n'
        '[[tool.leakscope.allowlist]]\npath = "output.model_output.*"\nreason = "kept for the KL term"\n'
    )
    pytester.makepyfile(
        test_allowed="""
        import pytest

        @pytest.mark.leakscope(target="fixtures.verl_bug:Engine")
        def test_allowed():
            pass

        def test_bad_option(leakscope):
            leakscope.check("fixtures.verl_bug:Engine", fail_on="sometimes")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*leakscope: error: leakscope options for fixtures.verl_bug:Engine: fail-on: "
            "'sometimes' is not one of: leak, warning",
        ]
    )
    # The passing test's section shows the allowed findings: reported, not hidden.
    result.stdout.fnmatch_lines(["*allowed: kept for the KL term*"])


def test_bad_pyproject_fails_the_check_naming_key_and_file(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.leakscope]\nallowlist = [{path = "output.x"}]\n')
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.leakscope(target="fixtures.verl_fix:Engine")
        def test_marked():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            _lit(
                f"*leakscope: error: {pytester.path / 'pyproject.toml'} [tool.leakscope]: allowlist[0].reason: "
            )
            + "missing or empty*",
        ]
    )


def test_a_failing_warning_reads_as_one_under_fail_on_warning(pytester: pytest.Pytester) -> None:
    """The failure message and the gate agree: a reference cycle fails fail_on="warning", counted as a warning."""
    pytester.makepyfile(
        test_cycle="""
def test_cycle(leakscope):
    leakscope.check("fixtures.cycle_until_gc:Engine", mode="train", micro_batches=1, fail_on="warning")
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*leakscope: 0 leak, 1 warning, 0 clean, 0 error (exit 1)",
            _lit("*fixtures.cycle_until_gc:Engine [train]: 1 warning, failing --fail-on warning"),
        ]
    )
