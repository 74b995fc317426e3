"""Walk arbitrary Python object structures and name every tensor they hold.

The walk is the observer of the check, so it must not change what it observes:

- it never calls user code: no properties, descriptors, ``__getattr__``,
  ``__eq__``, ``__hash__`` or ``__iter__`` overrides, no metaclass hooks, no
  ``__torch_function__`` (every read goes through :mod:`leakscope.probe.safe`:
  instance dicts, slot descriptors, class namespaces, the C-level contents of
  builtin containers, torch's own getters);
- it is iterative, so 10k-deep nesting needs no recursion limit, and it visits
  each container once (by ``id``), so cycles terminate;
- it is linear: each tensor is named once per slot that holds it, at most
  :data:`MAX_NAMED` times (NOTE [Each reference once]);
- it is bounded by ``max_objects`` and by a time budget (NOTE [A bounded walk]);
- paths are built only for hits, from parent links, so deep structures do not
  cost quadratic memory.

It yields a :class:`Hit` for every tensor and every autograd graph node it
meets; the caller decides what matters. Each hit carries the :class:`Link`
chain it was reached through, so the reference can later be released (see
:func:`leakscope.probe.release.release`), which is how findings are confirmed.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import functools
import gc
import sys
import threading
import time
import types
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from leakscope.holders import ENTRY_KINDS, HolderPath, RootKind, Segment, SegmentKind, key_segment
from leakscope.phase import report
from leakscope.probe import safe
from leakscope.probe.library import (
    is_interpreter_internal,
    is_library_module,
    is_library_type,
)
from leakscope.probe.safe import (
    class_dict,
    error_line,
    instance_dict,
    is_instance,
    is_subtype,
    type_module,
    type_name,
)


class LinkKind(enum.Enum):
    """How a child is reached from its parent, and how it can be replaced there (see ``release``)."""

    ITEM = "item"  # parent[key] = value (dict, list, deque)
    TUPLE = "tuple"  # immutable: rebuild the tuple in its own parent
    ATTR = "attr"  # parent.__dict__[key] = value
    SLOT = "slot"  # member descriptor: key.__set__(parent, value)
    CELL = "cell"  # closure cell: parent.cell_contents = value
    TD = "td"  # TensorDict entry
    SET = "set"  # set element
    DEFAULTS = "defaults"  # function __defaults__ tuple
    CLASSATTR = "classattr"  # setattr(cls, key, value)
    PARTIAL_ARG = "partial-arg"  # functools.partial positional argument
    LRU = "lru"  # a functools.lru_cache result: released by cache_clear()
    FRAME = "frame"  # a local of a suspended generator's (or a traceback's) frame
    DICT_KEY = "dict-key"  # a tensor used as a dict key: re-keyed by its replacement
    EXC_ARG = "exc-arg"  # an exception's args[i]
    CONTEXT_VAR = "context-var"  # a ContextVar's value: var.set(value)
    GRAD = "grad"  # a tensor's .grad (NOTE [A gradient that keeps a graph]): t.grad = value
    READONLY = "readonly"  # reachable, but cannot be replaced


@dataclasses.dataclass(frozen=True)
class Root:
    """A named starting point: ``output``, ``engine``, ``micro_batch``, ``module``, ``global:mod``."""

    name: str
    obj: Any
    kind: RootKind
    #: a dict with ``holder[name] is obj``, so the root itself can be released
    holder: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", RootKind(self.kind))


@dataclasses.dataclass(frozen=True)
class Link:
    """How an object was reached: parent link, path segment, and the slot it sits in.

    A root's link has no parent and no segments; it carries the root's name.
    """

    parent: Link | None
    segments: tuple[Segment, ...]
    kind: LinkKind
    container: Any
    key: Any
    root: str = ""
    root_kind: str = ""

    def path(self) -> HolderPath:
        parts: list[Segment] = []
        link: Link = self
        while link.parent is not None:
            parts.extend(reversed(link.segments))
            link = link.parent
        kind = link.root_kind if link.root_kind != link.root.partition(":")[0] else ""
        return HolderPath(link.root, tuple(reversed(parts)), kind)


@dataclasses.dataclass(frozen=True)
class Hit:
    """A tensor or autograd node found at ``link.path()`` under ``root``."""

    obj: Any
    link: Link
    root: Root

    @property
    def path(self) -> HolderPath:
        return self.link.path()


_ATOMS: tuple[type, ...] = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    range,
    type(Ellipsis),
    types.ModuleType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.WrapperDescriptorType,
    memoryview,
    slice,
)
#: the exact types of most of what a walk reaches that can hold nothing (a library's tables of
#: names and numbers): left out where children are listed, before a path segment or a stack entry
#: is made for them (NOTE [Atoms left out early]); a subclass of one still goes through ``_kind_of``
_PLAIN_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes})
#: a tensor (or graph node) is named at this many references at most (NOTE [Each reference once])
MAX_NAMED = 16
#: seconds one walk may take before it stops with a warning (NOTE [A bounded walk])
WALK_SECONDS = 60.0


def _identifier(key: object) -> bool:
    return type(key) is str and key.isidentifier()


def _key(key: object) -> tuple[Segment, ...]:
    return (key_segment(key),)


def _attr(name: str) -> tuple[Segment, ...]:
    return (Segment(SegmentKind.ATTR, name),)


def _member(key: object) -> tuple[Segment, ...]:
    """An instance ``__dict__`` entry: an attribute (``.name``) when its key is an identifier,
    else a mapping key (``setattr(obj, "a b", x)`` is ``['a b']``)."""
    return _attr(key) if type(key) is str and key.isidentifier() else _key(key)


def _index(i: int) -> tuple[Segment, ...]:
    if 0 <= i < len(_INDEXES):
        return _INDEXES[i]
    return (Segment(SegmentKind.INDEX, i),)


#: the first positions' segments, made once (a 10^6-deep chain of pairs uses two of them)
_INDEXES = tuple((Segment(SegmentKind.INDEX, i),) for i in range(1024))


class _Kinds:
    """Type tests resolved lazily, so importing this module stays torch-free."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.tensor = torch.Tensor
        self.module = torch.nn.Module

    @property
    def tensordict(self) -> type | None:
        """``TensorDictBase`` once the job has imported tensordict (no type subclasses it before);
        never imported here: that would cost a job that does not use it a second of its own
        time (tensordict missing or changed: TDs are walked as objects)."""
        found = (safe.module_dict(sys.modules.get("tensordict.base")) or {}).get("TensorDictBase")
        return found if safe.is_instance(found, type) else None

    def is_parameter(self, obj: object) -> bool:
        return safe.is_parameter(obj)

    def tensor_hooks(self, t: object) -> list[tuple[str, dict[Any, Any]]]:
        """``(name, hooks)`` for the Python hook dicts registered on ``t`` (``register_hook``,
        ``register_post_accumulate_grad_hook``): their closures can hold another step's graph."""
        return safe.tensor_hooks(t)

    def tensor_attrs(self, t: object) -> dict[str, Any] | None:
        """A tensor's instance ``__dict__`` when it has public attributes
        (``weight.kfac_a = input``, ``t.source = x``); private ones (a DTensor's
        ``_local_tensor``, ``_spec``) are the tensor's own machinery."""
        d = safe.instance_dict(t)
        if d and any(type(key) is str and not key.startswith("_") for key in d):
            return d
        return None

    def is_node(self, obj: object) -> bool:
        """An autograd graph node (``loss.grad_fn``, a GradientEdge's ``.node``, ...), decided by type
        alone (:func:`leakscope.probe.safe.is_node`)."""
        return safe.is_node(obj)


@functools.lru_cache(maxsize=1)
def kinds() -> _Kinds:
    return _Kinds()


# What the walk does with an object, decided once per type (``_kind_of``).
(
    _ATOM,
    _CLASS,
    _TENSOR,
    _NODE,
    _HOOKS,
    _DICT,
    _LIST,
    _DEQUE,
    _TUPLE,
    _SET,
    _FROZENSET,
    _TD,
    _MODULE,
    _FUNCTION,
    _METHOD,
    _BUILTIN_METHOD,
    _PARTIAL,
    _CELL,
    _EXCEPTION,
    _WEAK_KEYS,
    _SUSPENDED_FRAME,
    _LRU,
    _PROXY,
    _LOCAL,
    _CONTEXT,
    _LIBRARY,
    _TENSORCLASS,
    _OBJECT,
) = range(28)


def _classify(tp: type) -> int:
    """How the walk treats objects of type ``tp`` (every test by the type alone: NOTE [Reads that
    run no user code] in leakscope/probe/safe.py)."""
    if is_subtype(tp, type):
        return _CLASS
    if is_subtype(tp, _ATOMS):
        return _ATOM
    k = kinds()
    if is_subtype(tp, k.tensor):
        return _TENSOR
    if safe.is_node_type(tp):
        return _NODE
    if tp is _HookDict:
        return _HOOKS
    for base, kind in _BUILTIN_KINDS:
        if is_subtype(tp, base):
            return kind
    if k.tensordict is not None and is_subtype(tp, k.tensordict):
        return _TD
    if is_subtype(tp, k.module):
        return _MODULE
    exact = _EXACT_KINDS.get(id(tp))
    if exact is not None and exact[0] is tp:
        return exact[1]
    if is_subtype(tp, BaseException):
        return _EXCEPTION
    if is_subtype(tp, weakref.WeakKeyDictionary):
        return _WEAK_KEYS
    if is_library_type(tp):
        return _LIBRARY
    if safe.class_attr(tp, "_is_tensorclass") is True:
        return _TENSORCLASS
    return _OBJECT


_kind_of = safe.TypeFacts(_classify)
_BUILTIN_KINDS: tuple[tuple[type, int], ...] = (
    (dict, _DICT),
    (list, _LIST),
    (deque, _DEQUE),
    (tuple, _TUPLE),
    (set, _SET),
    (frozenset, _FROZENSET),
)


def _slot_values(obj: object) -> Iterator[tuple[str, Any, Any]]:
    return safe.slot_values(obj)


#: segments (None: the index ``key``, made when needed), kind, container, key, value
Child = tuple["tuple[Segment, ...] | None", LinkKind, Any, Any, Any]


def _children(obj: object, generic: bool = False) -> Iterable[Child]:
    yield from _CHILDREN[_kind_of(type(obj))](obj, generic)


def _dict_children(obj: Any, generic: bool) -> Iterable[Child]:
    # NOTE [Atoms left out early]
    # A walk through every loaded module's globals (NOTE [Every loaded module]) reaches hundreds
    # of thousands of dict entries once a library like transformers is imported (its tables of
    # model names), nearly all of them strings and numbers. The walk would pop each and drop it
    # (``_ATOM``); leaving a value of an exact atom type out here saves its path segment, its
    # stack entry and its type lookup, and changes nothing the walk names or enters.
    items = list(dict.items(obj))
    atoms = _PLAIN_ATOMS
    for key, value in items:
        if type(value) not in atoms:
            yield _key(key), LinkKind.ITEM, obj, key, value
    for key, _ in items:
        # A tensor (or graph node) used as a key is held by the dict too.
        if type(key) not in atoms and _kind_of(type(key)) in (_TENSOR, _NODE):
            yield (
                (Segment(SegmentKind.KEY_OBJECT, type_name(type(key))),),
                LinkKind.DICT_KEY,
                obj,
                key,
                key,
            )
    seen = {id(v) for _, v in items}
    d = instance_dict(obj)
    if d:
        for key, value in list(d.items()):
            if id(value) not in seen:
                yield _attr(key), LinkKind.ATTR, d, key, value


def _list_children(obj: Any, generic: bool) -> Iterable[Child]:
    # ``None``: the index segment, made only if the entry is named or entered (``_link``).
    return [
        (None, LinkKind.ITEM, obj, i, value) for i, value in enumerate(list(list.__iter__(obj)))
    ]


def _deque_children(obj: Any, generic: bool) -> Iterable[Child]:
    return [
        (None, LinkKind.ITEM, obj, i, value) for i, value in enumerate(list(deque.__iter__(obj)))
    ]


def _tuple_children(obj: Any, generic: bool) -> Iterable[Child]:
    values = list(tuple.__iter__(obj))
    # A named tuple's field names: the first tuple of names along its classes (never a
    # descriptor's ``__get__``, and a subclass that hides ``_fields`` keeps its base's).
    fields = safe.class_attr(type(obj), "_fields", want=tuple)
    names: tuple[Any, ...] = fields if fields is not None and len(fields) == len(values) else ()
    for i, value in enumerate(values):
        segment = _attr(names[i]) if names and _identifier(names[i]) else _index(i)
        yield segment, LinkKind.TUPLE, obj, i, value


def _set_children(obj: Any, generic: bool) -> Iterable[Child]:
    for value in list(set.__iter__(obj)):
        yield (Segment(SegmentKind.MEMBER),), LinkKind.SET, obj, value, value


def _frozenset_children(obj: Any, generic: bool) -> Iterable[Child]:
    for value in list(frozenset.__iter__(obj)):
        yield (Segment(SegmentKind.MEMBER),), LinkKind.READONLY, obj, value, value


def _method_children(obj: Any, generic: bool) -> Iterable[Child]:
    yield _attr("__self__"), LinkKind.READONLY, obj, "__self__", obj.__self__
    yield _attr("__func__"), LinkKind.READONLY, obj, "__func__", obj.__func__


def _builtin_method_children(obj: Any, generic: bool) -> Iterable[Child]:
    """A C method bound to its object (``entropy.mean`` kept to call later, ``t.__len__``) keeps
    that object alive: a deferred metric of an attached tensor is ``engine.deferred[0].__self__``.
    Bound to a module (``len``, ``torch.add``), it keeps nothing of the step's."""
    owner = obj.__self__  # the C type's own getter
    if owner is not None and not is_instance(owner, types.ModuleType):
        yield _attr("__self__"), LinkKind.READONLY, obj, "__self__", owner


def _partial_children(obj: Any, generic: bool) -> Iterable[Child]:
    yield _attr("func"), LinkKind.READONLY, obj, "func", obj.func
    for i, value in enumerate(obj.args):
        yield (*_attr("args"), *_index(i)), LinkKind.PARTIAL_ARG, obj, i, value
    keywords = obj.keywords
    if type(keywords) is dict:
        for key, value in list(keywords.items()):
            yield (*_attr("keywords"), *_key(key)), LinkKind.ITEM, keywords, key, value


def _cell_children(obj: Any, generic: bool) -> Iterable[Child]:
    try:
        yield (), LinkKind.CELL, obj, None, obj.cell_contents
    except ValueError:  # empty cell
        pass


def _proxy_children(obj: object, generic: bool) -> Iterable[Child]:
    # A read-only view: its entries are the mapping's (``output.stats['entropy']``).
    mappings = [r for r in gc.get_referents(obj) if is_instance(r, dict)]
    if mappings:
        yield from _dict_children(mappings[0], generic)


def _local_children(obj: object, generic: bool) -> Iterable[Child]:
    d = safe.thread_local_dict(obj)
    if d is not None:
        for key, value in list(d.items()):
            yield _member(key), LinkKind.ATTR, d, key, value


def _context_children(obj: Any, generic: bool) -> Iterable[Child]:
    value = obj.get(_NO_VALUE)
    if value is not _NO_VALUE:
        yield (Segment(SegmentKind.CALL, "get"),), LinkKind.CONTEXT_VAR, obj, None, value


def _library_children(obj: object, generic: bool) -> Iterable[Child]:
    if generic and not is_interpreter_internal(type(obj)):
        yield from _generic_children(obj)


def _tensorclass_children(obj: object, generic: bool) -> Iterable[Child]:
    d = instance_dict(obj) or {}
    inner = d.get("_tensordict")
    if inner is not None:
        yield from _tensordict_children(inner, generic)
    extra = d.get("_non_tensordict")
    if type(extra) is dict:
        for key, value in list(extra.items()):
            yield _key(key), LinkKind.ITEM, extra, key, value


def _object_children(obj: object, generic: bool) -> Iterable[Child]:
    d = instance_dict(obj)
    if d:
        for key, value in list(d.items()):
            yield _member(key), LinkKind.ATTR, d, key, value
    found = bool(d)
    for name, value, descr in _slot_values(obj):
        found = True
        yield _attr(name), LinkKind.SLOT, obj, descr, value
    if generic and not found and not is_interpreter_internal(type(obj)):
        yield from _referents(obj)


def _lru_and_object_children(obj: object, generic: bool) -> Iterable[Child]:
    yield from _lru_children(obj)
    yield from _object_children(obj, generic)  # its __dict__ (``__wrapped__``)


def _nothing(obj: object, generic: bool) -> Iterable[Child]:
    return ()


def _generic_children(obj: object) -> Iterable[Child]:
    """A library object the user owns: its attributes, else what the interpreter says it refers to."""
    d = instance_dict(obj)
    if d:
        for key, value in list(d.items()):
            yield _member(key), LinkKind.ATTR, d, key, value
        return
    slots = list(_slot_values(obj))
    for name, value, descr in slots:
        yield _attr(name), LinkKind.SLOT, obj, descr, value
    if not slots:
        yield from _referents(obj)


def _referents(obj: object) -> Iterable[Child]:
    """What the interpreter says ``obj`` refers to (C-level objects without a ``__dict__``)."""
    for value in gc.get_referents(obj):
        if is_instance(value, (type, types.ModuleType, types.CodeType)):
            continue
        yield (
            (Segment(SegmentKind.REFERENT, type_name(type(value))),),
            LinkKind.READONLY,
            obj,
            None,
            value,
        )


_THREAD_LOCAL = threading.local
_CONTEXT_VAR = contextvars.ContextVar
_NO_VALUE = object()
_SUSPENDED = {
    types.GeneratorType: "gi_frame",
    types.CoroutineType: "cr_frame",
    types.AsyncGeneratorType: "ag_frame",
}
_LRU_WRAPPER = type(functools.lru_cache(maxsize=1)(lambda: None))
# Types matched exactly (none of them can be subclassed, or a subclass is the user's own object):
# by identity, since a dict keyed by a type would hash it with its metaclass's ``__hash__``.
_EXACT_KINDS: dict[int, tuple[type, int]] = {
    id(tp): (tp, kind)
    for tp, kind in (
        (types.FunctionType, _FUNCTION),
        (types.MethodType, _METHOD),
        (types.BuiltinMethodType, _BUILTIN_METHOD),
        (types.MethodWrapperType, _BUILTIN_METHOD),
        (functools.partial, _PARTIAL),
        (types.CellType, _CELL),
        (types.GeneratorType, _SUSPENDED_FRAME),
        (types.CoroutineType, _SUSPENDED_FRAME),
        (types.AsyncGeneratorType, _SUSPENDED_FRAME),
        (_LRU_WRAPPER, _LRU),
        (types.MappingProxyType, _PROXY),
        (_THREAD_LOCAL, _LOCAL),
        (_CONTEXT_VAR, _CONTEXT),
    )
}
_BASE_EXCEPTION = {
    name: BaseException.__dict__[name].__get__
    for name in ("args", "__traceback__", "__cause__", "__context__")
}


def _weak_key_children(wkd: object, generic: bool) -> Iterable[Child]:
    """Values of a ``WeakKeyDictionary`` are held strongly (only the keys are weak)."""
    data = (instance_dict(wkd) or {}).get("data")
    if type(data) is not dict:
        return
    for ref, value in list(dict.items(data)):
        key = ref() if is_instance(ref, weakref.ref) else None
        yield (
            (_key(key) if key is not None else (Segment(SegmentKind.OBJECT_KEY, "dead key"),)),
            LinkKind.ITEM,
            data,
            ref,
            value,
        )


def _frame_children(gen: object, generic: bool) -> Iterable[Child]:
    """Locals (and closed-over cells) of a suspended generator or coroutine.

    Read from the frame (``gi_frame.f_locals``), never by resuming it; see
    :func:`leakscope.probe.release._set_frame_local` for how one is released. Before Python 3.13
    reading ``f_locals`` leaves a snapshot dict on the frame; it refers only to
    what the frame's locals refer to at that moment, and every later walk
    refreshes it before anything is judged alive, so it cannot turn a freed
    graph into a finding.
    """
    attr = _SUSPENDED[type(gen)]
    frame = getattr(gen, attr, None)  # the generator type's own getter
    if frame is not None:  # None: finished, holds nothing
        yield from _frame_locals(frame, _attr(attr), follow_back=False)


def _exception_children(exc: BaseException, generic: bool) -> Iterable[Child]:
    """What a stored exception keeps: its ``args``, its attributes, the locals of
    every frame of its traceback (``self.last_error = e`` keeps the whole failed
    step's frames), and the exceptions it chains to. Read through ``BaseException``'s
    own getters (a subclass may shadow any of them with a property)."""
    args = _BASE_EXCEPTION["args"](exc)
    for i, value in enumerate(args if type(args) is tuple else ()):
        yield (*_attr("args"), *_index(i)), LinkKind.EXC_ARG, exc, i, value
    d = instance_dict(exc)
    if d:
        for key, value in list(d.items()):
            yield _member(key), LinkKind.ATTR, d, key, value
    tb = _BASE_EXCEPTION["__traceback__"](exc)
    segment = _attr("__traceback__")
    if tb is not None:
        # The frame that caught it (and, once they return, the frames that
        # called it: CPython links a finished frame to its caller's) ...
        yield from _frame_locals(tb.tb_frame, (*segment, *_attr("tb_frame")), follow_back=True)
    while tb is not None:
        # ... and every frame between it and the raise.
        if len(segment) > 1:
            yield from _frame_locals(tb.tb_frame, (*segment, *_attr("tb_frame")), follow_back=False)
        tb = tb.tb_next
        segment = (*segment, *_attr("tb_next"))
    for attr in ("__cause__", "__context__"):
        chained = _BASE_EXCEPTION[attr](exc)
        if chained is not None:
            yield _attr(attr), LinkKind.READONLY, exc, attr, chained


def _frame_locals(
    frame: Any, segment: tuple[Segment, ...], *, follow_back: bool
) -> Iterable[Child]:
    """Locals of a finished frame, and with ``follow_back`` its callers' frames up to the
    first one of a library package (leakscope's own caller frames, torch, pytest), whose
    locals are not the engine's."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if is_library_module(name if type(name) is str else ""):
            return
        for local, value in list(frame.f_locals.items()):
            yield (*segment, Segment(SegmentKind.LOCAL, local)), LinkKind.FRAME, frame, local, value
        if not follow_back:
            return
        frame = frame.f_back
        segment = (*segment, *_attr("f_back"))


def _lru_children(wrapper: object) -> Iterable[Child]:
    """The results a ``functools.lru_cache`` / ``functools.cache`` wrapper keeps.

    # NOTE [Reading an lru_cache]
    # The C wrapper offers no way to list its cache. An unbounded cache's dict
    # (one of its GC referents) maps key -> result. A bounded cache's dict maps
    # key -> link entry, and its GC traversal visits each entry's key, result
    # and then the entry's type (CPython 3.11+); results are paired with their
    # keys by identity. On an interpreter that traverses otherwise nothing is
    # named (the graph is still reported, as ``<unknown holder>``). Releasing a
    # result is ``cache_clear()``, which is also the fix.
    """
    refs = gc.get_referents(wrapper)
    caches = [r for r in refs if type(r) is dict and r]
    if not caches:
        return
    cache = caches[0]
    keys = {id(key) for key in dict.__iter__(cache)}
    entry_type = type(next(iter(dict.values(cache))))
    if type_name(entry_type) != "_lru_list_elem":
        results = list(dict.values(cache))
    else:
        results = [
            refs[i - 1]
            for i in range(2, len(refs))
            if refs[i] is entry_type and id(refs[i - 2]) in keys
        ]
    # Newest last: the entry a step just added is ``cache[-1]`` however old the cache is.
    for i, value in enumerate(results):
        yield (
            (Segment(SegmentKind.CACHE, "cache"), *_index(i - len(results))),
            LinkKind.LRU,
            wrapper,
            None,
            value,
        )


def _tensordict_children(td: Any, generic: bool) -> Iterable[Child]:
    d = instance_dict(td) or {}
    inner = d.get("_tensordict")
    if type(inner) is dict:
        for key, value in list(inner.items()):
            yield _key(key), LinkKind.TD, td, key, value
        return
    stacked = d.get("tensordicts")
    if type(stacked) is list:
        for i, value in enumerate(stacked):
            yield _index(i), LinkKind.READONLY, stacked, i, value
        return
    if is_library_type(type(td)):  # the package's own methods; a user subclass's are its own code
        for key, value in list(td.items()):
            yield _key(key), LinkKind.TD, td, key, value


_MODULE_PLAIN_DICTS = ("_modules", "_buffers")


def _module_children(module: object, generic: bool) -> Iterable[Child]:
    d = instance_dict(module) or {}
    for key, value in list(d.items()):
        if key == "_parameters":
            # Parameters hold no step graph themselves; their hooks' closures and
            # their public attributes (``weight.kfac_a = input``) can.
            if type(value) is dict:
                k = kinds()
                for name, param in list(value.items()):
                    if param is not None and (
                        k.tensor_hooks(param) or k.tensor_attrs(param) is not None
                    ):
                        yield _attr(name), LinkKind.READONLY, value, name, param
            continue
        if key in _MODULE_PLAIN_DICTS and type(value) is dict:
            for name, child in list(value.items()):
                if child is not None:
                    segment = (
                        _index(int(name)) if type(name) is str and name.isdigit() else _attr(name)
                    )
                    yield segment, LinkKind.ITEM, value, name, child
            continue
        if type(key) is str and key.endswith("_hooks") and is_instance(value, dict):
            # Hook dicts are keyed by global handle ids that differ from run to
            # run; name hooks by position so paths are stable.
            hooks = _HookDict(value)
            yield (Segment(SegmentKind.HOOKS, key),), LinkKind.READONLY, d, key, hooks
            continue
        yield _member(key), LinkKind.ATTR, d, key, value


class _HookDict:
    """A view of a module's hook dict whose children are named by position."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: dict[object, object]) -> None:
        self.hooks = hooks

    def children(self) -> Iterable[Child]:
        for i, (key, value) in enumerate(list(dict.items(self.hooks))):
            yield _index(i), LinkKind.ITEM, self.hooks, key, value


def _hook_children(obj: Any, generic: bool) -> Iterable[Child]:
    return obj.children()  # type: ignore[no-any-return]


def _function_children(fn: types.FunctionType, generic: bool) -> Iterable[Child]:
    module = fn.__module__
    if is_library_module(module if type(module) is str else ""):
        return
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            yield (Segment(SegmentKind.CELL, name),), LinkKind.CELL, cell, None, value
    if fn.__defaults__:
        for i, value in enumerate(fn.__defaults__):
            yield (*_attr("__defaults__"), *_index(i)), LinkKind.DEFAULTS, fn, i, value
    kwdefaults = fn.__kwdefaults__
    if type(kwdefaults) is dict:
        for key, value in list(kwdefaults.items()):
            yield (*_attr("__kwdefaults__"), *_key(key)), LinkKind.ITEM, kwdefaults, key, value
    d = fn.__dict__
    for key, value in list(d.items()):
        yield _key(key), LinkKind.ITEM, d, key, value


_CHILDREN: dict[int, Any] = {
    _ATOM: _nothing,
    _CLASS: _nothing,
    _TENSOR: _nothing,
    _NODE: _nothing,
    _HOOKS: _hook_children,
    _DICT: _dict_children,
    _LIST: _list_children,
    _DEQUE: _deque_children,
    _TUPLE: _tuple_children,
    _SET: _set_children,
    _FROZENSET: _frozenset_children,
    _TD: _tensordict_children,
    _MODULE: _module_children,
    _FUNCTION: _function_children,
    _METHOD: _method_children,
    _BUILTIN_METHOD: _builtin_method_children,
    _PARTIAL: _partial_children,
    _CELL: _cell_children,
    _EXCEPTION: _exception_children,
    _WEAK_KEYS: _weak_key_children,
    _SUSPENDED_FRAME: _frame_children,
    _LRU: _lru_and_object_children,
    _PROXY: _proxy_children,
    _LOCAL: _local_children,
    _CONTEXT: _context_children,
    _LIBRARY: _library_children,
    _TENSORCLASS: _tensorclass_children,
    _OBJECT: _object_children,
}


def class_children(cls: type) -> Iterable[Child]:
    """Class-level state (``Engine.cache = []``) of a class defined in a walked module, read from
    the class's own namespace (no metaclass hook, no descriptor's ``__get__``)."""
    for key, value in list(class_dict(cls).items()):
        if type(key) is not str or (key.startswith("__") and key.endswith("__")):
            continue
        if is_instance(value, (staticmethod, classmethod, property)):
            continue
        yield _attr(key), LinkKind.CLASSATTR, cls, key, value


def module_globals(module: types.ModuleType, generic: bool = False) -> Iterable[Child]:
    """The globals of a user module that can hold state: containers, objects, functions, classes
    (with ``generic``, objects of any type but modules and other modules' classes and functions)."""
    name = safe.module_name(module)
    d = safe.module_dict(module)
    if d is None:
        return
    for key, value in list(d.items()):
        if type(key) is not str or (key.startswith("__") and key.endswith("__")):
            continue
        tp = type(value)
        if tp in _PLAIN_ATOMS:  # NOTE [Atoms left out early]
            continue
        if is_subtype(tp, types.ModuleType):
            continue
        if is_subtype(tp, type):
            if type_module(value) != name:
                continue
            yield _attr(key), LinkKind.READONLY, d, key, value
            continue
        if tp is types.FunctionType and _function_module(value) != name and not value.__closure__:
            continue  # another module's plain function; a closure made there keeps its cells here
        if not (_is_state(value, name) or (generic and not is_interpreter_internal(tp))):
            continue
        yield _attr(key), LinkKind.ITEM, d, key, value


def _function_module(fn: types.FunctionType) -> str:
    """A function's ``__module__`` when it is a string (a job may set it to anything), else ``""``."""
    module = fn.__module__
    return module if type(module) is str else ""


def _is_state(value: object, module_name: str) -> bool:
    tp = type(value)
    if type_module(tp) in ("builtins", "collections", "types", "functools", module_name):
        return True  # containers, SimpleNamespace, partial, and the module's own objects
    if tp is _LRU_WRAPPER:  # a module's own cached function keeps its results
        return (instance_dict(value) or {}).get("__module__") == module_name
    kind = _kind_of(tp)
    return kind in (_TENSOR, _NODE, _TD)


@dataclasses.dataclass
class WalkStats:
    """What a walk did: objects entered, whether it stopped early and why, the objects whose
    children could not be listed (counted, never silently skipped), and the references to
    tensors it did not name again (NOTE [Each reference once])."""

    visited: int = 0
    truncated: bool = False
    errors: int = 0
    #: the first error: ``TypeError: ... at engine.x``
    first_error: str | None = None
    #: references to an already named tensor or node left unnamed
    repeated: int = 0
    #: the time budget (seconds) that stopped the walk, if that is what stopped it
    stopped_after: float | None = None

    def note_error(self, exc: BaseException, where: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = error_line(exc, where)


def _slot_of(child: Child | None) -> tuple[int, Any]:
    """Where a reference sits, for NOTE [Each reference once]: its container, and the name it has
    there (every entry of a list, a set or a step-keyed mapping counts as one slot). With the
    path that reached the container (its link), a slot names one reference per path: a closure
    cell two functions share is named under each."""
    if child is None:
        return 0, ""
    segments = child[0]
    if segments is None:  # a list or deque entry
        return id(child[2]), "*"
    if not segments:
        return id(child[2]), ""
    last = segments[-1]
    if last.kind in ENTRY_KINDS or (last.kind is SegmentKind.KEY and not _identifier(last.name)):
        return id(child[2]), "*"
    return id(child[2]), (last.kind, last.name)


def walk(
    roots: Iterable[Root],
    *,
    skip_ids: Iterable[int] = (),
    max_objects: int = 2_000_000,
    stats: WalkStats | None = None,
    generic: bool = False,
    max_seconds: float | None = None,
) -> Iterator[Hit]:
    """Yield every tensor and autograd node reachable from ``roots``, depth first.

    Objects whose ``id`` is in ``skip_ids`` are not entered (the model, for
    instance, is walked as its own root). Parameters are neither yielded nor
    entered. Roots are walked in order and share one visited set, so an object
    reachable from two roots is named under the first.

    ``generic`` is the fallback for graphs the typed walk cannot name: it also
    enters objects of library types the user owns (by their attributes, or
    through ``gc.get_referents``) and every kind of module global, skipping only
    leakscope's machinery and torch's internals (:mod:`leakscope.probe.library`).
    An object whose children cannot be listed is counted in ``stats.errors``.

    # NOTE [Each reference once]
    # A tensor is yielded once per slot that holds it (a container reached
    # by one path, and the name it has there, every entry of a list, a set or
    # a step-keyed mapping being one slot), at most MAX_NAMED times: a list of
    # 10^6 entries of one tensor, a dict of 10^6 step keys mapping to it, or a
    # chain of 10^6 containers each holding it name it once (or MAX_NAMED
    # times), so everything after the walk (describing, confirming, the report)
    # stays linear in the objects, not the references. The other references
    # are counted in ``stats.repeated``; a fix for the named slot (clear the
    # list, detach the value) covers its siblings.
    #
    # NOTE [A bounded walk]
    # The walk stops after ``max_objects`` objects, or after ``max_seconds``
    # (default WALK_SECONDS: ``stats.stopped_after``), and the result says so in a
    # warning ("the holder walk stopped after 60 s; some holders may be
    # unnamed"): without a child process to kill (``--no-isolate``) it is the
    # only bound. It reports itself as the check's "walking" step, so a timeout
    # in a child process names it.
    """
    budget = WALK_SECONDS if max_seconds is None else max_seconds
    deadline = time.monotonic() + budget
    skip = set(skip_ids)
    visited: set[int] = set()
    named: dict[int, int] = {}  # id(tensor or node) -> slots it was named at
    slots: set[tuple[int, int, int, Any]] = set()
    seen_types: dict[int, int] = {}  # id(type) -> its kind, for this walk (the types are pinned)
    pinned: list[Any] = []
    stats = stats if stats is not None else WalkStats()
    report(step="walking")
    pops = 0
    for root in roots:
        if root.holder is not None:
            root_link = Link(None, (), LinkKind.ITEM, root.holder, root.name, root.name, root.kind)
        else:
            root_link = Link(None, (), LinkKind.READONLY, None, None, root.name, root.kind)
        # Entries: (object, the link of the object holding it, how it is held there); a Link
        # is made only for what is named or entered.
        stack: list[tuple[Any, Link, Child | None]] = []
        child: Child | None
        if root.kind is RootKind.GLOBAL:
            module = root.obj
            namespace = safe.module_dict(module)
            if namespace is None:  # not a module (a job's ``sys.modules['x'] = object()``)
                stats.note_error(
                    TypeError(f"a {type_name(type(module))} where a module was expected"), root.name
                )
                continue
            visited.add(id(namespace))
            try:
                globals_ = list(module_globals(module, generic))
            except Exception as exc:
                stats.note_error(exc, root.name)
                continue
            for child in globals_:
                stack.append((child[4], root_link, child))
            stack.reverse()
        else:
            stack.append((root.obj, root_link, None))
        while stack:
            obj, parent, child = stack.pop()
            pops += 1
            if not pops & 0x1FFF and time.monotonic() > deadline:
                stats.truncated, stats.stopped_after = True, budget
                return
            tp = type(obj)
            kind = seen_types.get(id(tp))
            if kind is None:
                kind = seen_types[id(tp)] = _kind_of(tp)
                pinned.append(tp)
            if kind == _ATOM:
                continue
            if kind == _CLASS:
                # Only classes defined in a walked module hold state we name.
                if not (root.kind is RootKind.GLOBAL and parent is root_link and child is not None):
                    continue
            elif kind == _TENSOR or kind == _NODE:
                oid = id(obj)
                times = named.get(oid, 0)
                if times >= MAX_NAMED:
                    stats.repeated += 1
                    continue
                slot = (oid, id(parent), *_slot_of(child))
                if slot in slots:
                    stats.repeated += 1
                    continue
                slots.add(slot)
                pinned.append(parent)  # its id stays its own while ``slots`` names it
                named[oid] = times + 1
                link = _link(parent, child)
                if kind == _NODE:
                    yield Hit(obj, link, root)
                    continue
                if times == 0:  # its hooks and attributes, once
                    for name, hooks in safe.tensor_hooks(obj):
                        hooks_link = Link(
                            link, (Segment(SegmentKind.HOOKS, name),), LinkKind.READONLY, None, None
                        )
                        stack.append((_HookDict(hooks), hooks_link, None))
                    grad = _grad_child(obj)
                    if grad is not None:
                        stack.append((grad[4], link, grad))
                    attrs = kinds().tensor_attrs(obj)
                    if attrs is not None and id(attrs) not in visited:
                        visited.add(id(attrs))
                        for key, value in list(attrs.items()):
                            if type(key) is str and not key.startswith("_"):
                                stack.append(
                                    (value, link, (_member(key), LinkKind.ATTR, attrs, key, value))
                                )
                if not safe.is_parameter(obj):
                    safe.remember_path(obj, link.path)  # a subclass's: to name its errors
                    yield Hit(obj, link, root)
                continue
            oid = id(obj)
            if kind == _HOOKS:
                # A temporary view: mark the dict it wraps, never the view's own id.
                oid = id(obj.hooks)
            if oid in visited or (oid in skip and child is not None):
                continue
            visited.add(oid)
            stats.visited += 1
            if stats.visited > max_objects:
                stats.truncated = True
                return
            link = _link(parent, child)
            try:
                children = (
                    list(class_children(obj))
                    if kind == _CLASS
                    else list(_CHILDREN[kind](obj, generic))
                )
            except Exception as exc:
                stats.note_error(exc, str(link.path()))
                continue
            atoms = _PLAIN_ATOMS  # NOTE [Atoms left out early]
            stack.extend(
                [
                    (entry[4], link, entry)
                    for entry in reversed(children)
                    if type(entry[4]) not in atoms
                ]
            )


def _grad_child(t: object) -> Child | None:
    """A tensor's ``.grad`` when it has a graph of its own.

    NOTE [A gradient that keeps a graph]: ``backward(create_graph=True)`` leaves
    in each leaf's ``.grad`` a gradient with a ``grad_fn``, and the next backward
    adds to it, graph and all: a parameter's (or any leaf's) ``.grad`` then keeps
    every step's graph, and no container does. A plain gradient (no ``grad_fn``)
    is not entered: it is the optimizer's, and holds no graph.
    """
    if not (safe.requires_grad(t) and safe.is_leaf(t)):  # only a leaf's .grad is filled in
        return None
    grad = safe.grad(t)
    if grad is None or safe.grad_fn(grad) is None:
        return None
    return _attr("grad"), LinkKind.GRAD, t, "grad", grad


def _link(parent: Link, child: Child | None) -> Link:
    """The link of an object held by ``parent``'s object as ``child`` says (a closure cell passes
    its parent's link through)."""
    if child is None:
        return parent
    segments, kind, container, key, _ = child
    if segments is None:
        segments = _index(key)
    elif kind is LinkKind.CELL and not segments:
        return parent
    return _new_link(parent, segments, kind, container, key)


# NOTE [One link per entered object]
# The walk makes a Link for every object it enters (tens of thousands per look through every
# loaded module, NOTE [Every loaded module]); a frozen dataclass's ``__init__`` sets each field
# through ``object.__setattr__``, about three times the cost of filling the instance dict at
# once. ``_new_link`` makes the same object (the fields below, checked against the dataclass's
# when this module is imported), equal to one made by ``Link(...)``.
_LINK_FIELDS = ("parent", "segments", "kind", "container", "key", "root", "root_kind")
if tuple(f.name for f in dataclasses.fields(Link)) != _LINK_FIELDS:  # pragma: no cover
    raise ImportError("leakscope.probe.walk: _LINK_FIELDS is out of step with Link's fields")


def _new_link(
    parent: Link, segments: tuple[Segment, ...], kind: LinkKind, container: Any, key: Any
) -> Link:
    link: Link = object.__new__(Link)
    d = link.__dict__
    d["parent"] = parent
    d["segments"] = segments
    d["kind"] = kind
    d["container"] = container
    d["key"] = key
    d["root"] = ""
    d["root_kind"] = ""
    return link
