"""JUnit XML: one ``<testcase>`` per target and mode, for CI test-report views.

A leak is a ``<failure>``, a target that could not be checked an ``<error>``;
allowed findings and warnings go to ``<system-out>`` so they stay visible.
With ``fail_on="warning"`` a warning is a failure too, matching the exit code.
Every string passes :func:`~leakscope.render.escape.xml` (a NUL or an escape code in
an engine's message cannot make the document unparseable); tracebacks are not
part of it (``--debug`` writes them to stderr).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from leakscope.policy import FailOn, fails, has_warning
from leakscope.render.escape import xml
from leakscope.render.summary import result_detail, result_line
from leakscope.results import Report, TargetResult, Verdict


def _name(result: TargetResult) -> str:
    """The mode, and the adapter settings when a target is checked with several."""
    return result.mode.value + (f" [{', '.join(result.settings)}]" if result.settings else "")


def _element(
    parent: ET.Element, tag: str, attrs: dict[str, str] | None = None, text: str | None = None
) -> ET.Element:
    """A child element whose attribute values and text are XML-safe (ElementTree escapes ``<&"``)."""
    element = ET.SubElement(parent, tag, {k: xml(v) for k, v in (attrs or {}).items()})
    if text is not None:
        element.text = xml(text)
    return element


def render(report: Report, *, fail_on: FailOn = FailOn.LEAK, **_: object) -> str:
    """The report as a JUnit XML document with a trailing newline."""
    results = report.results
    failures = sum(1 for r in results if r.verdict is not Verdict.ERROR and fails(r, fail_on))
    errors = sum(1 for r in results if r.verdict is Verdict.ERROR)
    seconds = f"{sum(r.seconds for r in results):.3f}"
    counts = {"tests": str(len(results)), "failures": str(failures), "errors": str(errors)}
    root = ET.Element("testsuites", {"name": "leakscope", **counts, "time": seconds})
    suite = _element(
        root, "testsuite", {"name": "leakscope", **counts, "skipped": "0", "time": seconds}
    )
    properties = _element(suite, "properties")
    for name, value in (
        ("leakscope_version", report.leakscope_version),
        ("torch_version", report.torch_version),
        ("python_version", report.python_version),
    ):
        _element(properties, "property", {"name": name, "value": value})
    for result in results:
        case = _element(
            suite,
            "testcase",
            {"classname": result.target, "name": _name(result), "time": f"{result.seconds:.3f}"},
        )
        detail = result_detail(result, fail_on)
        message = result_line(result, fail_on)
        if result.verdict is Verdict.ERROR:
            _element(case, "error", {"message": message, "type": "error"}, detail)
        elif fails(result, fail_on):
            kind = "leak" if result.verdict is Verdict.LEAK else "warning"
            _element(case, "failure", {"message": message, "type": kind}, detail)
        elif result.findings or has_warning(result):
            _element(case, "system-out", text=detail)
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n"
