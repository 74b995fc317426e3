"""SARIF 2.1.0 for code scanning: one result per finding, on the line that made the tensor.

A finding's location is :attr:`Finding.source`: the user line that created the
retaining tensor, or the engine's ``forward_step`` when no line is known. The
message ends with the fix hint. Allowed findings carry an ``external``
suppression with the allowlist reason (code scanning shows them as
suppressed); targets that could not be checked are tool execution
notifications, not results. Validated against the OASIS schema in
``tests/data/sarif-schema-2.1.0.json``.
"""

from __future__ import annotations

import hashlib
import json

from leakscope.render.escape import sarif_uri
from leakscope.render.summary import finding_message, label
from leakscope.results import Finding, Report, Severity, TargetResult, Verdict

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"

#: rule per holder kind: (id, name, short description, how to fix) — see docs/findings.md
RULES: dict[str, tuple[str, str, str, str]] = {
    "returned": (
        "returned",
        "ReturnedGraph",
        "forward_step returns a tensor still attached to the autograd graph",
        "Detach the returned tree after the loss is computed; compute logging-only values under torch.no_grad().",
    ),
    "engine attribute": (
        "engine-attribute",
        "EngineAttributeGraph",
        "the engine stores an attached tensor on itself",
        "Store value.detach() (or .item() for scalars); accumulate loss.detach().",
    ),
    "micro-batch": (
        "micro-batch",
        "MicroBatchGraph",
        "forward_step writes an attached tensor into the micro-batch",
        "Write only detached tensors into the micro-batch.",
    ),
    "model attribute": (
        "model-attribute",
        "ModelAttributeGraph",
        "the model keeps an attached tensor as an attribute",
        "Keep only detached tensors on the model.",
    ),
    "model hook": (
        "model-hook",
        "ModelHookGraph",
        "a forward hook stores an attached tensor",
        "Detach inside the hook before storing, or run it under torch.no_grad().",
    ),
    "module global": (
        "module-global",
        "ModuleGlobalGraph",
        "module-level state holds an attached tensor",
        "Module-level state must hold detached tensors.",
    ),
    "not found": (
        "unknown-holder",
        "UnknownHolderGraph",
        "the step's graph stays alive but no holder was found among the caller's objects",
        "Look for C++ hooks, closures in other modules or thread-locals that store step tensors.",
    ),
    "cycle": (
        "reference-cycle",
        "ReferenceCycleGraph",
        "the step's graph lives until the cyclic garbage collector runs",
        "Break the reference cycle that holds the graph.",
    ),
    "storage growth": (
        "storage-growth",
        "StorageGrowth",
        "a container grows by detached tensors every micro-batch (no graph, but unbounded)",
        "Bound the container (a deque with maxlen, clear it per batch) or keep scalars (.item()).",
    ),
}
_OTHER = (
    "graph-retention",
    "GraphRetention",
    "the step's autograd graph is kept alive",
    "Detach what is kept.",
)
_WARNING_RULES = ("reference-cycle", "storage-growth")
_LEVEL = {"leak": "error", "warning": "warning", "allowed": "note"}


def _rule(finding: Finding) -> tuple[str, str, str, str]:
    return RULES.get(finding.holder.value, _OTHER)


def _rule_dict(rule: tuple[str, str, str, str], level: str) -> dict[str, object]:
    rule_id, name, short, fix = rule
    return {
        "id": rule_id,
        "name": name,
        "shortDescription": {"text": short},
        "fullDescription": {
            "text": f"{short}: every micro-batch's graph stays in memory until the caller lets go."
        },
        "help": {"text": f"{fix} See docs/findings.md in the leakscope documentation."},
        "defaultConfiguration": {"level": level},
    }


def artifact_location(file: str) -> dict[str, object]:
    """A relative path under ``%SRCROOT%`` (what code scanning resolves), else a file URI; percent-encoded."""
    uri = sarif_uri(file)
    return {"uri": uri} if uri.startswith("file:") else {"uri": uri, "uriBaseId": "%SRCROOT%"}


def _fingerprint(result: TargetResult, finding: Finding) -> str:
    key = f"{result.target}\0{result.mode.value}\0{finding.path}"
    if result.settings:
        key += "\0" + ",".join(result.settings)
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[
        :32
    ]  # any string a report holds


def _result(result: TargetResult, finding: Finding, rule_index: int) -> dict[str, object]:
    locations: list[dict[str, object]] = []
    out: dict[str, object] = {
        "ruleId": _rule(finding)[0],
        "ruleIndex": rule_index,
        "level": _LEVEL.get(finding.severity, "error"),
        "message": {"text": finding_message(result, finding)},
        "locations": locations,
        "partialFingerprints": {"leakscopeFinding/v1": _fingerprint(result, finding)},
        "properties": {
            "target": result.target,
            "mode": result.mode.value,
            "settings": list(result.settings),
            "path": str(finding.path),
            "holder": finding.holder.value,
            "gradFn": finding.grad_fn,
            "cause": finding.cause.value,
            "retainedBytes": finding.retained_bytes,
            "bytesByCause": dict(finding.bytes_by_cause),
            "graphNodes": finding.graph_nodes,
            "confirmed": finding.confirmed,
            "kind": finding.kind,
        },
    }
    if finding.source is not None:
        locations.append(
            {
                "physicalLocation": {
                    "artifactLocation": artifact_location(finding.source.file),
                    "region": {"startLine": max(1, finding.source.line)},
                },
                "logicalLocations": [
                    {"fullyQualifiedName": f"{result.target}.{finding.source.function}"}
                ],
            }
        )
    fixes = sarif_fixes(finding)
    if fixes:
        out["fixes"] = fixes
    if finding.severity is Severity.ALLOWED:
        out["suppressions"] = [{"kind": "external", "justification": finding.allowed_reason or ""}]
    return out


def sarif_fixes(finding: Finding) -> list[dict[str, object]]:
    """The finding's edit as a SARIF fix, when ``leakscope fix`` verified it (never a suggestion it could
    not prove): the line's text from the edit's column is replaced by the new text. Columns count
    Unicode code points (the run's ``columnKind``)."""
    edit = finding.edit
    if edit is None or not edit.verified:
        return []
    return [
        {
            "description": {"text": f"{edit.proof or 'verified by leakscope fix'}"},
            "artifactChanges": [
                {
                    "artifactLocation": artifact_location(edit.file),
                    "replacements": [
                        {
                            "deletedRegion": {
                                "startLine": edit.line,
                                "startColumn": edit.column,
                                "endLine": edit.line,
                                "endColumn": edit.column + len(edit.before),
                            },
                            "insertedContent": {
                                "text": edit.after.replace("\n", "\n" + " " * (edit.column - 1))
                            },
                        }
                    ],
                }
            ],
        }
    ]


def sarif_dict(report: Report) -> dict[str, object]:
    """The report as a SARIF 2.1.0 log (plain JSON data)."""
    rules: list[dict[str, object]] = []
    rule_index: dict[str, int] = {}
    results = []
    notifications = []
    for result in report.results:
        if result.verdict is Verdict.ERROR:
            notifications.append(
                {"level": "error", "message": {"text": f"{label(result)}: {result.error}"}}
            )
        for warning in result.warnings:
            notifications.append(
                {"level": "warning", "message": {"text": f"{label(result)}: {warning}"}}
            )
        for finding in result.findings:
            rule = _rule(finding)
            if rule[0] not in rule_index:
                rule_index[rule[0]] = len(rules)
                rules.append(_rule_dict(rule, "warning" if rule[0] in _WARNING_RULES else "error"))
            results.append(_result(result, finding, rule_index[rule[0]]))
    invocation: dict[str, object] = {
        "executionSuccessful": not any(r.verdict is Verdict.ERROR for r in report.results),
    }
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "leakscope",
                        "version": report.leakscope_version,
                        "semanticVersion": report.leakscope_version,
                        "rules": rules,
                    }
                },
                "invocations": [invocation],
                "columnKind": "unicodeCodePoints",
                "results": results,
                "properties": {
                    "torchVersion": report.torch_version,
                    "pythonVersion": report.python_version,
                },
            }
        ],
    }


def render(report: Report, **_: object) -> str:
    """The report as an indented SARIF 2.1.0 JSON document with a trailing newline."""
    return json.dumps(sarif_dict(report), indent=2) + "\n"
