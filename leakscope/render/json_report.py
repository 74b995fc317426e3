"""The JSON report: leakscope's versioned, machine-readable contract (docs/json-report.md)."""

from __future__ import annotations

import dataclasses
import json
from importlib.resources import files
from typing import Any

from leakscope.errors import UsageError
from leakscope.holders import printed
from leakscope.results import (
    Finding,
    GraphView,
    Report,
    Snippet,
    Source,
    TargetResult,
    WatchSummary,
)
from leakscope.serialize import SchemaError, from_data, value_from_data

SCHEMA_VERSION = 1


def schema() -> dict[str, object]:
    """The report's JSON Schema (draft 2020-12), shipped beside this module as
    ``report.schema.json`` and generated from :mod:`leakscope.results` by docs/gen_schema.py."""

    loaded: dict[str, object] = json.loads(
        files("leakscope.render").joinpath("report.schema.json").read_text(encoding="utf-8")
    )
    return loaded


def finding_dict(finding: Finding) -> dict[str, object]:
    """One finding as plain JSON data."""
    out: dict[str, object] = {
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
    if finding.snippets:
        out["snippets"] = [snippet_dict(s) for s in finding.snippets]
    return out


def snippet_dict(snippet: Snippet) -> dict[str, object]:
    """The lines around a finding's ``source`` or ``stored_at``, captured when the check ran."""
    return {
        "file": snippet.file,
        "line": snippet.line,
        "first_line": snippet.first_line,
        "lines": list(snippet.lines),
    }


def graph_dict(view: GraphView) -> dict[str, object]:
    """A finding's bounded retained graph as plain JSON data (its result names target and mode)."""
    return {
        "root": view.root,
        "total_nodes": view.total_nodes,
        "graph_nodes": view.graph_nodes,
        "truncated": view.truncated,
        "nodes": [
            {
                "id": node.id,
                "name": node.name,
                "slots": [
                    {"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "nbytes": s.nbytes}
                    for s in node.slots
                ],
                "children": list(node.children),
            }
            for node in view.nodes
        ],
    }


def view_json(view: GraphView) -> str:
    """``leakscope explain --format json``: one finding's graph as a JSON document (its ``graph`` as
    in the report, with the target, mode and path it belongs to, and the paths there are)."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "target": view.target,
        "mode": view.mode,
        "path": view.path,
        "paths": list(view.paths),
        "graph": graph_dict(view),
    }
    return json.dumps(doc, indent=2) + "\n"


def _source(source: Source | None) -> dict[str, object] | None:
    return (
        {"file": source.file, "line": source.line, "function": source.function} if source else None
    )


def projection_dict(p: Any) -> dict[str, object]:
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
            {
                "cause": t.cause,
                "part": t.part,
                "monomial": t.monomial,
                "elements": t.elements,
                "element_bytes": t.element_bytes,
                "bytes": t.bytes,
                "text": str(t),
            }
            for t in p.terms
        ],
        "assumptions": list(p.assumptions),
        "fp32_share": dict(p.fp32_share),
    }


def result_dict(result: TargetResult, *, debug: bool = False) -> dict[str, object]:
    """One target-and-mode result as plain JSON data."""
    out: dict[str, object] = {
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
        growth: dict[str, object] = {
            "retained_bytes": list(result.growth.retained_bytes),
            "slope_bytes": result.growth.slope_bytes,
            "cuda_allocated": list(result.growth.cuda_allocated)
            if result.growth.cuda_allocated
            else None,
        }
        out["growth"] = growth
        growth.update(
            {
                "graph_nodes": list(result.growth.graph_nodes),
                "nodes_by_micro_batch": list(result.growth.nodes_by_micro_batch),
                "storage_bytes": list(result.growth.storage_bytes),
                "storage_slope_bytes": result.growth.storage_slope_bytes,
            }
        )
    if result.projection is not None:
        out["projection"] = projection_dict(result.projection)
    if result.keys_read:
        out["keys_read"] = list(result.keys_read)
    if result.rank is not None:
        out["rank"] = result.rank
    if debug and result.traceback:
        out["traceback"] = result.traceback
    return out


def report_dict(report: Report, *, debug: bool = False) -> dict[str, object]:
    """The whole report as plain JSON data (schema_version 1)."""
    doc: dict[str, object] = {
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
            "boundary": report.watch.boundary,
            "loop": report.watch.loop,
        }
    return doc


def render(report: Report, *, debug: bool = False, **_: object) -> str:
    """The report as an indented JSON document with a trailing newline."""
    return json.dumps(report_dict(report, debug=debug), indent=2) + "\n"


#: a report longer than this (in characters) is not read: real ones are kilobytes
MAX_REPORT_CHARS = 64 * 1024 * 1024
#: graph nodes (and children of one node) a saved report may describe per finding (40 are written)
MAX_GRAPH_NODES = 256
#: every integer in a report is a count, a size, a line or an id: never negative
_INTS = (0, 2**63 - 1)
_SEVERITIES = ("leak", "warning", "allowed")
_KINDS = (None, "growing", "bounded")
_FIX = "give a report written by: leakscope check --format json -o FILE"


def load(text: str, name: str = "the report") -> Report:
    """The :class:`Report` a JSON document of this schema describes (``leakscope render``).

    The inverse of :func:`render` for everything the document carries; what it
    leaves out (tracebacks without ``--debug``, timings) stays at its default.
    A report is untrusted data (docs/security.md): every field is checked for its
    type and range, nothing it names is imported or read, and anything else raises
    :class:`~leakscope.errors.UsageError` naming ``name`` and the first bad field, in one line.
    """
    if len(text) > MAX_REPORT_CHARS:
        raise UsageError(
            f"{name} is {len(text)} characters long, more than a leakscope report ({MAX_REPORT_CHARS}); {_FIX}"
        )
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{name} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); {_FIX}"
        ) from None
    except RecursionError:
        raise UsageError(f"{name} nests deeper than any leakscope report; {_FIX}") from None
    except ValueError as exc:  # NaN or Infinity, or an integer of thousands of digits
        raise UsageError(
            f"{name} is not a leakscope JSON report ({_one_line(exc)}); {_FIX}"
        ) from None
    if (
        not isinstance(doc, dict)
        or "schema_version" not in doc
        or not isinstance(doc.get("results"), list)
    ):
        raise UsageError(
            f"{name} is not a leakscope JSON report (no schema_version and results); {_FIX}"
        )
    version = doc["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        shown = (
            repr(version)
            if isinstance(version, (int, float, str)) and len(repr(version)) <= 24
            else "of another kind"
        )
        raise UsageError(
            f"{name} has schema_version {shown}, this leakscope reads {SCHEMA_VERSION}; "
            "render it with the leakscope version that wrote it"
        )
    try:
        if doc.get("error") is not None and not doc["results"]:
            error = _checked(str, doc["error"], "error")
            raise UsageError(
                f"{name} records a run that failed before any target was checked: {error}"
            )
        return _report(doc)
    except SchemaError as exc:
        raise UsageError(
            f"{name} is not a valid leakscope JSON report: {_one_line(exc)}; {_FIX}"
        ) from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:299] + "…"


def _checked(tp: object, value: object, where: str) -> Any:
    """``value`` checked against the type ``tp`` by ``serialize.from_data``'s rules."""
    return value_from_data(tp, value, ints=_INTS, where=where)


def _object(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise SchemaError(where, "is not an object")
    return value


def _list(value: object, where: str) -> list[object]:
    if not isinstance(value, list):
        raise SchemaError(where, "is not a list")
    return value


def _one_of(value: object, allowed: tuple[object, ...], where: str) -> None:
    if value not in allowed:
        shown = repr(value) if isinstance(value, str) and len(value) <= 40 else "another value"
        raise SchemaError(
            where,
            f"is {shown}, not one of {', '.join('null' if a is None else repr(a) for a in allowed)}",
        )


def _report(doc: dict[str, object]) -> Report:
    results = tuple(
        _result(_object(r, f"results[{i}]"), f"results[{i}]")
        for i, r in enumerate(_list(doc["results"], "results"))
    )
    watch = None
    if doc.get("watch") is not None:
        watch = from_data(WatchSummary, _object(doc["watch"], "watch"), ints=_INTS, where="watch")
    versions = {
        key: _checked(str | None, doc.get(key), key) or ""
        for key in ("leakscope_version", "torch_version", "python_version")
    }
    return Report(results=results, watch=watch, **versions)


def _result(data: dict[str, object], where: str) -> TargetResult:
    """One result, checked by the schema (``serialize.from_data``), its findings one by one."""
    data = dict(data)
    findings_data = _list(data.pop("findings", []), f"{where}.findings")
    projection = data.pop("projection", None)
    if projection is not None:
        data["projection"] = _projection(
            _object(projection, f"{where}.projection"), f"{where}.projection"
        )
    result: TargetResult = from_data(TargetResult, data, ints=_INTS, where=where)
    _one_of(result.kind, _KINDS, f"{where}.kind")
    findings = tuple(
        _finding(_object(f, f"{where}.findings[{j}]"), result, f"{where}.findings[{j}]")
        for j, f in enumerate(findings_data)
    )
    return dataclasses.replace(result, findings=findings)


def _finding(data: dict[str, object], result: TargetResult, where: str) -> Finding:
    data = dict(data)
    path = _checked(str, data.get("path"), f"{where}.path")
    graph = data.pop("graph", None)
    # A saved report carries the documented string of each path, not its segments (``holders.printed``).
    finding: Finding = from_data(Finding, {**data, "path": {"root": path}}, ints=_INTS, where=where)
    _one_of(finding.severity, _SEVERITIES, f"{where}.severity")
    _one_of(finding.kind, _KINDS, f"{where}.kind")
    if graph is not None:
        graph = _object(graph, f"{where}.graph")
        nodes = _list(graph.get("nodes", []), f"{where}.graph.nodes")
        if len(nodes) > MAX_GRAPH_NODES:
            raise SchemaError(
                f"{where}.graph.nodes", f"has {len(nodes)} nodes, more than {MAX_GRAPH_NODES}"
            )
        view: GraphView = from_data(
            GraphView,
            {**graph, "target": result.target, "mode": result.mode.value, "path": path},
            ints=_INTS,
            where=f"{where}.graph",
        )
        for k, node in enumerate(view.nodes):
            if len(node.children) > MAX_GRAPH_NODES:
                raise SchemaError(
                    f"{where}.graph.nodes[{k}].children",
                    f"has {len(node.children)} ids, more than {MAX_GRAPH_NODES}",
                )
        finding = dataclasses.replace(finding, graph=view)
    return dataclasses.replace(finding, path=printed(path))


def _projection(data: dict[str, object], where: str) -> dict[str, object]:
    """The JSON report's flat projection in the shape of ``Projection`` (its ``scale`` nested)."""
    scale_keys = (
        "hidden",
        "tokens",
        "dtype",
        "micro_batches",
        "gpu_memory",
        "vocab",
        "layers",
        "batch",
    )
    out = {k: v for k, v in data.items() if k not in scale_keys}
    out["scale"] = {k: data[k] for k in scale_keys if k in data}
    shares = data.get("fp32_share")
    if isinstance(shares, dict):
        out["fp32_share"] = [[cause, share] for cause, share in shares.items()]
    terms = data.get("terms")
    if isinstance(terms, list):
        for i, term in enumerate(terms):
            at = f"{where}.terms[{i}]"
            _one_of(_object(term, at).get("part"), ("growing", "bounded"), f"{at}.part")
    return out
