"""pytest plugin: fail a test when an engine keeps its step's autograd graph alive.

Registered through the ``pytest11`` entry point, so it loads in every pytest
session of everyone who installs leakscope: it imports neither torch nor
tensordict here (the check imports them when it runs).

Three ways in, one code path (:func:`assert_no_graph_retention`):

- the ``leakscope`` fixture: ``leakscope.check("pkg.mod:Engine", mode="train")``;
- the helper itself: ``assert_no_graph_retention(Engine, model="full-finetune")``;
- the marker: ``@pytest.mark.leakscope(target="pkg.mod:Engine", mode="both")``,
  checked after the test body passes.

Options are the CLI's (``mode``, ``model``, ``factory``, ``confirm``,
``fail_on``, ``allowlist``, ...) and default to the ``[tool.leakscope]`` table
of the rootdir's ``pyproject.toml``. A leak fails the test through pytest's own
failure report (the one-line summary and every finding, so ``--junit-xml``
carries it) and adds the full text report as a ``leakscope`` report section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from leakscope import config as project_config
from leakscope.errors import LeakscopeError
from leakscope.policy import exit_code
from leakscope.render import render
from leakscope.render.escape import terminal

if TYPE_CHECKING:
    from leakscope.results import Report

MARKER = "leakscope"


@dataclasses.dataclass
class _Session:
    """Per-session state: the project's settings, read once on first use."""

    rootpath: Path
    settings: project_config.Settings | None = None

    def project(self) -> project_config.Settings:
        if self.settings is None:
            self.settings = project_config.discover(cwd=self.rootpath)
        return self.settings


_SESSION = pytest.StashKey[_Session]()


def _settings(
    options: Mapping[str, object], where: str, project: project_config.Settings | None
) -> project_config.Settings:
    given = project_config.parse(options, where)
    return (project or project_config.Settings()).override(given)


def assert_no_graph_retention(
    target: object,
    /,
    *,
    item: pytest.Item | None = None,
    project: project_config.Settings | None = None,
    **options: object,
) -> Report:
    """Check ``target`` (a ``pkg.mod:Name`` string or the object) and fail the test on a leak.

    ``options`` are the CLI's, by keyword (``mode="train"``, ``fail_on="warning"``,
    ``allowlist=[{"path": ..., "reason": ...}]``). ``item``, when given, receives
    the text report as a ``leakscope`` section; ``project`` supplies defaults.
    Returns the :class:`~leakscope.results.Report` when the gate passes.
    """
    __tracebackhide__ = True
    from leakscope.api import check
    from leakscope.render.summary import report_line, result_detail

    try:
        settings = _settings(options, f"leakscope options for {_name(target)}", project)
        report = check(target, settings.check_options())
    except LeakscopeError as exc:
        pytest.fail(f"leakscope: error: {exc.message}", pytrace=False)
    code = exit_code(report, settings.effective_fail_on)
    if item is not None:
        item.add_report_section(
            "call", MARKER, render(report, "text", fail_on=settings.effective_fail_on)
        )
    if (
        code != 0
    ):  # the words of the CI formats, under the same gate; engine strings shown, not sent
        fail_on = settings.effective_fail_on
        details = "\n".join(result_detail(r, fail_on) for r in report.results)
        pytest.fail(
            terminal(f"{report_line(report, code, fail_on)}\n{details}", newlines=True),
            pytrace=False,
        )
    return report


def _name(target: object) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, (list, tuple)):
        return ", ".join(_name(t) for t in target)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', type(target).__name__)}"


class LeakscopeFixture:
    """What the ``leakscope`` fixture returns: ``check`` runs and gates one target."""

    def __init__(self, item: pytest.Item, session: _Session) -> None:
        self._item = item
        self._session = session

    def check(self, target: object, **options: object) -> Report:
        """:func:`assert_no_graph_retention` for this test, with the project's settings as defaults."""
        __tracebackhide__ = True
        try:
            project = self._session.project()
        except LeakscopeError as exc:
            pytest.fail(f"leakscope: error: {exc.message}", pytrace=False)
        return assert_no_graph_retention(target, item=self._item, project=project, **options)


@pytest.fixture
def leakscope(request: pytest.FixtureRequest) -> LeakscopeFixture:
    """Check engines inside a test: ``leakscope.check("pkg.mod:Engine", mode="train")``."""
    return LeakscopeFixture(request.node, request.config.stash[_SESSION])


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker and the session state."""
    config.addinivalue_line(
        "markers",
        "leakscope(target=None, **options): after the test passes, check target (default: the "
        "[tool.leakscope] targets) for autograd-graph retention and fail on a leak",
    )
    config.stash[_SESSION] = _Session(config.rootpath)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """Run a ``@pytest.mark.leakscope`` check once the test body has passed."""
    result = yield
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        _check_marker(item, marker)
    return result


def _check_marker(item: pytest.Item, marker: pytest.Mark) -> None:
    __tracebackhide__ = True
    options = dict(marker.kwargs)
    targets = list(marker.args)
    for key in ("target", "targets"):
        value = options.pop(key, None)
        if value is not None:
            targets.extend([value] if isinstance(value, str) else value)
    try:
        project = item.config.stash[_SESSION].project()
    except LeakscopeError as exc:
        pytest.fail(f"leakscope: error: {exc.message}", pytrace=False)
    targets = targets or list(project.targets)
    if not targets:
        pytest.fail(
            "leakscope: error: @pytest.mark.leakscope needs target='pkg.mod:Engine' "
            "(or targets in [tool.leakscope])",
            pytrace=False,
        )
    assert_no_graph_retention(targets, item=item, project=project, **options)
