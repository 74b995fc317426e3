"""Docs that claim to mirror the tool are checked against it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from leakscope.cli import app

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parent.parent / "docs"
OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)")


def _help_options(command: str = "check") -> set[str]:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return set(OPTION.findall(result.stdout))


def _section(doc: str, command: str) -> str:
    """The options table section of ``command`` in docs/cli.md (up to the next ``## `` heading)."""
    start = doc.index(f"## `leakscope {command}` options")
    end = doc.find("\n## ", start + 1)
    return doc[start:] if end < 0 else doc[start:end]


def test_cli_reference_lists_every_option_of_check_help() -> None:
    helped = _help_options()
    assert {
        "--mode",
        "--format",
        "--config",
        "--fail-on",
        "--quiet",
        "-q",
        "--progress",
        "--no-progress",
    } <= helped
    doc = _section((DOCS / "cli.md").read_text(encoding="utf-8"), "check")
    missing = sorted(o for o in helped if f"`{o}`" not in doc)
    assert missing == [], f"docs/cli.md does not document {missing}"
    table = [line for line in doc.splitlines() if line.startswith("| `-")]
    documented = {o for line in table for o in OPTION.findall(line.split("|")[1])}
    assert sorted(documented - helped) == [], (
        "docs/cli.md documents options that check --help does not have"
    )


def test_cli_reference_lists_every_option_of_watch_help() -> None:
    helped = _help_options("watch")
    assert {"--method", "--micro-batches", "--skip", "--then", "-m"} <= helped
    doc = _section((DOCS / "cli.md").read_text(encoding="utf-8"), "watch")
    missing = sorted(o for o in helped if f"`{o}`" not in doc)
    assert missing == [], f"docs/cli.md does not document {missing}"
    table = [line for line in doc.splitlines() if line.startswith("| `-")]
    documented = {o for line in table for o in OPTION.findall(line.split("|")[1])}
    assert sorted(documented - helped) == [], (
        "docs/cli.md documents options that watch --help does not have"
    )


def test_formats_doc_names_every_registered_format() -> None:
    from leakscope.render import FORMATS

    doc = (DOCS / "formats.md").read_text(encoding="utf-8")
    assert all(f"| `{fmt}` |" in doc for fmt in FORMATS)


def test_configuration_doc_names_every_key() -> None:
    from leakscope.config import ALLOW_KEYS, KEYS

    doc = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert all(f"| `{key}` |" in doc for key in KEYS)
    assert all(f"`{key}`" in doc for key in ALLOW_KEYS)


def test_findings_catalogue_covers_every_holder_and_cause() -> None:
    from leakscope.render.sarif import RULES

    doc = (DOCS / "findings.md").read_text(encoding="utf-8")
    for holder in RULES:
        title = {"not found": "unknown holder", "cycle": "reference cycle (until-gc)"}.get(
            holder, holder
        )
        assert f"### {title}\n" in doc, holder
    for cause in ("activations", "leaf+grad", "ctx", "nodes-only"):
        assert f"### {cause}\n" in doc, cause
    for entry in re.split(r"\n### ", doc.split("## Holders", 1)[1].split("## Causes", 1)[0])[1:]:
        assert all(part in entry for part in ("**Symptom**", "**Cause**", "**Fix**")), entry[:40]


def test_architecture_names_only_what_exists() -> None:
    """Every ``leakscope.x.y`` the architecture page names is a module, or an attribute of one
    (a class, a function, a method): the page is drawn from the code and cannot drift from it."""
    import importlib

    doc = (DOCS / "architecture.md").read_text(encoding="utf-8")
    names = sorted(set(re.findall(r"`(leakscope(?:\.\w+)+)`", doc)))
    assert len(names) > 40
    missing = []
    for name in names:
        parts = name.split(".")
        obj: object = None
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
                if obj is None:
                    break
            break
        if obj is None:
            missing.append(name)
    assert missing == [], f"docs/architecture.md names what does not exist: {missing}"
    for module in re.findall(r"(\w+)/: ", doc):  # the stage folders of the drawing
        assert (DOCS.parent / "leakscope" / module).is_dir(), module


def _drawn_layers(doc: str) -> list[set[str]]:
    """The drawing's rows, top to bottom, as the modules on each: a row is ``stage │ modules │ what``,
    a row with no stage continues the one above, ``·`` separates a row's modules, ``x/`` is the
    package ``leakscope.x`` and ``x.py`` the module."""
    start = doc.index("```text\n stage")
    block = doc[start : doc.index("```\n", start + 1)].splitlines()[3:]  # fence, header, rule
    layers: list[set[str]] = []
    for line in block:
        stage, modules, _what = (cell.strip() for cell in line.split("│"))
        if stage:
            layers.append(set())
        for token in filter(None, (t.strip() for t in modules.split("·"))):
            assert re.fullmatch(r"\w+(/|\.py)", token), f"not a module of the drawing: {token!r}"
            layers[-1].add("leakscope." + token.removesuffix("/").removesuffix(".py"))
    return layers


def test_architecture_drawing_is_the_layers_contract() -> None:
    """The drawing's rows are the import-linter ``layers`` contract, row for row, and every module
    and package of ``leakscope/`` stands on exactly one row: the picture is what lint-imports checks."""
    doc = (DOCS / "architecture.md").read_text(encoding="utf-8")
    drawn = _drawn_layers(doc)
    project = tomllib.loads((DOCS.parent / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in project["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert drawn == [{m.strip() for m in row.split("|")} for row in contract["layers"]]
    package = DOCS.parent / "leakscope"
    top = {
        f"leakscope.{p.stem}"
        for p in package.iterdir()
        if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
        or (p.is_dir() and (p / "__init__.py").is_file())
    }
    placed = [m for row in drawn for m in row]
    assert sorted(placed) == sorted(top)
