"""What ``pre-commit run --all-files`` prints with docs/ci.md's local hook when an engine leaks.

A scratch git project (in a temporary directory, removed afterwards) whose ``[tool.leakscope]``
checks ``fixtures.verl_bug:Engine`` in train mode, with the ``<!-- pre-commit: local -->`` snippet of
docs/ci.md as its ``.pre-commit-config.yaml``; the engine imports from this checkout
(``PYTHONPATH``), as a user's package imports in their environment. docs/gen.py runs it for the
example in docs/ci.md; tests/test_precommit.py tests the hook itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    config = re.search(r"<!-- pre-commit: local -->\n```yaml\n(.*?)```", doc, re.S)
    assert config is not None, "docs/ci.md has no local pre-commit snippet"
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp, "project")
        project.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
        env.update(
            PYTHONPATH=str(ROOT), PRE_COMMIT_HOME=str(Path(tmp, "cache")), HOME=tmp, PIP_NO_INDEX="1",
            GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
            GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
        )
        (project / "train.py").write_text("x = 1\n", encoding="utf-8")
        (project / "pyproject.toml").write_text(
            '[tool.leakscope]\ntargets = ["fixtures.verl_bug:Engine"]\nmode = "train"\n', encoding="utf-8"
        )
        (project / ".pre-commit-config.yaml").write_text(config.group(1), encoding="utf-8")
        for args in (["init", "-q"], ["add", "-A"]):
            subprocess.run(["git", *args], cwd=project, env=env, check=True, capture_output=True)
        done = subprocess.run(
            [sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=project, env=env,
            capture_output=True, text=True, timeout=600,
        )
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
