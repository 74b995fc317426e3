"""Release one reference the walk found: put a detached value (or ``None``) where it was.

The one mutating operation of the probes, kept apart from the read-only walk
(:mod:`leakscope.probe.walk`): it is how a check proves that a holder retains the
graph on its own (confirmation) and what is left once every holder is released.
Only a trial's own objects are ever released, never a running job's.
"""

from __future__ import annotations

import ctypes
import sys
import types
from collections import deque
from typing import Any

from leakscope.probe.safe import instance_dict, is_subtype, plain_hash, torch_code_off, type_name
from leakscope.probe.walk import (
    Link,
    LinkKind,
)


class ReleaseFailed(Exception):
    """The reference sits in a slot that cannot be replaced."""


def release(link: Link, value: object) -> None:
    """Replace the object at ``link`` by ``value`` in its container.

    Used to confirm findings: a reference is released by putting a detached
    tensor (or ``None``) where the attached one was, exactly as the fix would.
    Tuples are rebuilt and put back into their own parent. Like the walk, it runs
    none of the engine's code (NOTE [Reads that run no user code] in
    leakscope/probe/safe.py): containers are written through their builtin base
    type's own methods, and a slot under a key whose class hashes itself is
    :class:`ReleaseFailed`, never hashed.
    """
    kind, container, key = link.kind, link.container, link.key
    with (
        torch_code_off()
    ):  # a tensor key hashes through Tensor.__hash__ (its subclass's __torch_function__)
        _release(link, kind, container, key, value)


def _release(link: Link, kind: LinkKind, container: Any, key: Any, value: Any) -> None:
    if kind in (LinkKind.ITEM, LinkKind.ATTR):
        _set_item(container, key, value)
    elif kind is LinkKind.SLOT:
        key.__set__(container, value)
    elif kind is LinkKind.CELL:
        container.cell_contents = value
    elif kind is LinkKind.TD:
        inner = (instance_dict(container) or {}).get("_tensordict")
        if type(inner) is dict:
            _set_item(inner, key, value)
        else:
            container.set(
                key, value
            )  # a tensordict package class (the walk names no user subclass's entries)
    elif kind is LinkKind.SET:
        _hashable(key)
        set.discard(container, key)
        if value is not None:
            set.add(container, value)
    elif kind is LinkKind.DEFAULTS:
        defaults = list(container.__defaults__)
        defaults[key] = value
        container.__defaults__ = tuple(defaults)
    elif kind is LinkKind.CLASSATTR:
        type.__setattr__(container, key, value)  # never the metaclass's __setattr__
    elif kind is LinkKind.LRU:
        container.cache_clear()
    elif kind is LinkKind.CONTEXT_VAR:
        container.set(value)
    elif kind is LinkKind.GRAD:  # NOTE [A gradient that keeps a graph]: the tensor's own setter
        import torch

        setter: Any = torch._C.TensorBase.__dict__["grad"]
        setter.__set__(container, value)
    elif kind is LinkKind.FRAME:
        _set_frame_local(container, key, value)
    elif kind is LinkKind.DICT_KEY:
        _hashable(key)
        entry = dict.pop(container, key)
        if value is not None:
            dict.__setitem__(container, value, entry)
    elif kind is LinkKind.EXC_ARG:
        args = list(_EXC_ARGS.__get__(container))
        args[key] = value
        _EXC_ARGS.__set__(container, tuple(args))
    elif kind is LinkKind.PARTIAL_ARG:
        args = list(container.args)
        args[key] = value
        container.__setstate__(
            (container.func, tuple(args), container.keywords, container.__dict__ or None)
        )
    elif kind is LinkKind.TUPLE:
        if link.parent is None:
            raise ReleaseFailed("a tuple root cannot be rebuilt")
        items = list(tuple.__iter__(container))
        items[key] = value
        rebuilt = _rebuilt(type(container), items)
        _release(link.parent, link.parent.kind, link.parent.container, link.parent.key, rebuilt)
    else:
        raise ReleaseFailed(f"cannot replace a reference held as {kind}")


_EXC_ARGS = BaseException.__dict__["args"]
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def _rebuilt(tp: type, items: list[object]) -> tuple[Any, ...]:
    """A tuple of type ``tp`` holding ``items``: ``tuple.__new__`` for a class defined in Python
    (a named tuple's own ``__new__`` builds exactly this; no subclass constructor runs), the
    type's C constructor for a C tuple type (``torch.return_types``)."""
    if tp is tuple:
        return tuple(items)
    if type.__dict__["__flags__"].__get__(tp) & _HEAP_TYPE:
        return tuple.__new__(tp, items)
    return tp(items)  # type: ignore[no-any-return]


def _hashable(key: object) -> None:
    if not plain_hash(key):
        raise ReleaseFailed(
            f"the key is a {type_name(type(key))}, whose class hashes itself: leakscope does not run it"
        )


def _set_item(container: Any, key: Any, value: Any) -> None:
    """``container[key] = value`` through the builtin base's own method (a subclass's ``__setitem__``
    is the engine's code)."""
    tp = type(container)
    if is_subtype(tp, dict):
        _hashable(key)
        dict.__setitem__(container, key, value)
    elif is_subtype(tp, list):
        list.__setitem__(container, key, value)
    elif is_subtype(tp, deque):
        deque.__setitem__(container, key, value)
    else:
        raise ReleaseFailed(f"cannot replace an entry of a {type_name(tp)}")


def _set_frame_local(frame: types.FrameType, name: str, value: object) -> None:
    """Rebind a local (or closed-over cell) of a suspended frame.

    Python 3.13's ``f_locals`` writes through (PEP 667); before it, the
    snapshot dict is written back with ``PyFrame_LocalsToFast``, which also
    sets cells. Only trial objects are ever released, never the user's.
    """

    if sys.version_info >= (3, 13):
        frame.f_locals[name] = value
        return

    frame.f_locals[name] = value  # the snapshot dict, kept on the frame
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


__all__ = ["ReleaseFailed", "release"]
