"""Results and options as plain JSON data, and back: how a check crosses a process boundary.

The isolated check (``leakscope.runner.isolation``) runs each target in a child process
that sends its :class:`~leakscope.results.TargetResult` objects back as JSON, and
``leakscope watch`` merges the reports of a job's processes the same way.
Unlike the JSON report (``render/json_report.py``, a documented contract that
leaves out tracebacks and timings), this is a lossless, private encoding: every
field of every frozen dataclass travels, driven by the dataclass fields and
their type hints, so a field added to ``results.py`` or ``options.py`` needs no
edit here. No torch here: the parent process must not import it.

# NOTE [Decoding by the schema only]
# The data may come from a file others can write (a rank's report in a shared
# directory, a report given to ``leakscope render``), so :func:`from_data` trusts
# nothing in it. The class of every value is the one the type hints of the
# requested dataclass name, never one the data names: no import, no lookup by a
# string from the data. Every value is checked against its hint: an ``int`` is an
# int (not a bool, not a float) inside :data:`INT_RANGE` or the caller's tighter
# range, a ``float`` is finite, an enum is one of its values, a ``str`` a string, a
# tuple a list (of its exact length when the hint fixes one), a mapping an object
# with string keys; a required field must be present. The two fields typed ``Any``
# whose class lives in a stage above this one (``TargetResult.projection``,
# ``CheckOptions.at``) name that class in :data:`_ANY_FIELDS`, a constant; any other
# ``Any`` value must be plain JSON (no NaN or infinity, nested at most
# :data:`MAX_PLAIN_DEPTH` deep). The first value that does not fit raises
# :class:`SchemaError` naming where it is (``results[0].findings[1].retained_bytes``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from leakscope.options import CheckOptions
from leakscope.results import TargetResult

T = TypeVar("T")
#: the widest integer any field may hold (a signed 64-bit value)
INT_RANGE = (-(2**63), 2**63 - 1)
#: how deep plain JSON in a field typed ``Any`` may nest
MAX_PLAIN_DEPTH = 32
#: fields typed ``Any`` that hold a leakscope dataclass of a stage above this module:
#: (owner, field) -> (module, class); see NOTE [Decoding by the schema only]
_ANY_FIELDS: dict[tuple[type, str], tuple[str, str]] = {
    (TargetResult, "projection"): ("leakscope.diagnose.projection", "Projection"),
    (CheckOptions, "at"): ("leakscope.diagnose.projection", "Scale"),
}


class SchemaError(ValueError):
    """Data that does not fit the schema: ``where`` it is and what is wrong with it."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where or 'the document'} {problem}")
        self.where = where
        self.problem = problem


def to_data(obj: object) -> object:
    """A dataclass tree as JSON-compatible data (enums by value, tuples as lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): to_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in obj]
    return obj


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def any_field_class(owner: type, name: str) -> type | None:
    """The dataclass the ``Any``-typed field ``owner.name`` holds, by the schema (:data:`_ANY_FIELDS`)."""
    entry = _ANY_FIELDS.get((owner, name))
    if entry is None:
        return None
    cls = getattr(importlib.import_module(entry[0]), entry[1])
    assert isinstance(cls, type) and dataclasses.is_dataclass(cls)
    return cls


def from_data(
    cls: type[T], data: object, *, ints: tuple[int, int] = INT_RANGE, where: str = ""
) -> T:
    """Rebuild an instance of dataclass ``cls`` from :func:`to_data` output, checking every value.

    Unknown keys are ignored and missing optional ones take the field default, so a
    child and parent of slightly different versions still understand each other.
    ``ints`` bounds every integer (the JSON report's are counts and bytes: never
    negative). Raises :class:`SchemaError` (NOTE [Decoding by the schema only]).
    """
    value: T = _Decoder(ints).build(cls, data, where)
    return value


def value_from_data(
    tp: object, data: object, *, ints: tuple[int, int] = INT_RANGE, where: str = ""
) -> object:
    """One value checked against the type hint ``tp`` by :func:`from_data`'s rules."""
    return _Decoder(ints).build(tp, data, where)


def _kind(data: object) -> str:
    """What a JSON value is, for a message (``null``, ``a string``, ``1e+400``)."""
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, (int, float)):
        text = repr(data)
        return text if len(text) <= 24 else f"a {len(text)}-digit number"
    if isinstance(data, str):
        return "a string"
    if isinstance(data, (list, tuple)):
        return "a list"
    if isinstance(data, Mapping):
        return "an object"
    return type(data).__name__


def _name(tp: object) -> str:
    return getattr(tp, "__name__", None) or str(tp)


class _Decoder:
    def __init__(self, ints: tuple[int, int]) -> None:
        self.lo, self.hi = ints

    def build(self, tp: object, data: object, where: str) -> Any:
        if tp is Any:
            return self.plain(data, where, 0)
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            return self.union(typing.get_args(tp), data, where)
        if data is None:
            raise SchemaError(where, f"is null, not {self.describe(tp)}")
        if origin is typing.Literal:
            if data not in typing.get_args(tp):
                raise SchemaError(where, f"is {_kind(data)}, not one of {typing.get_args(tp)}")
            return data
        if origin in (tuple, list, frozenset, set):
            return self.sequence(tp, origin, data, where)
        if origin in (dict, Mapping) or tp in (dict, Mapping):
            return self.mapping(tp, data, where)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self.dataclass(tp, data, where)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            try:
                return tp(data)
            except ValueError:
                values = ", ".join(repr(m.value) for m in tp)
                shown = repr(data) if isinstance(data, str) and len(data) <= 40 else _kind(data)
                raise SchemaError(where, f"is {shown}, not one of {values}") from None
        if tp is bool:
            if not isinstance(data, bool):
                raise SchemaError(where, f"is {_kind(data)}, not true or false")
            return data
        if tp is int:
            return self.integer(data, where)
        if tp is float:
            if isinstance(data, bool) or not isinstance(data, (int, float)):
                raise SchemaError(where, f"is {_kind(data)}, not a number")
            if isinstance(data, int):
                data = self.integer(data, where)
            if not math.isfinite(data):
                raise SchemaError(where, f"is {_kind(data)}, not a finite number")
            return float(data)
        if tp is str:
            if not isinstance(data, str):
                raise SchemaError(where, f"is {_kind(data)}, not a string")
            return data
        raise SchemaError(where, f"has a type this decoder does not know ({_name(tp)})")

    def describe(self, tp: Any) -> str:
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return "an object"
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return "one of " + ", ".join(repr(m.value) for m in tp)
        return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
            tp, "a list" if typing.get_origin(tp) in (tuple, list) else _name(tp)
        )

    def integer(self, data: object, where: str) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise SchemaError(where, f"is {_kind(data)}, not an integer")
        if not self.lo <= data <= self.hi:
            raise SchemaError(
                where, f"is {_kind(data)}, not an integer from {self.lo} to {self.hi}"
            )
        return data

    def union(self, args: tuple[object, ...], data: object, where: str) -> object:
        options = [a for a in args if a is not type(None)]
        if data is None:
            if len(options) < len(args):
                return None
            raise SchemaError(
                where, f"is null, not {' or '.join(self.describe(a) for a in options)}"
            )
        error: SchemaError | None = None
        for option in options:
            try:
                return self.build(option, data, where)
            except SchemaError as exc:
                error = error or exc
        if len(options) > 1:
            raise SchemaError(
                where, f"is {_kind(data)}, not {' or '.join(self.describe(a) for a in options)}"
            )
        assert error is not None
        raise error

    def sequence(self, tp: object, origin: Any, data: object, where: str) -> object:
        if not isinstance(data, (list, tuple)):
            raise SchemaError(where, f"is {_kind(data)}, not a list")
        args = typing.get_args(tp)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(data):
                raise SchemaError(where, f"has {len(data)} items, not {len(args)}")
            return tuple(
                self.build(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, data))
            )
        item = args[0] if args else Any
        values = [self.build(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
        return origin(values) if origin is not list else values

    def mapping(self, tp: object, data: object, where: str) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise SchemaError(where, f"is {_kind(data)}, not an object")
        args = typing.get_args(tp)
        value_tp = args[1] if args else Any
        out = {}
        for key, value in data.items():
            if not isinstance(key, str):
                raise SchemaError(where, f"has a key that is {_kind(key)}, not a string")
            out[key] = self.build(value_tp, value, f"{where}[{key!r}]")
        return out

    def dataclass(self, tp: type, data: object, where: str) -> object:
        if not isinstance(data, Mapping):
            raise SchemaError(where, f"is {_kind(data)}, not an object")
        hints = _hints(tp)
        kwargs = {}
        for field in dataclasses.fields(tp):
            at = f"{where}.{field.name}" if where else field.name
            if field.name not in data:
                if (
                    field.default is dataclasses.MISSING
                    and field.default_factory is dataclasses.MISSING
                ):
                    raise SchemaError(at, "is missing")
                continue
            hint = hints[field.name]
            if hint is Any:
                hint = any_field_class(tp, field.name) or Any
                if hint is not Any:
                    hint = hint | None
            kwargs[field.name] = self.build(hint, data[field.name], at)
        try:
            return tp(**kwargs)
        except (TypeError, ValueError) as exc:
            raise SchemaError(where, f"is not a valid {tp.__name__} ({exc})") from None

    def plain(self, data: object, where: str, depth: int) -> object:
        """A value of a field typed ``Any``: plain JSON, finite, bounded in depth."""
        if depth > MAX_PLAIN_DEPTH:
            raise SchemaError(where, f"nests deeper than {MAX_PLAIN_DEPTH} levels")
        if data is None or isinstance(data, (bool, str)):
            return data
        if isinstance(data, int):
            return self.integer(data, where)
        if isinstance(data, float):
            if not math.isfinite(data):
                raise SchemaError(where, f"is {_kind(data)}, not a finite number")
            return data
        if isinstance(data, (list, tuple)):
            return [self.plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(data)]
        if isinstance(data, Mapping):
            out = {}
            for key, value in data.items():
                if not isinstance(key, str):
                    raise SchemaError(where, f"has a key that is {_kind(key)}, not a string")
                out[key] = self.plain(value, f"{where}[{key!r}]", depth + 1)
            return out
        raise SchemaError(where, f"is {_kind(data)}, not plain JSON")


def result_from_data(data: object) -> TargetResult:
    """One :class:`TargetResult` from :func:`to_data` output."""
    return from_data(TargetResult, data)


def options_from_data(data: object) -> CheckOptions:
    """:class:`CheckOptions` from :func:`to_data` output."""
    return from_data(CheckOptions, data)
