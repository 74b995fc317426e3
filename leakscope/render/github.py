"""GitHub Actions workflow commands: findings as inline annotations on the pull request.

``::error`` for a leak, ``::warning`` for a warning, ``::notice`` for an allowed
finding, each at the line that created the retaining tensor; a target that
could not be checked is an ``::error`` without a file. The last line is the
plain summary. Escaping follows the runner's rules for workflow commands, and
control characters and escape codes are shown, not sent to the log
(:func:`~leakscope.render.escape.github_data`).
"""

from __future__ import annotations

from leakscope.policy import FailOn, exit_code
from leakscope.render.escape import github_data, github_property, terminal
from leakscope.render.summary import edit_lines, finding_message, label, report_line
from leakscope.results import Finding, Report, Severity, TargetResult, Verdict

_COMMAND = {"leak": "error", "warning": "warning", "allowed": "notice"}


def command(name: str, message: str, **properties: str | int) -> str:
    """``::name key=value,...::message`` with both parts escaped (:mod:`leakscope.render.escape`)."""
    props = ",".join(f"{k}={github_property(v)}" for k, v in properties.items())
    return (
        f"::{name} {props}::{github_data(message)}"
        if props
        else f"::{name}::{github_data(message)}"
    )


def _annotation(finding: Finding, message: str) -> str:
    name = _COMMAND.get(finding.severity, "error")
    title = f"leakscope {finding.holder}" + (
        " (allowed)" if finding.severity is Severity.ALLOWED else ""
    )
    if finding.source is None:
        return command(name, message, title=title)
    return command(
        name, message, file=finding.source.file, line=max(1, finding.source.line), title=title
    )


def suggestion(result: TargetResult, finding: Finding) -> str:
    """A verified edit as a ``::notice`` on the line it rewrites, whose message is a ``suggestion``
    block (the line as it will read) a reviewer can commit; "" when the edit is not verified."""
    edit = finding.edit
    if edit is None or not edit.verified:
        return ""
    _, after = edit_lines(edit)
    message = (
        f"{label(result)}: verified fix for {finding.path}: {edit.proof or 'verified by leakscope fix'}\n"
        f"```suggestion\n{after}\n```"
    )
    return command(
        "notice", message, file=edit.file, line=edit.line, title="leakscope verified fix"
    )


def render(report: Report, *, fail_on: FailOn = FailOn.LEAK, **_: object) -> str:
    """One workflow command per finding, error and warning, then the summary line."""
    lines = []
    for result in report.results:
        if result.verdict is Verdict.ERROR:
            lines.append(
                command("error", f"{label(result)}: {result.error}", title="leakscope error")
            )
        for finding in result.findings:
            lines.append(_annotation(finding, finding_message(result, finding)))
            suggested = suggestion(result, finding)
            if suggested:
                lines.append(suggested)
        for warning in result.warnings:
            lines.append(
                command("warning", f"{label(result)}: {warning}", title="leakscope warning")
            )
    lines.append(terminal(report_line(report, exit_code(report, fail_on), fail_on)))
    return "\n".join(lines) + "\n"
