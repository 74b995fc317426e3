"""One set of options (issue 29): each shared option declared once and offered by every command it
means something to, each a ``[tool.leakscope]`` key where CI sets it; help offers only what a command
accepts; docs name only options that exist; the version follows the CHANGELOG; the JSON report's
schema is the one generated from the result types. In process, through the app's runner.
"""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from typing import Any

import pytest
import tomllib
import typer.main
from typer.testing import CliRunner

from leakscope import __version__
from leakscope.cli import app
from leakscope.config import parse
from leakscope.errors import ConfigError
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

runner = CliRunner()


def _options(command: str | None = None) -> dict[str, Any]:
    """Every option string of ``command`` (None: the root) -> its click parameter."""
    root = typer.main.get_command(app)
    cmd = root if command is None else root.commands[command]  # type: ignore[attr-defined]
    out = {}
    for param in cmd.params:
        for opt in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())):
            if opt.startswith("-"):
                out[opt] = param
    return out


def _help(command: str) -> str:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.stdout


#: the options every command that shares them declares once (NOTE [Options declared once])
SHARED = {
    "check": ("-o", "-f", "-q", "--config", "--factory", "--micro-batches", "--mode", "--color"),
    "estimate": ("-o", "-f", "-q", "--config", "--factory", "--micro-batches", "--mode", "--color"),
    "fix": ("-o", "-f", "-q", "--config", "--factory", "--micro-batches", "--mode"),
    "explain": ("-o", "-f", "--config", "--factory", "--mode"),
    "watch": ("-o", "-f", "-q", "--micro-batches", "--color"),
    "render": ("-o", "-f", "--color"),
}


@pytest.mark.parametrize("command", sorted(SHARED))
def test_every_command_offers_the_shared_options_it_means(command: str) -> None:
    offered = _options(command)
    assert set(SHARED[command]) <= set(offered), sorted(set(SHARED[command]) - set(offered))
    # one declaration: the same help text wherever an option is offered
    for option in SHARED[command]:
        for other, options in SHARED.items():
            if option in options and option not in ("-f", "--mode", "--micro-batches"):
                assert offered[option].help == _options(other)[option].help, (option, other)
    assert "-V" in offered and "--version" in offered


def test_explain_help_offers_only_the_modes_it_accepts() -> None:
    text = _help("explain")
    assert "train|forward-only" in text and "both" not in text
    refused = runner.invoke(app, ["explain", "--mode", "both"])
    assert refused.exit_code == 2
    assert "text|json" in text


def test_version_anywhere_on_the_command_line() -> None:
    for argv in (["-V"], ["--version"], ["check", "-V"], ["check", "pkg.mod:Engine", "--version"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, (argv, result.output)
        assert result.stdout == f"leakscope {__version__}\n", argv


def test_version_follows_the_changelog() -> None:
    """pyproject's version == leakscope.__version__ == the newest dated CHANGELOG section (semver)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["version"] == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    sections = re.findall(
        r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?\s*$",
        (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
        re.M,
    )
    released = [(v, d) for v, d in sections if v != "Unreleased"]
    assert released, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' section"
    assert all(d for _, d in released), f"every released section is dated: {released}"
    assert released[0][0] == __version__, (
        f"the newest CHANGELOG section is {released[0][0]}, the package {__version__}"
    )


def test_docs_show_the_current_version() -> None:
    """A doc that prints the tool's version prints this one (found here, not after the docs' run)."""
    shown = {
        f"{doc.relative_to(ROOT)}: {version}"
        for doc in sorted((ROOT / "docs").glob("*.md"))
        for version in re.findall(
            r'"leakscope_version": "([^"]+)"', doc.read_text(encoding="utf-8")
        )
        if version != __version__
    }
    assert not shown, f"stale versions (run python docs/gen.py on each): {sorted(shown)}"


def test_run_settings_are_project_keys() -> None:
    settings = parse({"timeout": 30, "jobs": 2, "format": "json"}, "pyproject.toml")
    assert (settings.timeout, settings.jobs, settings.format) == (30.0, 2, "json")
    for bad in ({"timeout": -1}, {"jobs": 0}, {"format": "xml"}, {"timeout": True}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            parse(bad, "pyproject.toml")


def test_project_format_applies_and_flags_win(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.leakscope]\nformat = "json"\n', encoding="utf-8")
    # a malformed target fails before anything runs: the project's format decides the error document
    result = runner.invoke(app, ["check", "no-colon", "--config", str(config)])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]
    result = runner.invoke(app, ["check", "no-colon", "--config", str(config), "-f", "text"])
    assert result.exit_code == 2 and result.stdout == ""


# NOTE [Options other tools take]: the docs show commands of pip, pytest, torchrun, git, pre-commit
# and the repository's own scripts; their options are listed here with the tool, and every other
# `--option` the docs name must be one of leakscope's.
OTHER_TOOLS = {
    "--all-files": "pre-commit run",
    "--args": "a training script's own arguments (leakscope watch train.py --their --args)",
    "--their": "a training script's own arguments (leakscope watch train.py --their --args)",
    "--check": "ruff format --check, python docs/gen.py --check",
    "--detach": "fixtures/watch/verl_update.py",
    "--dist": "pytest-xdist",
    "--drop": "docs/examples/json_excerpt.py",
    "--first": "docs/examples/json_excerpt.py",
    "--items": "docs/examples/json_excerpt.py",
    "--inline": "docs/examples/json_excerpt.py",
    "--name": "docs/examples/json_excerpt.py",
    "--path": "docs/examples/json_excerpt.py (and leakscope explain --path)",
    "--freeze": "pre-commit autoupdate",
    "--growth": "benchmarks/isolation_cost.py",
    "--index-url": "pip install",
    "--json": "benchmarks/run.py",
    "--only": "benchmarks/run.py",
    "--short": "benchmarks/run.py",
    "--no-fail": "benchmarks/run.py",
    "--junit-xml": "pytest",
    "--keep": "fixtures/watch/module_loop.py",
    "--clean": "fixtures/watch/scripts/*.py (each script's clean twin)",
    "--leaky-rank": "fixtures/watch/rank_update.py",
    "--metric": "fixtures/watch/verl_update.py",
    "--no-build-isolation": "pip install",
    "--no-deps": "pip install",
    "--target": "pip install",
    "--nproc-per-node": "torchrun",
    "--standalone": "torchrun",
    "--setup-hook": "fixtures/watch/ray_update.py",
    "--steps": "a real-bug driver script, fixtures/watch/history_job.py",
    "--help": "every command",
}


def test_docs_name_only_options_that_exist() -> None:
    """Every ``--option`` README.md and docs/*.md mention is one of leakscope's (any command's, as its
    parser reads it) or another tool's listed in OTHER_TOOLS."""
    root = typer.main.get_command(app)
    ours = set(_options())
    for name in root.commands:  # type: ignore[attr-defined]
        ours |= set(_options(name))
    unknown: dict[str, list[str]] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in re.finditer(r"(?<![\w-])--[a-z][a-z0-9-]*", doc.read_text(encoding="utf-8")):
            option = match.group(0)
            if option not in ours and option not in OTHER_TOOLS:
                unknown.setdefault(option, []).append(doc.name)
    assert unknown == {}, f"docs name options no command has: {unknown}"
    assert "--max-objects" not in ours  # docs/security.md named it; it is not an option


def test_the_shipped_schema_is_the_generated_one() -> None:
    """leakscope/render/report.schema.json is what docs/gen_schema.py makes from leakscope.results,
    and is package data (an installed leakscope ships it)."""
    import jsonschema

    from leakscope.render.json_report import schema

    generator = runpy.run_path(str(ROOT / "docs" / "gen_schema.py"))
    shipped = (ROOT / "leakscope" / "render" / "report.schema.json").read_text(encoding="utf-8")
    assert shipped == generator["text"](), "run: python docs/gen_schema.py"
    jsonschema.Draft202012Validator.check_schema(schema())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "render/report.schema.json" in project["tool"]["setuptools"]["package-data"]["leakscope"]
    assert "report.schema.json" in (ROOT / "docs" / "json-report.md").read_text(encoding="utf-8")


def test_the_schema_refuses_what_the_writer_never_writes() -> None:
    """The schema is strict: an unknown key, a missing one or a wrong type is an error."""
    import jsonschema

    from leakscope.render.json_report import schema

    validator = jsonschema.Draft202012Validator(schema())
    good = {
        "schema_version": 1,
        "leakscope_version": __version__,
        "torch_version": "2.13.0",
        "python_version": "3.11.7",
        "results": [
            {
                "target": "pkg.mod:Engine",
                "mode": "train",
                "verdict": "error",
                "error": "module 'pkg' not found",
                "findings": [],
                "retained_bytes": 0,
                "kind": None,
                "settings": [],
                "warnings": [],
            }
        ],
    }
    assert list(validator.iter_errors(good)) == []
    assert list(validator.iter_errors({**good, "extra": 1}))
    assert list(
        validator.iter_errors({**good, "results": [{**good["results"][0], "mode": "both"}]})
    )
    assert list(validator.iter_errors({k: v for k, v in good.items() if k != "results"}))


def test_readme_says_why_byte_figures_differ() -> None:
    """A newcomer's first check measures its own node cost; the README says so and how the docs fix it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_output = readme.index(
        "<!-- output: leakscope check leakscope.models.engines:LeakyFSDPEngine -->"
    )
    note = readme[first_output : readme.index("### Installing it beside your own engines")]
    assert "LEAKSCOPE_NODE_BYTES=746 leakscope check" in note
    assert "measures once per machine" in note
