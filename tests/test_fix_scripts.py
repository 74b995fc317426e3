"""``leakscope fix`` on the plain training scripts of ``fixtures/watch/scripts/`` (copies): a leaky one
is fixed, proven by re-running the job, written and then watched clean; its clean look-alike (the same
script with ``--clean``) gets nothing written; a carried state's detach, which changes the gradients
by design, is offered and never written (NOTE [Edits from the line that made the graph])."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leakscope.fix.candidates import CARRY_NOTE
from tests.conftest import FIXTURES

pytestmark = pytest.mark.integration

SCRIPTS = FIXTURES / "watch" / "scripts"
#: the script's own step count, kept small (the proof compares the first 3 backward calls)
STEPS = ("--steps", "4")


def _run(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "leakscope", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _copy(tmp_path: Path, name: str) -> Path:
    shutil.copy(SCRIPTS / f"{name}.py", tmp_path / f"{name}.py")
    shutil.copy(SCRIPTS / "_graph.py", tmp_path / "_graph.py")
    return tmp_path / f"{name}.py"


def _fix(tmp_path: Path, name: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    done = _run("fix", "--apply", "--format", "json", f"{name}.py", *STEPS, *extra, cwd=tmp_path)
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}")


def test_an_evaluation_loop_runs_under_no_grad_and_the_footer_says_no_gradient_was_compared(
    tmp_path: Path,
) -> None:
    """An evaluation loop without ``torch.no_grad()``: the line that made the graph runs under it (two
    lines, the statement one level in), proven by re-running the job; the job runs no backward, so
    the footer says no gradient was compared, not "over its first 3 backward calls" (every leaky
    script is fixed and re-watched by tests/test_fix_corpus.py)."""
    script = _copy(tmp_path, "eval_loop")
    done = _run("fix", "--apply", "eval_loop.py", *STEPS, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "  at eval_loop.py:" in out and ": predictions.append(model(x).softmax(-1))\n" in out
    assert "with torch.no_grad():\n" in out
    assert "backward calls" not in out, out
    assert (
        "no gradient compared: the job runs no backward, with the edit as without: there is no"
        " gradient the edit could change\n"
    ) in out, out
    assert (
        "            with torch.no_grad():\n                predictions.append(model(x).softmax(-1))\n"
        in script.read_text(encoding="utf-8")
    )


def test_a_carried_state_is_detached_at_the_carry_and_never_verified(tmp_path: Path) -> None:
    """The RNN's hidden state, carried from chunk to chunk: the edit detaches it where the line reads
    it; backward ran through the carry, so the gradients change and nothing is written."""
    script = _copy(tmp_path, "rnn_stream")
    original = script.read_bytes()
    code, doc, stderr = _fix(tmp_path, "rnn_stream")
    assert code == 1, stderr[-3000:]
    (carry,) = [
        f
        for f in doc["fixes"]
        if f["edit"] and f["edit"]["before"] == "out, hidden = rnn(chunk, hidden)"
    ]
    assert carry["edit"]["after"] == "out, hidden = rnn(chunk, hidden.detach())"
    assert carry["status"] == "unverified" and not carry["applied"], carry
    assert "not verified: the edit changes the " in carry["reason"], carry
    assert CARRY_NOTE in carry["reason"]
    assert not any(f["applied"] for f in doc["fixes"])
    assert script.read_bytes() == original
