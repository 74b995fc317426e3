"""What fails the gate: the allowlist and ``--fail-on`` (pure functions over results; no torch).

Detection decides what is retained; policy decides what a project accepts. An
allowlisted finding stays in the report with ``severity=Severity.ALLOWED`` and its
reason, so a deliberate case is visible in every format instead of hidden.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from leakscope.errors import ExitCode
from leakscope.results import Finding, Report, Severity, TargetResult, Verdict


class FailOn(str, enum.Enum):
    """``--fail-on`` / ``fail-on``: the least severe finding that fails the gate."""

    LEAK = "leak"
    WARNING = "warning"


#: the values of :class:`FailOn`, as the configuration and the CLI spell them
FAIL_ON = tuple(f.value for f in FailOn)


@dataclasses.dataclass(frozen=True)
class AllowEntry:
    """A reference a project keeps attached on purpose, and why.

    ``path`` is a finding path exactly as reported (``output.model_output.log_probs``);
    a trailing ``*`` matches that path and every path below it, by whole
    segments (``engine.history*`` covers ``engine.history[0].loss``, not
    ``engine.history_old``). ``target`` and ``mode``, when set, limit the entry
    to one target string and one mode.
    """

    path: str
    reason: str
    target: str | None = None
    mode: str | None = None

    def matches(self, result: TargetResult, finding: Finding) -> bool:
        """True when this entry covers ``finding`` of ``result``."""
        if self.target is not None and self.target != result.target:
            return False
        if self.mode is not None and self.mode != result.mode.value:
            return False
        if self.path.endswith("*"):
            return finding.path.within(self.path[:-1])
        return str(finding.path) == self.path


def allow_result(result: TargetResult, allowlist: Sequence[AllowEntry]) -> TargetResult:
    """``result`` with allowlisted findings marked ``allowed``; a leak left with none is clean."""
    if not allowlist or not result.findings:
        return result
    findings = []
    changed = False
    for finding in result.findings:
        entry = next((e for e in allowlist if e.matches(result, finding)), None)
        if entry is not None and finding.severity is not Severity.ALLOWED:
            finding = dataclasses.replace(
                finding, severity=Severity.ALLOWED, allowed_reason=entry.reason
            )
            changed = True
        findings.append(finding)
    if not changed:
        return result
    out = dataclasses.replace(result, findings=tuple(findings))
    if result.verdict is Verdict.LEAK and not any(f.severity is Severity.LEAK for f in findings):
        # Same convention as the detector: a clean result reports 0 retained bytes.
        out = dataclasses.replace(out, verdict=Verdict.CLEAN, retained_bytes=0)
    return out


def has_warning(result: TargetResult) -> bool:
    """A warning finding (``until-gc``) or a warning line (a truncated walk)."""
    return bool(result.warnings) or any(f.severity is Severity.WARNING for f in result.findings)


def fails(result: TargetResult, fail_on: FailOn = FailOn.LEAK) -> bool:
    """Whether ``result`` fails a gate run with ``fail_on`` (errors always fail)."""
    if result.verdict in (Verdict.LEAK, Verdict.ERROR):
        return True
    return fail_on == FailOn.WARNING and has_warning(result)


def exit_code(report: Report, fail_on: FailOn = FailOn.LEAK) -> int:
    """0 pass, 1 a leak (or a warning under ``FailOn.WARNING``), 3 a target errored."""
    if fail_on not in FAIL_ON:  # a library caller's string: the enum's own values only
        raise ValueError(f"fail_on must be one of {FAIL_ON}, not {fail_on!r}")
    if any(r.verdict is Verdict.ERROR for r in report.results):
        return int(ExitCode.ERROR)
    if any(fails(r, fail_on) for r in report.results):
        return int(ExitCode.LEAK)
    return int(ExitCode.CLEAN)


__all__ = ["FAIL_ON", "AllowEntry", "FailOn", "allow_result", "exit_code", "fails", "has_warning"]
