"""``leakscope fix`` end to end on copies: the README's leaky engine (verl's shape) fixed at its return,
a training script fixed by re-running it, and outputs that are inputs refused (every fixture of the
corpus is fixed by tests/test_fix_corpus.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

pytestmark = pytest.mark.integration

FAST = ("--mode", "train", "--micro-batches", "1", "--no-confirm")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def _run(
    *args: str, cwd: Path, timeout: float = 900, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leakscope", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_readmes_leaky_engine_is_fixed_at_its_return(tmp_path: Path) -> None:
    shutil.copy(ROOT / "leakscope" / "models" / "engines.py", tmp_path / "my_engines.py")
    done = _run(
        "fix", "my_engines:LeakyFSDPEngine", "--apply", "--format", "json", *FAST, cwd=tmp_path
    )
    doc = json.loads(done.stdout)
    assert done.returncode == 0 == doc["exit_code"], done.stderr[-3000:]
    # one edit at the return releases both findings: one fix, counted once (issue 29)
    paths = [f["path"] for f in doc["fixes"]]
    assert paths == ["output.model_output.log_probs"], paths
    for fix in doc["fixes"]:
        assert fix["status"] == "verified" and fix["applied"], fix
        assert (
            fix["edit"]["before"]
            == 'return loss, {"model_output": model_output, "metrics": metrics}'
        )
    text = (tmp_path / "my_engines.py").read_text(encoding="utf-8")
    assert (
        'return loss, {"model_output": {k: v.detach() if hasattr(v, "detach") else v for k, v in'
        ' model_output.items()}, "metrics": metrics}' in text
    )
    again = _run("check", "my_engines:LeakyFSDPEngine", "--format", "json", cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:]


def test_a_script_is_fixed_by_re_running_it_and_its_patch_applies(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "fixtures", ignore=shutil.ignore_patterns("__pycache__"))
    script = "fixtures/watch/module_loop.py"
    job = ("--method", "fixtures.watch.loops:Stepper.step", script, "--keep")
    done = _run("fix", "--diff", *job, cwd=tmp_path, PYTHONPATH=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 verified, 0 not verified" in done.stderr
    assert "the job's losses and gradients over its first 3 backward calls" in done.stderr
    assert done.stdout.startswith(f"--- a/{script}\n+++ b/{script}\n"), done.stdout
    assert "-        kept.append(loss)\n+        kept.append(loss.detach())\n" in done.stdout
    assert (tmp_path / script).read_bytes() == (FIXTURES / "watch" / "module_loop.py").read_bytes()
    patched = subprocess.run(
        ["git", "apply", "-"], input=done.stdout, cwd=tmp_path, capture_output=True, text=True
    )
    assert patched.returncode == 0, patched.stderr
    watched = _run("watch", *job, cwd=tmp_path, PYTHONPATH=str(tmp_path))
    assert watched.returncode == 0, watched.stdout[-3000:]


def test_a_plain_script_is_fixed_with_no_flags_and_is_clean_after(tmp_path: Path) -> None:
    """``leakscope fix train.py --apply``, nothing else: the steps come from autograd, the running sum
    at module level is detached where the script adds to it, proven by re-running the job, written,
    and the job then watches clean."""
    shutil.copy(FIXTURES / "watch" / "scripts" / "sum_loss.py", tmp_path / "train.py")
    shutil.copy(FIXTURES / "watch" / "scripts" / "_graph.py", tmp_path / "_graph.py")
    done = _run("fix", "train.py", "--apply", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 verified (1 applied), 0 not verified" in done.stdout, done.stdout
    text = (tmp_path / "train.py").read_text(encoding="utf-8")
    assert "        total_loss += loss.detach()\n" in text
    assert "        total_loss += loss\n" not in text
    watched = _run("watch", "train.py", cwd=tmp_path)
    assert watched.returncode == 0, watched.stdout[-3000:]


def test_outputs_that_are_inputs_are_refused(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "watch" / "history_job.py", tmp_path / "train.py")
    shutil.copy(FIXTURES / "watch" / "history_engine.py", tmp_path / "history_engine.py")
    before = (tmp_path / "train.py").read_bytes()
    watched = _run("watch", "--emit-test", "train.py", "train.py", cwd=tmp_path)
    assert watched.returncode == 2
    assert "train.py is the script being watched, an input" in watched.stderr
    fixed = _run("fix", "history_engine:HistoryEngine", "-o", "history_engine.py", cwd=tmp_path)
    assert fixed.returncode == 2
    assert "is the file of history_engine:HistoryEngine, an input" in fixed.stderr
    assert (tmp_path / "train.py").read_bytes() == before
    assert "Traceback" not in watched.stderr + fixed.stderr
