"""The live status line, seen on a real pseudo-terminal (the ``pty`` module).

``leakscope`` runs as a subprocess whose stderr is the terminal side of a pty
(stdout is a pipe: the report). What the terminal received is read back,
cursor-control codes stripped, and searched for the target, mode, phase and
``--timeout`` budget. Outside a terminal, with ``--format json`` and with
``--quiet`` nothing may appear.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
LEAKSCOPE = [sys.executable, "-m", "leakscope", "check"]
FAST = ("--mode", "forward-only", "--micro-batches", "1", "--no-confirm")
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env() -> dict[str, str]:
    return dict(os.environ, TERM="xterm", COLUMNS="220", PYTHONPATH=str(ROOT))


def on_terminal(*args: str, timeout: float = 240) -> tuple[int, list[str], str]:
    """Run leakscope with stderr on a pty: exit code, the terminal's lines as drawn, stdout."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 220, 0, 0))
    proc = subprocess.Popen(
        [*LEAKSCOPE, *args], stdin=slave, stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=_env()
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        while select.select([master], [], [], 0.2)[0]:  # what the child drew just before it exited
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        stdout = proc.stdout.read().decode() if proc.stdout else ""
        proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = _CONTROL.sub("", b"".join(chunks).decode(errors="replace"))
    lines = [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]
    return proc.returncode, lines, stdout


def test_one_isolated_target_shows_target_mode_each_phase_and_the_timeout_budget() -> None:
    code, lines, stdout = on_terminal(
        "fixtures.verl_bug:Engine", "--mode", "train", "--micro-batches", "2", "--timeout", "120"
    )
    assert (
        code == 1 and "fixtures.verl_bug:Engine [train] LEAK" in stdout
    )  # the report is untouched
    status = [line for line in lines if line.startswith("leakscope [")]
    assert status, lines
    shown = "\n".join(status)
    for phase in (
        "fixtures.verl_bug:Engine importing torch and leakscope (",
        "fixtures.verl_bug:Engine importing the target (",
        "fixtures.verl_bug:Engine [train] finding holders: step (",
        "[train] confirming 1 of 2: step (",
        "[train] confirming 2 of 2: step (",
        "[train] growth: micro-batch 2 of 2 (",
    ):
        assert phase in shown, f"{phase!r} never shown:\n{shown}"
    assert all(re.search(r"\(\d+ s of 120 s timeout\)$", line) for line in status), shown
    assert not any("LEAK" in line for line in lines)  # no report on the terminal (stderr)


def test_several_targets_in_process_show_each_target_and_no_timeout() -> None:
    code, lines, _ = on_terminal(
        "fixtures.verl_fix:Engine", "fixtures.verl_bug:Engine", "--no-isolate", *FAST
    )
    assert code == 0
    shown = "\n".join(line for line in lines if line.startswith("leakscope ["))
    assert (
        "leakscope [0/2] fixtures.verl_fix:Engine [forward-only] finding holders: step (" in shown
    ), shown
    assert (
        "leakscope [1/2] fixtures.verl_bug:Engine [forward-only] finding holders: step (" in shown
    ), shown
    assert re.search(r"\(\d+ s, no timeout\)", shown), shown


def test_a_hung_engine_shows_the_phase_it_hangs_in_with_the_clock_running() -> None:
    code, lines, stdout = on_terminal("fixtures.bad.hangs:Engine", *FAST, "--timeout", "25")
    assert code == 3 and "timed out after 25 s" in stdout
    hung = [
        int(m.group(1))
        for line in lines
        if (
            m := re.search(
                r"fixtures\.bad\.hangs:Engine \[forward-only\] finding holders: step \((\d+) s of 25 s timeout\)",
                line,
            )
        )
    ]
    assert hung, lines
    assert max(hung) - min(hung) >= 2, (
        hung
    )  # redrawn while the child hangs, not only on phase changes


@pytest.mark.parametrize("flag", ["--format=json", "--quiet"])
def test_json_and_quiet_show_no_status_line_even_on_a_terminal(flag: str) -> None:
    code, lines, _ = on_terminal("fixtures.verl_fix:Engine", *FAST, "--no-isolate", flag)
    assert code == 0
    assert not any("leakscope [" in line or "timeout" in line for line in lines), lines


def test_no_status_line_when_stderr_is_not_a_terminal() -> None:
    result = subprocess.run(
        [*LEAKSCOPE, "fixtures.verl_fix:Engine", *FAST, "--no-isolate"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0 and "CLEAN" in result.stdout
    assert result.stderr == ""
