"""Targets that are not engine classes: ``--factory`` and step functions, through the CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from leakscope.cli import app

pytestmark = pytest.mark.integration

runner = CliRunner()


def check(*args: str) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(app, ["check", *args, "--format", "json"])
    return result.exit_code, json.loads(result.stdout), result.stderr


def summary(doc: dict[str, Any]) -> list[tuple[str, str, str, list[str], Any]]:
    return [
        (r["target"], r["mode"], r["verdict"], [f["path"] for f in r["findings"]], r["error"])
        for r in doc["results"]
    ]


def test_step_function_target_leaks_what_it_returns() -> None:
    code, doc, _ = check("fixtures.step_function:step")
    assert code == 1
    target = "fixtures.step_function:step"
    assert summary(doc) == [
        (target, "train", "leak", ["output.log_probs"], None),
        (target, "forward-only", "leak", ["output.log_probs"], None),
    ]
    finding = doc["results"][0]["findings"][0]
    assert finding["confirmed"] is True
    # Source lines follow the step itself (not the helper it calls).
    assert (finding["source"]["file"], finding["source"]["function"]) == (
        "fixtures/step_function.py",
        "step",
    )


def test_step_function_by_file_path() -> None:
    code, doc, _ = check("fixtures/step_function.py:step", "--mode", "train")
    assert code == 1
    assert summary(doc) == [
        ("fixtures/step_function.py:step", "train", "leak", ["output.log_probs"], None)
    ]


def test_factory_builds_the_engine_the_target_names() -> None:
    """The leaky verl_bug target, built by a factory returning a clean engine: the factory's engine is checked."""
    code, doc, _ = check(
        "fixtures.verl_bug:Engine", "--factory", "fixtures.step_function:make_engine"
    )
    assert code == 0
    assert summary(doc) == [
        ("fixtures.verl_bug:Engine", "train", "clean", [], None),
        ("fixtures.verl_bug:Engine", "forward-only", "clean", [], None),
    ]


def test_factory_for_an_engine_that_needs_more_than_the_model() -> None:
    code, doc, _ = check(
        "fixtures.engine_attributes:Engine",
        "--factory",
        "tests/data/factories.py:make_leaky_engine",
        "--mode",
        "train",
    )
    assert code == 1
    assert summary(doc) == [
        (
            "fixtures.engine_attributes:Engine",
            "train",
            "leak",
            ["output.model_output.log_probs"],
            None,
        ),
    ]


def test_factory_that_is_not_callable() -> None:
    code, doc, _ = check(
        "fixtures.verl_bug:Engine",
        "--factory",
        "fixtures.step_function:EXPECTED",
        "--mode",
        "train",
    )
    assert code == 3
    assert doc["results"][0]["error"] == "--factory names a dict, not a callable taking the model"


def test_factory_with_a_typo_suggests_the_name() -> None:
    code, doc, _ = check(
        "fixtures.verl_bug:Engine",
        "--factory",
        "fixtures.step_function:make_engin",
        "--mode",
        "train",
    )
    assert code == 3
    assert doc["results"][0]["error"] == (
        "'fixtures.step_function' has no attribute 'make_engin'; did you mean 'make_engine'?"
    )


def test_factory_without_a_name_is_a_usage_error() -> None:
    code, doc, err = check("fixtures.verl_bug:Engine", "--factory", "fixtures.step_function")
    assert code == 2
    message = (
        "the command line: factory: target 'fixtures.step_function' is not of the form 'pkg.module:Name' or "
        "'path/to/file.py:Name'; add ':Name' naming the engine class, factory or step function"
    )
    assert doc["error"] == message
    assert err == f"leakscope: error: {message}\n"


def test_factory_returning_none() -> None:
    code, doc, _ = check(
        "fixtures.verl_bug:Engine",
        "--factory",
        "tests/data/factories.py:returns_none",
        "--mode",
        "train",
    )
    assert code == 3
    assert doc["results"][0]["error"] == (
        "fixtures.verl_bug:Engine(model) returned None; the factory must return the engine"
    )


def test_factory_that_raises() -> None:
    code, doc, _ = check(
        "fixtures.verl_bug:Engine",
        "--factory",
        "tests/data/factories.py:needs_gpu",
        "--mode",
        "train",
    )
    assert code == 3
    error = doc["results"][0]["error"]
    assert error.startswith(
        "building the engine fixtures.verl_bug:Engine(model) raised RuntimeError: this engine needs a GPU"
    )
    assert error.endswith("; make __init__ work with a small nn.Module, or pass --factory")
