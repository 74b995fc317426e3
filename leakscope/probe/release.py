"""Release one reference the walk found: put a detached value (or ``None``) where it was.

The one mutating operation of the probes, kept apart from the read-only walk
(:mod:`leakscope.probe.walk`): it is how a check proves that a holder retains the
graph on its own (confirmation) and what is left once every holder is released.
Only a trial's own objects are ever released, never a running job's.
"""

from __future__ import annotations

import types
from typing import Any

from leakscope.probe.walk import (
    ATTR,
    CELL,
    CLASSATTR,
    CONTEXT_VAR,
    DEFAULTS,
    DICT_KEY,
    EXC_ARG,
    FRAME,
    ITEM,
    LRU,
    PARTIAL_ARG,
    SET,
    SLOT,
    TD,
    TUPLE,
    Link,
    _instance_dict,
)


class ReleaseFailed(Exception):
    """The reference sits in a slot that cannot be replaced."""


def release(link: Link, value: Any) -> None:
    """Replace the object at ``link`` by ``value`` in its container.

    Used to confirm findings: a reference is released by putting a detached
    tensor (or ``None``) where the attached one was, exactly as the fix would.
    Tuples are rebuilt and put back into their own parent.
    """
    kind, container, key = link.kind, link.container, link.key
    if kind == ITEM:
        container[key] = value
    elif kind == ATTR:
        container[key] = value
    elif kind == SLOT:
        key.__set__(container, value)
    elif kind == CELL:
        container.cell_contents = value
    elif kind == TD:
        inner = (_instance_dict(container) or {}).get("_tensordict")
        if type(inner) is dict:
            inner[key] = value
        else:
            container.set(key, value)
    elif kind == SET:
        container.discard(key)
        if value is not None:
            container.add(value)
    elif kind == DEFAULTS:
        defaults = list(container.__defaults__)
        defaults[key] = value
        container.__defaults__ = tuple(defaults)
    elif kind == CLASSATTR:
        setattr(container, key, value)
    elif kind == LRU:
        container.cache_clear()
    elif kind == CONTEXT_VAR:
        container.set(value)
    elif kind == FRAME:
        _set_frame_local(container, key, value)
    elif kind == DICT_KEY:
        entry = container.pop(key)
        if value is not None:
            container[value] = entry
    elif kind == EXC_ARG:
        args = list(container.args)
        args[key] = value
        container.args = tuple(args)
    elif kind == PARTIAL_ARG:
        args = list(container.args)
        args[key] = value
        container.__setstate__((container.func, tuple(args), container.keywords, container.__dict__ or None))
    elif kind == TUPLE:
        if link.parent is None:
            raise ReleaseFailed("a tuple root cannot be rebuilt")
        items = list(tuple.__iter__(container))
        items[key] = value
        tp = type(container)
        rebuilt = tp(*items) if hasattr(tp, "_fields") else (tp(items) if tp is not tuple else tuple(items))
        release(link.parent, rebuilt)
    else:
        raise ReleaseFailed(f"cannot replace a reference held as {kind}")


def _set_frame_local(frame: types.FrameType, name: str, value: Any) -> None:
    """Rebind a local (or closed-over cell) of a suspended frame.

    Python 3.13's ``f_locals`` writes through (PEP 667); before it, the
    snapshot dict is written back with ``PyFrame_LocalsToFast``, which also
    sets cells. Only trial objects are ever released, never the user's.
    """
    import sys

    if sys.version_info >= (3, 13):
        frame.f_locals[name] = value
        return
    import ctypes

    frame.f_locals[name] = value  # the snapshot dict, kept on the frame
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


__all__ = ["ReleaseFailed", "release"]
