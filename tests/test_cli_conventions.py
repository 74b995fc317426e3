"""The command line a user of ruff, pytest and memray expects (issue 29), run as a user runs it: in a
child process, on a terminal (a pseudo-terminal 80 columns wide) and off it.

Each test is one of the issue's surprises: a failing target with ``-o``/``-q`` printed nothing; a
``--method`` typo ran the whole job; one missing module made two rows; one edited line counted
twice; NO_COLOR was ignored; tables were 110 columns on an 80-column terminal; ``fix --diff`` was
no patch; node counts differed between formats.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from leakscope import __version__
from tests.conftest import FIXTURES, ROOT, validate_report

pytestmark = pytest.mark.integration

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", LEAKSCOPE_NODE_BYTES="746")
    for name in ("PYTHONPATH", "NO_COLOR", "FORCE_COLOR", "COLUMNS"):
        env.pop(name, None)
    env.update(extra)
    return env


def _leakscope(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leakscope", *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _on_terminal(*args: str, columns: int = 80, **env: str) -> tuple[int, str]:
    """``leakscope ARGS`` with stdout on a terminal ``columns`` wide: exit code and what it showed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "leakscope", *args],
        cwd=ROOT,
        env=_env(**env),
        stdout=follower,
        stderr=subprocess.DEVNULL,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    code = proc.wait(timeout=600)
    return code, b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


@pytest.fixture(scope="module")
def verl_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``check fixtures.verl_bug:Engine --mode train --format json -o FILE``: the saved report."""
    path = tmp_path_factory.mktemp("report") / "verl.json"
    proc = _leakscope(
        "check", "fixtures.verl_bug:Engine", "--mode", "train", "-f", "json", "-o", str(path)
    )
    assert proc.returncode == 1, proc.stderr
    # -o: the report in the file, nothing on stdout, the summary on stderr
    assert proc.stdout == ""
    assert f"leakscope: 1 leak, 0 clean, 0 error (exit 1); report in {path}" in proc.stderr
    validate_report(json.loads(path.read_text(encoding="utf-8")))
    return path


def test_a_target_that_does_not_import_is_never_silent(tmp_path: Path) -> None:
    target = "fixtures.no_such_module:Engine"
    report = tmp_path / "r.json"
    with_file = _leakscope("check", target, "-f", "json", "-o", str(report))
    assert with_file.returncode == 3
    assert with_file.stdout == ""
    assert f"leakscope: {target}: module 'fixtures.no_such_module' not found" in with_file.stderr
    assert "leakscope: 0 leak, 0 clean, 1 error (exit 3); report in" in with_file.stderr
    doc = json.loads(report.read_text(encoding="utf-8"))
    validate_report(doc)
    assert len(doc["results"]) == 1  # one row per target and error, not one per mode

    quiet = _leakscope("check", target, "-q")
    assert quiet.returncode == 3 and quiet.stdout == ""
    assert f"leakscope: {target}: module" in quiet.stderr
    assert quiet.stderr.strip().endswith("leakscope: 0 leak, 0 clean, 1 error (exit 3)")

    text = _leakscope("check", target)
    assert text.returncode == 3
    assert text.stdout.count("ERROR") == 1, text.stdout
    assert text.stdout.rstrip().endswith("0 leak, 0 clean, 1 error (exit 3)")


def test_a_method_typo_fails_before_the_job_with_a_suggestion() -> None:
    started = time.monotonic()
    proc = _leakscope(
        "watch",
        "--method",
        "history_engine:HistoryEngin.forward_step",
        "fixtures/watch/history_job.py",
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "did you mean 'HistoryEngine'?" in proc.stderr
    assert "trained on" not in proc.stderr  # the job never ran
    assert time.monotonic() - started < 60
    method = _leakscope(
        "watch",
        "--method",
        "history_engine:HistoryEngine.forward_stp",
        "fixtures/watch/history_job.py",
    )
    assert method.returncode == 2 and "did you mean 'forward_step'?" in method.stderr


def test_a_method_the_source_cannot_settle_stops_the_job_at_its_import(tmp_path: Path) -> None:
    """``import *`` hides what a module binds: the typo is caught when the job imports it, and the
    job ends there, with the suggestion, instead of running to its end."""
    shutil.copy(FIXTURES / "watch" / "history_engine.py", tmp_path)
    (tmp_path / "engines.py").write_text("from history_engine import *  # noqa: F403\n")
    (tmp_path / "job.py").write_text(
        "import engines\nprint('the job ran past its imports', flush=True)\n"
    )
    proc = _leakscope(
        "watch", "--method", "engines:HistoryEngin.forward_step", "job.py", cwd=tmp_path
    )
    assert proc.returncode == 3, proc.stderr
    assert "engines has no class HistoryEngin; did you mean 'HistoryEngine'?" in proc.stderr
    assert "the job ran past its imports" not in proc.stderr + proc.stdout


def test_terminal_width_and_colour(verl_report: Path) -> None:
    # On an 80-column terminal every line fits (tables folded, growth lines wrapped), in colour.
    code, shown = _on_terminal("render", str(verl_report))
    assert code == 0
    plain = ANSI.sub("", shown)
    assert ANSI.search(shown)
    too_wide = [line for line in plain.splitlines() if len(line) > 80]
    assert too_wide == [], too_wide
    assert "growth over 3 micro-batches" in plain
    # NO_COLOR (any non-empty value) and --color never: no colour on a terminal
    assert not ANSI.search(_on_terminal("render", str(verl_report), NO_COLOR="1")[1])
    assert not ANSI.search(_on_terminal("render", str(verl_report), "--color", "never")[1])
    # Off a terminal: never wrapped, no colour unless --color always
    piped = _leakscope("render", str(verl_report))
    assert not ANSI.search(piped.stdout)
    assert max(len(line) for line in piped.stdout.splitlines()) > 200  # the growth line, whole
    assert ANSI.search(_leakscope("render", str(verl_report), "--color", "always").stdout)


def test_version_anywhere() -> None:
    for argv in (["-V"], ["check", "--version"], ["watch", "-V"], ["fix", "pkg.mod:E", "-V"]):
        proc = _leakscope(*argv)
        assert (proc.returncode, proc.stdout) == (0, f"leakscope {__version__}\n"), argv
    # after the script, --version is the job's own argument
    job = _leakscope("watch", "fixtures/watch/history_job.py", "--version")
    assert job.stdout != f"leakscope {__version__}\n" and "the job stopped" in job.stdout


def test_one_node_count_in_every_format(verl_report: Path) -> None:
    doc = json.loads(verl_report.read_text(encoding="utf-8"))
    finding = doc["results"][0]["findings"][0]
    nodes = finding["graph_nodes"]
    assert finding["graph"]["graph_nodes"] == nodes < finding["graph"]["total_nodes"]
    text = _leakscope("render", str(verl_report)).stdout
    assert f"graph nodes: {nodes}, each counted at 746 B" in text
    html = _leakscope("render", str(verl_report), "-f", "html").stdout
    assert f"Retained graph ({nodes} graph nodes (" in html
    explained = _leakscope("explain", "fixtures.verl_bug:Engine", "--path", finding["path"])
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith(
        f"fixtures.verl_bug:Engine [train] {finding['path']}: {nodes} graph nodes ("
    )
    as_json = _leakscope(
        "explain", "fixtures.verl_bug:Engine", "--path", finding["path"], "-f", "json"
    )
    assert json.loads(as_json.stdout)["graph"]["graph_nodes"] == nodes


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_fix_diff_is_a_patch_git_applies(tmp_path: Path) -> None:
    """nodes_only leaks in train and forward-only from one line: one fix, counted and printed once,
    and stdout is a patch git applies."""
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "fixtures"], cwd=tmp_path, check=True)
    args = ("fix", "fixtures.nodes_only:Engine", "--micro-batches", "1", "--no-confirm")
    proc = _leakscope(*args, "--diff", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("--- a/fixtures/nodes_only.py\n+++ b/fixtures/nodes_only.py\n")
    assert proc.stdout.count("@@ -") == 1
    assert "1 verified, 0 not verified" in proc.stderr
    check = subprocess.run(
        ["git", "apply", "--check", "-"], cwd=tmp_path, input=proc.stdout, text=True
    )
    assert check.returncode == 0
    subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=proc.stdout, text=True, check=True)
    assert "(self.temperature + 1.0).detach()" in (tmp_path / "fixtures/nodes_only.py").read_text()
    # -q: nothing on stdout, the summary on stderr
    quiet = _leakscope(*args, "-q", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stdout == ""
    assert "leakscope: nothing to fix: no leak (exit 0)" in quiet.stderr
