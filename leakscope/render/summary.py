"""One-line summaries shared by the CI formats and the pytest plugin (pure strings).

Every format says the same thing in the same words: a reader who saw the
pytest failure recognises the JUnit message, the SARIF result and the
pull-request annotation.
"""

from __future__ import annotations

from leakscope.render.text import human_bytes
from leakscope.results import Finding, Holder, Report, TargetResult, Verdict


def label(result: TargetResult) -> str:
    """``pkg.mod:Engine [train]``."""
    return f"{result.target} [{result.mode.value}]"


def finding_line(finding: Finding) -> str:
    """What one finding retains, in one line (no fix hint)."""
    size = human_bytes(finding.retained_bytes)
    if finding.holder is Holder.STORAGE_GROWTH:
        return (
            f"{finding.path} (storage growth) grows by about {size} per micro-batch of tensors "
            "without a graph (not a graph leak, but unbounded)"
        )
    what = {
        "leak": "keeps this step's autograd graph alive",
        "warning": "keeps this step's autograd graph alive until the cyclic garbage collector runs",
        "allowed": "keeps this step's autograd graph alive (allowed)",
    }.get(finding.severity, "keeps this step's autograd graph alive")
    return f"{finding.path} ({finding.holder}, {finding.grad_fn}) {what}: {size}, cause {finding.cause}"


def finding_block(finding: Finding) -> str:
    """A finding in a few indented lines: what, where it was created, the fix."""
    lines = [f"  {finding_line(finding)}"]
    if finding.source:
        lines.append(f"    created at {finding.source}")
    if finding.allowed_reason:
        lines.append(f"    allowed: {finding.allowed_reason}")
    lines.append(f"    fix: {finding.hint}")
    return "\n".join(lines)


def result_detail(result: TargetResult) -> str:
    """:func:`result_line` followed by every finding and warning of the result."""
    lines = [result_line(result)]
    lines.extend(finding_block(f) for f in result.findings)
    lines.extend(f"  warning: {w}" for w in result.warnings)
    return "\n".join(lines)


def finding_message(result: TargetResult, finding: Finding) -> str:
    """A finding as an annotation message: where, what, and the fix."""
    text = f"{label(result)}: {finding_line(finding)}. Fix: {finding.hint}"
    if finding.allowed_reason:
        text += f". Allowed: {finding.allowed_reason}"
    return text


def result_line(result: TargetResult) -> str:
    """The verdict of one target and mode in one line."""
    if result.verdict is Verdict.ERROR:
        return f"{label(result)}: error: {result.error}"
    leaks = [f for f in result.findings if f.severity == "leak"]
    extras = []
    allowed = sum(1 for f in result.findings if f.severity == "allowed")
    warned = sum(1 for f in result.findings if f.severity == "warning") + len(result.warnings)
    if allowed:
        extras.append(f"{allowed} allowed")
    if warned:
        extras.append(f"{warned} warning{'s' if warned != 1 else ''}")
    tail = f" ({', '.join(extras)})" if extras else ""
    if result.verdict is Verdict.CLEAN:
        return f"{label(result)}: clean{tail}"
    paths = ", ".join(str(f.path) for f in leaks) or "no named holder"
    count = f"{len(leaks)} reference{'s' if len(leaks) != 1 else ''}"
    return (
        f"{label(result)}: graph retained by {count}, {human_bytes(result.retained_bytes)} "
        f"per micro-batch: {paths}{tail}"
    )


def report_line(report: Report, exit_code: int) -> str:
    """``leakscope: 1 leak, 1 clean, 0 error (exit 1)``."""
    counts = {v: sum(1 for r in report.results if r.verdict is v) for v in Verdict}
    return (
        f"leakscope: {counts[Verdict.LEAK]} leak, {counts[Verdict.CLEAN]} clean, "
        f"{counts[Verdict.ERROR]} error (exit {exit_code})"
    )


__all__ = ["finding_block", "finding_line", "result_detail", "finding_message", "label", "report_line", "result_line"]
