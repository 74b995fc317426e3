"""Generate the JSON report's JSON Schema from the result dataclasses.

    python docs/gen_schema.py           # rewrite leakscope/render/report.schema.json
    python docs/gen_schema.py --check   # exit 1 when the shipped schema is not the generated one

Each object of the report (``leakscope.render.json_report``) is a result dataclass's fields,
typed from the dataclass's annotations; :data:`SHAPES` lists, per dataclass, what the JSON
writer leaves out, renames, adds or writes only sometimes, so the schema and the writer stay one
story (``tests/test_report_schema.py`` validates every report the suite writes against it).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "leakscope" / "render" / "report.schema.json"


@dataclasses.dataclass(frozen=True)
class Shape:
    """How one dataclass is written: fields left out, fields written only sometimes, and extra keys."""

    exclude: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    #: field -> schema, replacing the one its annotation gives
    override: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: keys the writer adds, and whether each is always written
    extra: dict[str, tuple[Any, bool]] = dataclasses.field(default_factory=dict)


def _shapes() -> dict[type, Shape]:
    from leakscope.diagnose.projection import Projection, Scale, Term
    from leakscope.render.json_report import SCHEMA_VERSION
    from leakscope.results import (
        Finding,
        GraphView,
        Growth,
        Report,
        TargetResult,
        WatchSummary,
    )

    text = {"type": "string"}
    return {
        Report: Shape(
            optional=("watch",),
            override={"torch_version": {"type": ["string", "null"]}},
            extra={
                "schema_version": ({"const": SCHEMA_VERSION}, True),
                # a run that failed before any target was checked: the error, and no results
                "error": ({"type": "string"}, False),
            },
        ),
        TargetResult: Shape(
            exclude=("seconds",),
            optional=("growth", "projection", "keys_read", "rank", "traceback"),
            override={"projection": {"$ref": "#/$defs/Projection"}},
        ),
        Finding: Shape(optional=("graph", "snippets"), override={"path": text}),
        Growth: Shape(exclude=("retained_by_cause",)),
        # a finding's graph: its result names the target and mode, the finding the path
        GraphView: Shape(exclude=("target", "mode", "path", "paths")),
        WatchSummary: Shape(
            override={"calls": {"type": "array", "items": {"type": "object"}}},
        ),
        # each term also in words: "leaf+grad: 2 x tokens x hidden x 2 B"
        Term: Shape(extra={"text": (text, True)}),
        # the projection is written flat: its scale's fields beside its own
        Projection: Shape(
            exclude=("scale",),
            override={
                "fp32_share": {"type": "object", "additionalProperties": {"type": "number"}},
            },
            extra={
                name: (schema, True)
                for name, schema in _fields_schema(Scale, Shape(exclude=("given",)))[0].items()
            },
        ),
    }


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one annotation."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return {}
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a, defs) for a in args if a is not type(None)]
        nullable = type(None) in args
        if len(options) == 1 and set(options[0]) == {"type"} and nullable:
            kinds = options[0]["type"]
            return {"type": [*(kinds if isinstance(kinds, list) else [kinds]), "null"]}
        if nullable:
            options.append({"type": "null"})
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0], defs)}
        return {
            "type": "array",
            "prefixItems": [_type_schema(a, defs) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin in (collections.abc.Mapping, dict):
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        _define(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if getattr(tp, "__name__", "") == "HolderPath":
        return {"type": "string"}
    raise TypeError(f"no JSON schema for {tp!r}; add it to docs/gen_schema.py")


def _fields_schema(
    cls: type, shape: Shape, defs: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    defs = {} if defs is None else defs
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(cls):
        if field.name in shape.exclude:
            continue
        schema = shape.override.get(field.name)
        properties[field.name] = (
            schema if schema is not None else _type_schema(hints[field.name], defs)
        )
        if field.name not in shape.optional:
            required.append(field.name)
    for name, (schema, always) in shape.extra.items():
        properties[name] = schema
        if always:
            required.append(name)
    return properties, required


def _define(cls: type, defs: dict[str, Any]) -> None:
    if cls.__name__ in defs:
        return
    defs[cls.__name__] = {}  # placeholder: a recursive reference stops here
    shape = SHAPES.get(cls, Shape())
    properties, required = _fields_schema(cls, shape, defs)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    defs[cls.__name__] = {
        "description": doc,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


SHAPES: dict[type, Shape] = {}


def schema() -> dict[str, Any]:
    """The report's JSON Schema (draft 2020-12), from the result dataclasses."""
    from leakscope.diagnose.projection import Projection
    from leakscope.render.json_report import SCHEMA_VERSION
    from leakscope.results import Report

    SHAPES.clear()
    SHAPES.update(_shapes())
    defs: dict[str, Any] = {}
    _define(Projection, defs)
    _define(Report, defs)
    top = defs.pop("Report")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"leakscope JSON report, schema_version {SCHEMA_VERSION}",
        "description": "Generated by docs/gen_schema.py from leakscope.results; see docs/json-report.md.",
        **{k: v for k, v in top.items() if k != "description"},
        "$defs": dict(sorted(defs.items())),
    }


def text() -> str:
    """The schema file's text."""
    return json.dumps(schema(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    wanted = text()
    if "--check" in argv:
        if SCHEMA_FILE.read_text(encoding="utf-8") != wanted:
            sys.stderr.write(
                f"{SCHEMA_FILE} is not the generated schema; run python docs/gen_schema.py\n"
            )
            return 1
        return 0
    SCHEMA_FILE.write_text(wanted, encoding="utf-8")
    sys.stderr.write(f"wrote {SCHEMA_FILE}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
