"""``leakscope watch --emit-test``: from a leak found in a real job to a test in the project's suite.

A copy of ``fixtures/watch/history_job.py`` (a job whose engine keeps every entropy with its
graph) is watched; the test it writes fails on the leaky engine, ``leakscope fix --apply`` fixes
the engine's line, a second watch of the job is clean, and the same test then passes.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leakscope.holders import HolderPath
from leakscope.render import regression
from leakscope.results import Cause, Finding, Holder, Mode, Report, TargetResult, Verdict
from tests.conftest import FIXTURES

pytestmark = pytest.mark.integration

WATCH = ("watch", "--method", "history_engine:HistoryEngine.forward_step")


def _run(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_emitted_test_fails_on_the_leak_and_passes_once_the_job_is_fixed(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    shutil.copy(FIXTURES / "watch" / "history_engine.py", project / "history_engine.py")
    shutil.copy(FIXTURES / "watch" / "history_job.py", project / "train.py")
    test_file = project / "tests" / "test_leaks.py"

    watched = _run(
        "-m", "leakscope", *WATCH, "--emit-test", "tests/test_leaks.py", "train.py", cwd=project
    )
    assert watched.returncode == 1, watched.stderr[-3000:]
    assert (
        "leakscope: wrote tests/test_leaks.py: it checks history_engine:HistoryEngine"
        in watched.stderr
    )
    emitted = test_file.read_text(encoding="utf-8")
    assert '    "history_engine:HistoryEngine": ["engine.entropies[0]"],\n' in emitted

    failing = _run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_leaks.py", cwd=project
    )
    assert failing.returncode == 1, failing.stdout[-3000:]
    assert "engine.entropies[0]" in failing.stdout and "1 failed" in failing.stdout

    fixed = _run("-m", "leakscope", "fix", "history_engine:HistoryEngine", "--apply", cwd=project)
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]
    assert "self.entropies.append(entropy.detach())" in (project / "history_engine.py").read_text(
        encoding="utf-8"
    )

    again = _run(
        "-m", "leakscope", *WATCH, "--emit-test", "tests/test_leaks.py", "train.py", cwd=project
    )
    assert again.returncode == 0, again.stdout[-3000:]
    assert "no step kept a graph: tests/test_leaks.py not written" in again.stderr
    assert test_file.read_text(encoding="utf-8") == emitted

    passing = _run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_leaks.py", cwd=project
    )
    assert passing.returncode == 0, passing.stdout[-3000:]
    assert "1 passed" in passing.stdout


def _leak(target: str, path: str) -> TargetResult:
    finding = Finding(
        HolderPath(path), Holder.ENGINE, "MulBackward0", 3, 64, True, "detach it", Cause.ACTIVATIONS
    )
    return TargetResult(target, Mode.TRAIN, Verdict.LEAK, findings=(finding,))


def test_the_test_names_each_leaking_class_and_the_allowed_paths_as_literals() -> None:
    hostile = "pkg.mod:Eng'])\nimport os; os.system('x')  #\u202e\x1b[31m.step"
    report = Report(
        (
            _leak("__main__:Engine.forward_step", "engine.kept[0]"),
            _leak(hostile, "engine.x"),
            TargetResult("pkg.clean:Engine.forward_step", Mode.TRAIN, Verdict.CLEAN),
        ),
        "0.1.0",
        "2.13.0+cpu",
        "3.11.7",
    )
    text = regression.render(report, allow=["engine.kept*"], script="jobs/train.py")
    tree = ast.parse(text)  # valid Python whatever the strings were
    values = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert values["WATCHED"] == {
        "jobs/train.py:Engine": ["engine.kept[0]"],
        "pkg.mod:Eng'])\nimport os; os.system('x')  #\u202e\x1b[31m": ["engine.x"],
    }
    assert values["ALLOWLIST"] == [{"path": "engine.kept*", "reason": regression.ALLOW_REASON}]
    assert not any(
        isinstance(node, ast.Import) and node.names[0].name == "os" for node in tree.body
    )
    # printable ASCII only: no bidi control or escape code reaches the source file
    assert all(c == "\n" or " " <= c <= "~" for c in text), text


def test_the_emitted_test_is_as_the_formatter_writes_it(tmp_path: Path) -> None:
    """Committed as it is written: ``ruff format`` (the project's formatter) changes nothing."""
    long = "engine.history[0]" + ".inner" * 12
    for allow, path in (
        ([], "engine.kept[0]"),
        (["engine.kept*"], long),
        ([long, "engine.x"], long),
    ):
        report = Report((_leak("pkg.mod:Engine.forward_step", path),), "0.1.0", "2.13.0", "3.11.7")
        emitted = tmp_path / "test_leaks.py"
        emitted.write_text(regression.render(report, allow=allow), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--diff", "--isolated", str(emitted)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
