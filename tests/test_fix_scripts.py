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


@pytest.mark.parametrize(
    ("name", "before", "after"),
    [
        # an evaluation loop without torch.no_grad(): the line that made the graph runs under it
        (
            "eval_loop",
            "predictions.append(model(x).softmax(-1))",
            "with torch.no_grad(): predictions.append(model(x).softmax(-1))",
        ),
        # a weight average updated outside torch.no_grad(): the stored-at line stores a detached value
        (
            "ema",
            "ema[name] = 0.99 * ema[name] + 0.01 * p",
            "ema[name] = (0.99 * ema[name] + 0.01 * p).detach()",
        ),
    ],
)
def test_a_leaky_script_is_fixed_proven_written_and_clean_after(
    tmp_path: Path, name: str, before: str, after: str
) -> None:
    script = _copy(tmp_path, name)
    code, doc, stderr = _fix(tmp_path, name)
    assert code == 0 == doc["exit_code"], stderr[-3000:]
    assert doc["fixes"], doc
    for fix in doc["fixes"]:
        assert fix["status"] == "verified" and fix["applied"], fix
        assert fix["edit"]["before"] == before and fix["edit"]["after"] == after, fix["edit"]
    assert f" {after}\n" in script.read_text(encoding="utf-8")
    watched = _run("watch", f"{name}.py", *STEPS, cwd=tmp_path)
    assert watched.returncode == 0, watched.stdout[-3000:]
    # the clean look-alike of the same script: nothing to fix, nothing written
    text = script.read_bytes()
    code, doc, stderr = _fix(tmp_path, name, "--clean")
    assert (code, doc["fixes"]) == (0, []), stderr[-3000:]
    assert script.read_bytes() == text


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
