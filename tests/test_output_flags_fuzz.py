"""``explain --dot`` and ``watch --emit-test`` to every kind of path, through the commands that run.

tests/test_output_targets.py drives the one writer (NOTE [One writer, by what the path is] in
leakscope/atomic.py) through ``render -o`` for every kind of path and checks every flag's refusals
before anything runs; here the two flags whose file is written only after an engine or a job ran
(a graph, a regression test) write to the same kinds of path (``--dot`` fuzzed, ``--emit-test``, a
watch run each, on three): where the command writes, whether it writes through or replaces, and
that nothing else in the directory changes. Fixed inputs under ``HYPOTHESIS_PROFILE=ci``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from leakscope.atomic import Kind
from leakscope.cli import app
from tests.conftest import ROOT
from tests.test_output_targets import PATHS, _draining, _snapshot

pytestmark = pytest.mark.integration

runner = CliRunner()

#: flag -> the command that writes it (PATH replaced), and how its file starts
COMMANDS: dict[str, tuple[list[str], str]] = {
    "--dot": (["explain", "fixtures.verl_bug:Engine", "--dot", "PATH"], "digraph"),
    "--emit-test": (
        [
            "watch",
            "--emit-test",
            "PATH",
            str(ROOT / "fixtures" / "watch" / "scripts" / "sum_loss.py"),
            "--steps",
            "5",
        ],
        '"""Regression test',
    ),
}


def _run_flag(flag: str, name: str, directory: Path) -> None:
    make, kind = PATHS[name]
    path = make(directory)
    args, start = COMMANDS[flag]
    before = _snapshot(directory)
    outside = Path(os.devnull).lstat().st_mode
    saved = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.ExitStack() as stack:
            got = stack.enter_context(_draining(path.resolve())) if "FIFO" in name else None
            result = runner.invoke(app, [str(path) if a == "PATH" else a for a in args])
    finally:
        os.chdir(saved)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    after = _snapshot(directory)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    if kind is Kind.REPLACE and name != "missing directory":
        assert result.exit_code in (0, 1), result.output  # the verdict's exit
        assert changed == {path.name} and stat.S_ISREG(path.lstat().st_mode)  # a link replaced
        assert path.read_text().startswith(start)
        if name == "symlink to a file":
            assert (directory / "victim.txt").read_text() == "before\n"  # never followed
    else:
        assert changed == set()  # a FIFO stays a FIFO, a directory a directory
        if kind is Kind.THROUGH:
            assert result.exit_code in (0, 1), result.output
            if got is not None:
                assert b"".join(got).decode().startswith(start)
        else:
            assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert Path(os.devnull).lstat().st_mode == outside


_SETTINGS = settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(name=st.sampled_from(list(PATHS)))
def test_fuzz_explain_dot_to_every_kind_of_path(tmp_path_factory: Any, name: str) -> None:
    """``explain --dot PATH``: the graph where asked, through a FIFO or device, never through a link."""
    _run_flag("--dot", name, tmp_path_factory.mktemp("dot"))


@pytest.mark.parametrize("name", ["symlink to a file", "FIFO", "symlink to /dev/null"])
def test_watch_emit_test_to_a_link_a_fifo_and_a_device(tmp_path: Path, name: str) -> None:
    """``watch --emit-test PATH`` after a real job (a watch run each, so the kinds the fuzz above
    draws for ``--dot`` are fixed here): a link replaced, never followed; a FIFO and a device
    written through."""
    _run_flag("--emit-test", name, tmp_path)
