"""Reports are never lost: ``-o FILE`` is checked before anything runs, written whole or not at all.

NOTE [Reports are never lost] in leakscope/commands/common.py. Every test runs the real CLI
(``typer.testing.CliRunner`` or a subprocess) on a real engine.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakscope.cli import app
from leakscope.commands.common import write_atomic
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

runner = CliRunner()

#: an engine that leaves a mark when it is imported: proof that a check ran
_MARKING_ENGINE = """
from pathlib import Path
Path(__file__).with_suffix(".ran").write_text("imported")
from fixtures._common import StepEngine
class Engine(StepEngine):
    pass
"""


@pytest.fixture
def marking_engine(tmp_path: Path) -> Path:
    engine = tmp_path / "marking.py"
    engine.write_text(_MARKING_ENGINE, encoding="utf-8")
    return engine


def _read_only(path: Path) -> Path:
    path.write_text("the previous report\n", encoding="utf-8")
    path.chmod(0o444)
    return path


@pytest.mark.parametrize(
    ("name", "make", "problem"),
    [
        (
            "missing directory",
            lambda tmp: tmp / "no" / "such" / "dir" / "report.json",
            "the directory ",
        ),
        ("a directory", lambda tmp: tmp, "it is a directory; give a file name"),
        ("read-only file", lambda tmp: _read_only(tmp / "report.json"), "the file is read-only"),
    ],
)
@pytest.mark.parametrize("command", ["check", "watch", "render"])
def test_an_unwritable_output_is_exit_2_before_anything_runs(
    tmp_path: Path,
    marking_engine: Path,
    name: str,
    make,
    problem: str,
    command: str,  # type: ignore[no-untyped-def]
) -> None:
    output = make(tmp_path)
    options = ["--format", "json", "-o", str(output)]
    args = {  # watch: its options before the script, whose own arguments follow it
        "check": ["check", f"{marking_engine}:Engine", "--no-isolate", "--mode", "train", *options],
        "watch": ["watch", *options, str(marking_engine)],
        "render": ["render", str(tmp_path / "never-read.json"), *options],
    }[command]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"leakscope: error: cannot write the report to {output}: {problem}")
    assert not marking_engine.with_suffix(".ran").exists()  # no engine ran, no job started
    assert json.loads(result.stdout)["error"] == line.removeprefix(
        "leakscope: error: "
    )  # JSON was asked for
    if name == "read-only file":
        assert output.read_text(encoding="utf-8") == "the previous report\n"


def test_a_writable_output_in_an_existing_directory_runs(
    tmp_path: Path, marking_engine: Path
) -> None:
    """The clean look-alike: the same command with a good -o runs the engine and writes the report."""
    output = tmp_path / "report.json"
    result = runner.invoke(
        app,
        [
            "check",
            f"{marking_engine}:Engine",
            "--no-isolate",
            "--mode",
            "train",
            "--format",
            "json",
            "-o",
            str(output),
        ],
    )
    assert result.exit_code == 0, result.output
    assert marking_engine.with_suffix(".ran").exists()
    assert json.loads(output.read_text(encoding="utf-8"))["results"][0]["verdict"] == "clean"


def test_a_symlink_at_output_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("not yours\n", encoding="utf-8")
    link = tmp_path / "report.json"
    link.symlink_to(victim)
    result = runner.invoke(
        app,
        [
            "check",
            "fixtures/verl_fix.py:Engine",
            "--no-isolate",
            "--mode",
            "train",
            "--format",
            "json",
            "-o",
            str(link),
        ],
    )
    assert result.exit_code == 0, result.output
    assert victim.read_text(encoding="utf-8") == "not yours\n"
    assert (
        not link.is_symlink()
        and json.loads(link.read_text(encoding="utf-8"))["results"][0]["verdict"] == "clean"
    )


def test_write_atomic_keeps_the_mode_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_text("old\n", encoding="utf-8")
    target.chmod(0o640)
    write_atomic(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]
    fresh = tmp_path / "new.txt"  # a new file: what open() would have made, 0o666 less the umask
    umask = os.umask(0o022)
    try:
        write_atomic(fresh, b"x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644


def test_a_failed_write_keeps_the_previous_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is renamed over the target until the whole report is on disk (a full disk fails the flush)."""
    target = tmp_path / "report.txt"
    target.write_text("the previous report\n", encoding="utf-8")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"the new report\n")
    assert target.read_text(encoding="utf-8") == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]


# --- an engine's message no encoder accepts -------------------------------------------------------


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leakscope", "check", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )


@pytest.mark.parametrize("fmt", ["text", "html", "junit", "github", "json", "sarif"])
def test_a_lone_surrogate_in_an_error_is_still_written_and_exits_with_the_verdict(
    tmp_path: Path, fmt: str
) -> None:
    output = tmp_path / f"report.{fmt}"
    output.write_text("the previous report\n", encoding="utf-8")
    done = _check(
        "fixtures.bad.hostile:SurrogateError", "--mode", "train", "--format", fmt, "-o", str(output)
    )
    assert done.returncode == 3, (
        done.stderr
    )  # an error result, as for any engine that raises: not 1
    assert "Traceback" not in done.stderr
    text = output.read_text(encoding="utf-8")  # valid UTF-8, whole
    assert "cannot open /data/" in text and text.endswith("\n")
    if fmt in ("text", "html", "github", "junit"):
        assert "\\udcff" in text  # the character is shown as its escape, not dropped
    if fmt == "junit":
        ET.fromstring(text.encode())  # NUL and BEL did not make it unparseable
    if fmt in ("json", "sarif"):
        json.loads(text)


def test_a_plain_error_is_written_the_same_way(tmp_path: Path) -> None:
    """The look-alike: an ordinary message, same exit code, same file."""
    output = tmp_path / "report.txt"
    done = _check("fixtures.bad.hostile:PlainError", "--mode", "train", "-o", str(output))
    assert done.returncode == 3
    assert "cannot open /data/shard-0.bin" in output.read_text(encoding="utf-8")


def test_a_lone_surrogate_on_stdout_is_written_too() -> None:
    done = _check("fixtures.bad.hostile:SurrogateError", "--mode", "train", "--format", "html")
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>") and "\\udcff" in done.stdout


def test_nul_and_control_characters_never_break_the_junit_xml() -> None:
    from leakscope.render import render
    from leakscope.results import Mode, Report, TargetResult, Verdict

    nasty = "".join(chr(c) for c in range(0x20)) + "\x7f\x85\ud800\udfff\ufffe\uffff"
    report = Report(
        (TargetResult(f"pkg:{nasty}", Mode.TRAIN, Verdict.ERROR, error=nasty, warnings=(nasty,)),),
        nasty,
        nasty,
        nasty,
    )
    root = ET.fromstring(render(report, "junit").encode("utf-8"))
    error = root.find("testsuite/testcase/error")
    assert (
        error is not None
        and "\\x00" in (error.get("message") or "")
        and "\\ud800" in (error.text or "")
    )


def test_explain_dot_replaces_a_symlink_never_follows_it(tmp_path: Path) -> None:
    """``explain --dot`` shares the report's writer: a link at FILE is replaced, its target
    untouched (it followed it before)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n", encoding="utf-8")
    link = tmp_path / "graph.dot"
    link.symlink_to(victim)
    result = runner.invoke(
        app, ["explain", "fixtures.verl_bug:Engine", "--dot", str(link), "--max-nodes", "50"]
    )
    assert result.exit_code == 0, result.output
    assert victim.read_text(encoding="utf-8") == "keep me\n"
    assert not link.is_symlink() and link.read_text(encoding="utf-8").startswith("digraph")
