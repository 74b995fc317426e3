"""Results and options as plain JSON data, and back: how a check crosses a process boundary.

The isolated check (``leakscope.runner.isolation``) runs each target in a child process
that sends its :class:`~leakscope.results.TargetResult` objects back as JSON.
Unlike the JSON report (``render/json_report.py``, a documented contract that
leaves out tracebacks and timings), this is a lossless, private encoding: every
field of every frozen dataclass travels, driven by the dataclass fields and
their type hints, so a field added to ``results.py`` or ``options.py`` needs no
edit here. No torch here: the parent process must not import it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from leakscope.options import CheckOptions
from leakscope.results import TargetResult

T = TypeVar("T")
#: the key naming a dataclass's class in :func:`to_data` output
TYPE_KEY = "__dataclass__"


def to_data(obj: Any) -> Any:
    """A dataclass tree as JSON-compatible data (enums by value, tuples as lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        data = {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        # Fields typed Any (``CheckOptions.at``, ``TargetResult.projection``) hold
        # dataclasses too: name the class so the other side can rebuild it.
        data[TYPE_KEY] = f"{type(obj).__module__}:{type(obj).__qualname__}"
        return data
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


def from_data(cls: type[T], data: Any) -> T:
    """Rebuild an instance of dataclass ``cls`` from :func:`to_data` output.

    Unknown keys are ignored and missing ones take the field default, so a
    child and parent of slightly different versions still understand each other.
    """
    value: T = _build(cls, data)
    return value


def _build(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    if tp is Any:
        tp = _tagged_class(data) or Any
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(options[0], data) if len(options) == 1 else data
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v) for v in data)
        return tuple(_build(a, v) for a, v in zip(args, data, strict=False))
    if origin in (list, typing.List):  # noqa: UP006
        (arg,) = typing.get_args(tp)
        return [_build(arg, v) for v in data]
    if origin in (dict, Mapping, typing.Dict) or tp in (dict, Mapping):  # noqa: UP006
        args = typing.get_args(tp)
        return {k: _build(args[1], v) for k, v in data.items()} if args else dict(data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        kwargs = {f.name: _build(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data}
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is float and isinstance(data, int):
        return float(data)
    return data


def _tagged_class(data: Any) -> type | None:
    """The leakscope dataclass a :func:`to_data` dict names (never a class from elsewhere)."""
    if not isinstance(data, dict) or not isinstance(data.get(TYPE_KEY), str):
        return None
    module_name, _, qualname = data[TYPE_KEY].partition(":")
    if module_name != "leakscope" and not module_name.startswith("leakscope."):
        return None
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) and dataclasses.is_dataclass(obj) else None


def result_from_data(data: Any) -> TargetResult:
    """One :class:`TargetResult` from :func:`to_data` output."""
    return from_data(TargetResult, data)


def options_from_data(data: Any) -> CheckOptions:
    """:class:`CheckOptions` from :func:`to_data` output."""
    return from_data(CheckOptions, data)
