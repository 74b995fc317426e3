"""The JSON report: leakscope's versioned, machine-readable contract (docs/json-report.md)."""

from __future__ import annotations

import json
from typing import Any

from leakscope.results import Finding, Report, TargetResult

SCHEMA_VERSION = 1


def finding_dict(finding: Finding) -> dict[str, Any]:
    """One finding as plain JSON data."""
    return {
        "path": finding.path,
        "holder": finding.holder,
        "grad_fn": finding.grad_fn,
        "graph_nodes": finding.graph_nodes,
        "retained_bytes": finding.retained_bytes,
        "confirmed": finding.confirmed,
        "hint": finding.hint,
        "cause": finding.cause,
        "bytes_by_cause": dict(finding.bytes_by_cause),
        "source": _source(finding.source),
        "severity": finding.severity,
        "allowed_reason": finding.allowed_reason,
        "kind": finding.kind,
        "stored_at": _source(finding.stored_at),
        "store_op": finding.store_op,
        "called_from": [_source(s) for s in finding.called_from],
    }


def _source(source: Any) -> dict[str, Any] | None:
    return {"file": source.file, "line": source.line, "function": source.function} if source else None


def projection_dict(p: Any) -> dict[str, Any]:
    """A ``Projection`` as plain JSON data."""
    return {
        "hidden": p.scale.hidden,
        "tokens": p.scale.tokens,
        "dtype": p.scale.dtype,
        "micro_batches": p.scale.micro_batches,
        "gpu_memory": p.scale.gpu_memory,
        "vocab": p.scale.vocab,
        "bytes_per_micro_batch": p.bytes_per_micro_batch,
        "bytes_per_update": p.bytes_per_update,
        "oom_micro_batch": p.oom_micro_batch,
        "coefficients": list(p.coefficients),
        "samples": [list(s) for s in p.samples],
        "layers": p.scale.layers,
        "batch": p.scale.batch,
        "bounded_bytes": p.bounded_bytes,
        "bounded_fits": p.bounded_fits,
        "terms": [
            {"cause": t.cause, "part": t.part, "monomial": t.monomial, "elements": t.elements,
             "element_bytes": t.element_bytes, "bytes": t.bytes, "text": str(t)}
            for t in p.terms
        ],
        "assumptions": list(p.assumptions),
        "fp32_share": dict(p.fp32_share),
    }


def result_dict(result: TargetResult, *, debug: bool = False) -> dict[str, Any]:
    """One target-and-mode result as plain JSON data."""
    out: dict[str, Any] = {
        "target": result.target,
        "mode": result.mode.value,
        "verdict": result.verdict.value,
        "error": result.error,
        "findings": [finding_dict(f) for f in result.findings],
        "retained_bytes": result.retained_bytes,
        "kind": result.kind,
        "settings": list(result.settings),
        "warnings": list(result.warnings),
    }
    if result.growth is not None:
        out["growth"] = {
            "retained_bytes": list(result.growth.retained_bytes),
            "slope_bytes": result.growth.slope_bytes,
            "cuda_allocated": list(result.growth.cuda_allocated) if result.growth.cuda_allocated else None,
        }
    if result.growth is not None:
        out["growth"].update({
            "graph_nodes": list(result.growth.graph_nodes),
            "nodes_by_micro_batch": list(result.growth.nodes_by_micro_batch),
            "storage_bytes": list(result.growth.storage_bytes),
            "storage_slope_bytes": result.growth.storage_slope_bytes,
        })
    if result.projection is not None:
        out["projection"] = projection_dict(result.projection)
    if result.rank is not None:
        out["rank"] = result.rank
    if debug and result.traceback:
        out["traceback"] = result.traceback
    return out


def report_dict(report: Report, *, debug: bool = False) -> dict[str, Any]:
    """The whole report as plain JSON data (schema_version 1)."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "leakscope_version": report.leakscope_version,
        "torch_version": report.torch_version,
        "python_version": report.python_version,
        "results": [result_dict(r, debug=debug) for r in report.results],
    }
    doc.update(report.extra)
    return doc


def render(report: Report, *, debug: bool = False, **_: Any) -> str:
    """The report as an indented JSON document with a trailing newline."""
    return json.dumps(report_dict(report, debug=debug), indent=2) + "\n"
