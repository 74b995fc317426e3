"""The pre-commit hook, end to end with the real ``pre-commit`` from PyPI.

A scratch git repository with a ``[tool.leakscope]`` table runs ``pre-commit
run --all-files`` with the hook this checkout ships (``.pre-commit-hooks.yaml``,
fetched by pre-commit from a git repository the way a user's config fetches it)
and with the local-hook snippet of docs/ci.md, verbatim. ``language: system``
means pre-commit installs nothing: ``PIP_NO_INDEX`` would fail any attempt.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
CI_DOC = ROOT / "docs" / "ci.md"
LEAK_PATH = "output.model_output.log_probs"


def _snippet(name: str) -> str:
    """The YAML block that follows ``<!-- pre-commit: NAME -->`` in docs/ci.md."""
    doc = CI_DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- pre-commit: {name} -->\n```yaml\n(.*?)```", doc, re.S)
    assert match is not None, f"docs/ci.md has no pre-commit {name} snippet"
    return match.group(1)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(
        # the `leakscope` of this environment, as a user's activated venv has it
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT),  # the user's package (here: the fixtures) imports
        PRE_COMMIT_HOME=str(home / "cache"),
        PIP_NO_INDEX="1",  # a hook that tried to install anything would fail
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
        GIT_CONFIG_NOSYSTEM="1",
        HOME=str(home),
    )
    return env


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _pre_commit(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    if shutil.which("git") is None:
        pytest.fail("git is needed to test the pre-commit hook")
    env = _env(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    _git(project, env, "init", "-q")
    (project / "train.py").write_text("x = 1\n", encoding="utf-8")  # a Python file: types: [python]
    return project, env


def _use(project: Path, env: dict[str, str], target: str, config: str) -> None:
    (project / "pyproject.toml").write_text(
        f'[tool.leakscope]\ntargets = ["{target}"]\nmode = "train"\nmicro-batches = 1\n',
        encoding="utf-8",
    )
    (project / ".pre-commit-config.yaml").write_text(config, encoding="utf-8")
    _git(project, env, "add", "-A")


def _hook_repository(tmp_path: Path, env: dict[str, str]) -> tuple[Path, str, str]:
    """A git repository holding this checkout's hook definition; its first and newest commits."""
    repo = tmp_path / "leakscope-hooks"
    repo.mkdir()
    _git(repo, env, "init", "-q")
    (repo / "README").write_text("old\n", encoding="utf-8")
    _git(repo, env, "add", "-A")
    _git(repo, env, "commit", "-qm", "before the hook")
    old = _git(repo, env, "rev-parse", "HEAD")
    shutil.copy(ROOT / ".pre-commit-hooks.yaml", repo / ".pre-commit-hooks.yaml")
    _git(repo, env, "add", "-A")
    _git(repo, env, "commit", "-qm", "hook")
    return repo, old, _git(repo, env, "rev-parse", "HEAD")


def test_the_shipped_hook_fails_on_a_leak_showing_the_finding_and_passes_a_clean_engine(
    scratch: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    project, env = scratch
    repo, old, new = _hook_repository(tmp_path, env)
    # The docs' remote snippet, filled in; `pre-commit autoupdate` moves rev to the newest commit.
    config = (
        _snippet("remote")
        .replace("<leakscope repository URL>", str(repo))
        .replace("<commit sha>", old)
    )
    _use(project, env, "fixtures.verl_bug:Engine", config)
    updated = _pre_commit(project, env, "autoupdate")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert f"rev: {new}" in (project / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    _git(project, env, "add", "-A")

    leaky = _pre_commit(project, env, "run", "--all-files")
    out = leaky.stdout + leaky.stderr
    assert leaky.returncode == 1, out
    assert "Failed" in out and "exit code: 1" in out
    assert "fixtures.verl_bug:Engine [train] LEAK" in out
    assert (
        LEAK_PATH in out
        and 'fix: detach output["model_output"]["log_probs"] before it is returned' in out
    )
    assert "Installing environment" not in out  # language: system installs nothing

    _use(
        project, env, "fixtures.verl_fix:Engine", (project / ".pre-commit-config.yaml").read_text()
    )
    clean = _pre_commit(project, env, "run", "--all-files")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert re.search(r"leakscope \(autograd graph retention\)\.+Passed", clean.stdout), clean.stdout


def test_the_documented_local_hook_fails_on_a_leak_showing_the_finding(
    scratch: tuple[Path, dict[str, str]],
) -> None:
    project, env = scratch
    _use(project, env, "fixtures.verl_bug:Engine", _snippet("local"))
    leaky = _pre_commit(project, env, "run", "--all-files")
    out = leaky.stdout + leaky.stderr
    assert leaky.returncode == 1, out
    assert LEAK_PATH in out and "1 leak, 0 clean, 0 error (exit 1)" in out


def test_the_hook_definition_runs_in_the_users_environment_and_shows_findings() -> None:
    import yaml  # pre-commit's own dependency

    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["language"] == "system"  # no hook venv without the user's package
    assert hook["entry"].split()[:2] == ["leakscope", "check"]
    assert "--quiet" not in hook["entry"] and "-q" not in hook["entry"].split()
    (local,) = yaml.safe_load(_snippet("local"))["repos"][0]["hooks"]
    assert {k: local[k] for k in hook if k != "description"} == {
        k: hook[k] for k in hook if k != "description"
    }
