"""The JSON report: leakscope's versioned, machine-readable contract (docs/json-report.md)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from leakscope.errors import UsageError
from leakscope.holders import printed
from leakscope.results import Finding, GraphView, Report, TargetResult
from leakscope.serialize import TYPE_KEY, from_data

SCHEMA_VERSION = 1


def finding_dict(finding: Finding) -> dict[str, Any]:
    """One finding as plain JSON data."""
    out: dict[str, Any] = {
        "path": str(finding.path),
        "holder": finding.holder.value,
        "grad_fn": finding.grad_fn,
        "graph_nodes": finding.graph_nodes,
        "retained_bytes": finding.retained_bytes,
        "confirmed": finding.confirmed,
        "hint": finding.hint,
        "cause": finding.cause.value,
        "bytes_by_cause": dict(finding.bytes_by_cause),
        "source": _source(finding.source),
        "severity": finding.severity,
        "allowed_reason": finding.allowed_reason,
        "kind": finding.kind,
        "stored_at": _source(finding.stored_at),
        "store_op": finding.store_op,
        "called_from": [_source(s) for s in finding.called_from],
        "node_cost": finding.node_cost,
        "edit": dataclasses.asdict(finding.edit) if finding.edit is not None else None,
    }
    if finding.graph is not None:
        out["graph"] = graph_dict(finding.graph)
    return out


def graph_dict(view: GraphView) -> dict[str, Any]:
    """A finding's bounded retained graph as plain JSON data (its result names target and mode)."""
    return {
        "root": view.root,
        "total_nodes": view.total_nodes,
        "truncated": view.truncated,
        "nodes": [
            {
                "id": node.id,
                "name": node.name,
                "slots": [
                    {"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "nbytes": s.nbytes} for s in node.slots
                ],
                "children": list(node.children),
            }
            for node in view.nodes
        ],
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
    if result.keys_read:
        out["keys_read"] = list(result.keys_read)
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
    if report.watch is not None:  # leakscope watch: what was watched (docs/watch.md)
        doc["watch"] = {
            "methods": list(report.watch.methods),
            "calls": [dict(c) for c in report.watch.calls],
            "processes": list(report.watch.processes),
            "skip": report.watch.skip,
            "micro_batches": report.watch.micro_batches,
        }
    return doc


def render(report: Report, *, debug: bool = False, **_: Any) -> str:
    """The report as an indented JSON document with a trailing newline."""
    return json.dumps(report_dict(report, debug=debug), indent=2) + "\n"


#: ``from_data`` of a field typed ``Any``: the class is the one the data names
_ANY: Any = Any


def load(text: str, name: str = "the report") -> Report:
    """The :class:`Report` a JSON document of this schema describes (``leakscope render``).

    The inverse of :func:`render` for everything the document carries; what it
    leaves out (tracebacks without ``--debug``, timings) stays at its default.
    Raises :class:`~leakscope.errors.UsageError` naming ``name`` for input that is
    not such a document.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{name} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "give a report written by: leakscope check --format json -o FILE"
        ) from None
    if not isinstance(doc, dict) or "schema_version" not in doc or not isinstance(doc.get("results"), list):
        raise UsageError(
            f"{name} is not a leakscope JSON report (no schema_version and results); "
            "give a report written by: leakscope check --format json -o FILE"
        )
    if doc["schema_version"] != SCHEMA_VERSION:
        raise UsageError(
            f"{name} has schema_version {doc['schema_version']!r}, this leakscope reads {SCHEMA_VERSION}; "
            "render it with the leakscope version that wrote it"
        )
    if doc.get("error") and not doc["results"]:
        raise UsageError(f"{name} records a run that failed before any target was checked: {doc['error']}")
    try:
        results = tuple(_result(r) for r in doc["results"])
        return Report(
            results=results,
            leakscope_version=str(doc.get("leakscope_version")),
            torch_version=str(doc.get("torch_version")),
            python_version=str(doc.get("python_version")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(
            f"{name} is not a valid leakscope JSON report ({type(exc).__name__}: {exc}); "
            "give a report written by: leakscope check --format json -o FILE"
        ) from None


def _result(data: Mapping[str, Any]) -> TargetResult:
    """One result: the dataclass fields come back by their type hints (``serialize.from_data``)."""
    data = dict(data)
    findings = []
    for f in data.pop("findings", []):
        f = dict(f)
        graph = f.pop("graph", None)
        # A saved report carries the documented string of each path, not its segments.
        finding = dataclasses.replace(from_data(Finding, {**f, "path": None}), path=printed(f["path"]))
        if graph is not None:
            view = from_data(GraphView, {
                **graph, "target": data["target"], "mode": data["mode"], "path": f["path"],
            })
            finding = dataclasses.replace(finding, graph=view)
        findings.append(finding)
    projection = data.pop("projection", None)
    result: TargetResult = from_data(TargetResult, data)
    if projection is not None:
        # The projection's class lives in the diagnosis stage: named, as the isolated check names it.
        scale = {k: projection[k] for k in ("hidden", "tokens", "dtype", "micro_batches", "gpu_memory", "vocab")}
        tagged = {
            TYPE_KEY: "leakscope.diagnose.projection:Projection",
            "scale": scale,
            **{k: v for k, v in projection.items() if k not in scale},
        }
        result = dataclasses.replace(result, projection=from_data(_ANY, tagged))
    return dataclasses.replace(result, findings=tuple(findings))
