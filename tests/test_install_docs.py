"""Every install line in the docs installs this project, never the unrelated ``leakscope`` on PyPI.

The name ``leakscope`` on PyPI belongs to another project; this one is the
distribution named in pyproject.toml and installs from a checkout. The scan
reads each ``pip install`` in README.md and docs/*.md (code blocks, inline
code and YAML ``run:`` lines alike) and every ``leakscope[extra]`` mention.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
#: pip options whose next word is a value, not a requirement
_VALUED = {
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "--prefix",
    "--root",
    "--python",
    "--platform",
}
_INSTALL = re.compile(r"\bpip3?\s+install\s+")
_STRANGER_EXTRA = re.compile(r"(?<![\w.-])leakscope\[")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_problems(text: str, ours: str, extras: set[str]) -> list[str]:
    """What is wrong with the install instructions in ``text`` (empty when nothing is)."""
    problems = []
    for line in text.splitlines():
        if _STRANGER_EXTRA.search(line):
            problems.append(
                f"names the extra of the unrelated 'leakscope' distribution: {line.strip()}"
            )
        for match in _INSTALL.finditer(line):
            rest = line[match.end() :].split("`", 1)[0]
            words = re.split(r"\s*(?:&&|\|\||;|\||#)", rest, maxsplit=1)[0]
            try:
                tokens = shlex.split(words)
            except ValueError:
                tokens = words.split()
            skip = False
            for token in tokens:
                if skip:
                    skip = False
                    continue
                if token.startswith("-"):
                    skip = token in _VALUED
                    continue
                problems.extend(
                    f"{problem}: {line.strip()}" for problem in _requirement(token, ours, extras)
                )
    return problems


def _requirement(token: str, ours: str, extras: set[str]) -> list[str]:
    if token.startswith("<") or "$" in token:  # a placeholder the reader fills in
        return []
    path, _, wanted = token.partition("[")
    asked = {e.strip() for e in wanted.rstrip("]").split(",") if e.strip()}
    if path.startswith((".", "/", "~")) or ("/" in path and "://" not in path and "@" not in path):
        if path in (".", "./") and asked - extras:  # this checkout's extras must exist
            return [f"extra {sorted(asked - extras)} is not in pyproject.toml"]
        return []
    match = _NAME.match(token)
    if match is None:
        return [f"cannot read the requirement {token!r}"]
    name = _normal(match.group(0))
    if name.startswith("leakscope") and name != _normal(ours):
        return [f"installs the distribution {match.group(0)!r}, not this project ({ours})"]
    if name == _normal(ours) and asked - extras:
        return [f"extra {sorted(asked - extras)} is not in pyproject.toml"]
    return []


def test_the_distribution_name_is_not_the_unrelated_pypi_project() -> None:
    assert _normal(PROJECT["name"]) != "leakscope"
    assert PROJECT["scripts"]["leakscope"] == "leakscope.cli:main"  # the command keeps its name


@pytest.mark.parametrize(
    "path", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_docs_install_only_this_project(path: Path) -> None:
    extras = set(PROJECT["optional-dependencies"])
    assert install_problems(path.read_text(encoding="utf-8"), PROJECT["name"], extras) == []


@pytest.mark.parametrize(
    "line",
    [
        "pip install leakscope",
        "      - run: pip install leakscope    # finds the CPU torch above",
        "`--model hf-lora` (`pip install 'leakscope[hf]'`)",
        "needs `leakscope[hf]`",
        "pip install -q torch==2.13.0 && pip install 'leakscope>=0.1' verl",
        "python -m pip install --no-deps Leakscope==0.2.0rc1",
        "pip install -e '.[nonexistent]'",
    ],
)
def test_the_scan_catches_a_wrong_install_line(line: str) -> None:
    assert install_problems(line, PROJECT["name"], set(PROJECT["optional-dependencies"]))


@pytest.mark.parametrize(
    "line",
    [
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
        "pip install -e '.[test,hf]' && .ci/setup-verl.sh",
        "pip install torch==2.13.0 && pip install /path/to/leakscope   # a clone of this repository",
        "- run: pip install ./leakscope-src",
        f"pip install '{PROJECT['name']}[hf]'",
        "pip install --no-deps --target <tmp> tests/data/broken",
        "pip install verl==0.9.1   # beside leakscope",
    ],
)
def test_the_scan_passes_a_right_install_line(line: str) -> None:
    assert install_problems(line, PROJECT["name"], set(PROJECT["optional-dependencies"])) == []


def test_the_github_actions_recipe_installs_cpu_torch_first_then_this_checkout() -> None:
    import yaml  # pre-commit's dependency, in the test extra

    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# \.github/workflows/leakscope\.yml\n.*?)```", doc, re.S)
    assert block is not None, "docs/ci.md has no GitHub Actions recipe"
    (job,) = yaml.safe_load(block.group(1))["jobs"].values()
    runs = [step.get("run", "") for step in job["steps"]]
    uses = [step.get("uses", "") for step in job["steps"]]
    torch_at = next(i for i, run in enumerate(runs) if run.startswith("pip install torch=="))
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs[torch_at]
    checkout = next(s for s in job["steps"] if s.get("with", {}).get("path") == ".leakscope")
    assert checkout["uses"].startswith("actions/checkout@")
    ours = next(
        i
        for i, run in enumerate(runs)
        if run.split("#")[0].split() == ["pip", "install", "./.leakscope"]
    )
    assert (
        torch_at < ours < next(i for i, run in enumerate(runs) if run.startswith("leakscope check"))
    )
    sarif = next(
        s
        for s in job["steps"]
        if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")
    )
    assert any(f"--output {sarif['with']['sarif_file']}" in run for run in runs)
    artifact = next(
        s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")
    )
    assert any(f"--format html --output {artifact['with']['path']}" in run for run in runs)
    assert "security-events" in yaml.safe_load(block.group(1))["permissions"]
    assert all(u == "" or "@" in u for u in uses)


def _readme_test_command() -> list[str]:
    """The steps of the README's test command (the one code line under "Run the tests")."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Run the tests\n+(?:<!--[^\n]*-->\n)?```bash\n(.+?)\n```", readme, re.S)
    assert block is not None and "\n" not in block.group(1), "README has no one-line test command"
    return [step.strip() for step in block.group(1).split("&&")]


def ci_runs_command(script: str, steps: list[str]) -> list[str]:
    """The steps of ``steps`` that ``script`` (a bash file) does not run, in their order.

    A step matches a line of the script that runs it, ``pip -q`` allowed; each is looked for
    after the one before it, so a reordered script misses the step it moved.
    """
    lines = [
        line.strip()
        for line in script.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    missing, at = [], 0
    for step in steps:
        found = next(
            (
                i
                for i in range(at, len(lines))
                if lines[i].replace("pip install -q ", "pip install ") == step
            ),
            None,
        )
        if found is None:
            missing.append(step)
        else:
            at = found + 1
    return missing


def test_ci_runs_the_readme_test_command_step_by_step() -> None:
    steps = _readme_test_command()
    assert steps[0] == "python3 -m venv .venv" and "python -m pytest -q" in steps[-1]
    assert {"lint-imports", "ruff check .", "ruff format --check .", "mypy"} <= set(steps)
    assert ci_runs_command((ROOT / ".ci" / "run").read_text(encoding="utf-8"), steps) == []


def test_the_ci_comparison_catches_a_missing_or_reordered_step() -> None:
    steps = ["pip install torch==2.13.0", "lint-imports", "mypy", "python -m pytest -q"]
    assert (
        ci_runs_command(
            "pip install -q torch==2.13.0\nlint-imports\nmypy\npython -m pytest -q\n", steps
        )
        == []
    )
    assert ci_runs_command(
        "pip install -q torch==2.13.0\nlint-imports\npython -m pytest -q\n", steps
    ) == ["mypy"]
    assert ci_runs_command(
        "pip install torch==2.13.0\nmypy\nlint-imports\npython -m pytest -q\n", steps
    ) == ["mypy"]
    assert ci_runs_command(
        "# mypy\npip install torch==2.13.0\nlint-imports\npython -m pytest -q\n", steps
    ) == ["mypy"]
