"""Walk arbitrary Python object structures and name every tensor they hold.

The walk is the observer of the check, so it must not change what it observes:

- it never calls user code: no properties, no ``__getattr__``, ``__eq__``,
  ``__hash__`` or ``__iter__`` overrides (it reads ``__dict__``, slot
  descriptors and the C-level contents of builtin containers);
- it is iterative, so 10k-deep nesting needs no recursion limit, and it visits
  each container once (by ``id``), so cycles terminate;
- it is bounded by ``max_objects``;
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
import functools
import gc
import threading
import types
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from leakscope.holders import HolderPath, Segment, SegmentKind, key_segment
from leakscope.probe.library import (
    is_interpreter_internal,
    is_library_module,
    is_library_type,
)

# Segment kinds: how a child is reached from its parent, and how it can be
# replaced there (see ``release``).
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
READONLY = "readonly"  # reachable, but cannot be replaced


@dataclasses.dataclass(frozen=True)
class Root:
    """A named starting point: ``output``, ``engine``, ``micro_batch``, ``module``, ``global:mod``."""

    name: str
    obj: Any
    kind: str
    #: a dict with ``holder[name] is obj``, so the root itself can be released
    holder: Any = None


@dataclasses.dataclass(frozen=True)
class Link:
    """How an object was reached: parent link, path segment, and the slot it sits in.

    A root's link has no parent and no segments; it carries the root's name.
    """

    parent: Link | None
    segments: tuple[Segment, ...]
    kind: str
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
    type(None), bool, int, float, complex, str, bytes, bytearray, range, type(Ellipsis),
    types.ModuleType, types.CodeType, types.FrameType, types.TracebackType,
    types.BuiltinFunctionType, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.WrapperDescriptorType, types.MethodWrapperType, memoryview, slice,
)
def _identifier(key: object) -> bool:
    return type(key) is str and key.isidentifier()


def _key(key: object) -> tuple[Segment, ...]:
    return (key_segment(key),)


def _attr(name: str) -> tuple[Segment, ...]:
    return (Segment(SegmentKind.ATTR, name),)


def _index(i: int) -> tuple[Segment, ...]:
    return (Segment(SegmentKind.INDEX, i),)


class _Kinds:
    """Type tests resolved lazily, so importing this module stays torch-free."""

    def __init__(self) -> None:
        import torch
        from torch.autograd.graph import Node

        self.torch = torch
        self.tensor = torch.Tensor
        self.module = torch.nn.Module
        self.node = Node
        self.cfunction_base = torch._C._FunctionBase
        self._node_types: dict[type, bool] = {}
        # C-level getters, so a tensor subclass's Python override is never called.
        base = torch._C.TensorBase.__dict__
        self.tensor_hook_getters = tuple(
            (name, base[name]) for name in ("_backward_hooks", "_post_accumulate_grad_hooks") if name in base
        )
        try:
            from tensordict.base import TensorDictBase

            self.tensordict: type | None = TensorDictBase
        except Exception:  # tensordict missing or changed: walk TDs as objects
            self.tensordict = None

    def is_parameter(self, obj: Any) -> bool:
        return isinstance(obj, self.torch.nn.Parameter)

    def tensor_hooks(self, t: Any) -> list[tuple[str, dict[Any, Any]]]:
        """``(name, hooks)`` for the Python hook dicts registered on ``t`` (``register_hook``,
        ``register_post_accumulate_grad_hook``): their closures can hold another step's graph."""
        out = []
        for name, getter in self.tensor_hook_getters:
            try:
                hooks = getter.__get__(t)
            except Exception:
                continue
            if isinstance(hooks, dict) and hooks:
                out.append((name, hooks))
        return out

    def tensor_attrs(self, t: Any) -> dict[str, Any] | None:
        """A tensor's instance ``__dict__`` when it has public attributes
        (``weight.kfac_a = input``, ``t.source = x``); private ones (a DTensor's
        ``_local_tensor``, ``_spec``) are the tensor's own machinery."""
        d = _instance_dict(t)
        if d and any(type(key) is str and not key.startswith("_") for key in d):
            return d
        return None

    def is_node(self, obj: Any) -> bool:
        """An autograd graph node (``loss.grad_fn``, a GradientEdge's ``.node``, ...).

        Decided by type alone (``issubclass`` on ``Node``'s class-based
        subclass hook), never ``isinstance``, which would read a user object's
        ``__class__``; cached per type. C++ nodes report ``__module__ ==
        'builtins'`` on torch 2.13, so the module name cannot decide it.
        """
        tp = type(obj)
        known = self._node_types.get(tp)
        if known is None:
            try:
                known = issubclass(tp, self.cfunction_base) or issubclass(tp, self.node)
            except Exception:
                known = False
            self._node_types[tp] = known
        return known


@functools.lru_cache(maxsize=1)
def kinds() -> _Kinds:
    return _Kinds()


def _instance_dict(obj: object) -> dict[str, Any] | None:
    try:
        d = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return d if type(d) is dict else None


def _slot_values(obj: object) -> Iterator[tuple[str, Any, Any]]:
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__")
        if not slots:
            continue
        if isinstance(slots, str):
            slots = (slots,)
        for name in slots:
            if name in ("__dict__", "__weakref__"):
                continue
            descr = klass.__dict__.get(name)
            if type(descr) is not types.MemberDescriptorType:
                continue
            try:
                value = descr.__get__(obj, klass)
            except AttributeError:  # an unset slot holds nothing
                continue
            yield name, value, descr


Child = tuple[tuple[Segment, ...], str, Any, Any, Any]  # segments, kind, container, key, value


def _children(obj: Any, k: _Kinds, generic: bool = False) -> Iterable[Child]:
    tp = type(obj)
    if tp is _HookDict:
        yield from obj.children()
        return
    if issubclass(tp, dict):
        items = list(dict.items(obj))
        for key, value in items:
            yield _key(key), ITEM, obj, key, value
        for key, _ in items:
            # A tensor (or graph node) used as a key is held by the dict too.
            if issubclass(type(key), k.tensor) or k.is_node(key):
                yield (Segment(SegmentKind.KEY_OBJECT, type(key).__name__),), DICT_KEY, obj, key, key
        seen = {id(v) for _, v in items}
        d = _instance_dict(obj)
        if d:
            for key, value in list(d.items()):
                if id(value) not in seen:
                    yield _attr(key), ATTR, d, key, value
        return
    if issubclass(tp, (list, deque)):
        values = list(list.__iter__(obj)) if issubclass(tp, list) else list(deque.__iter__(obj))
        for i, value in enumerate(values):
            yield _index(i), ITEM, obj, i, value
        return
    if issubclass(tp, tuple):
        fields = getattr(tp, "_fields", None)
        values = list(tuple.__iter__(obj))
        names: tuple[Any, ...] = fields if isinstance(fields, tuple) and len(fields) == len(values) else ()
        for i, value in enumerate(values):
            segment = _attr(names[i]) if names and _identifier(names[i]) else _index(i)
            yield segment, TUPLE, obj, i, value
        return
    if issubclass(tp, (set, frozenset)):
        kind = SET if issubclass(tp, set) else READONLY
        for value in list(set.__iter__(obj) if issubclass(tp, set) else frozenset.__iter__(obj)):
            yield (Segment(SegmentKind.MEMBER),), kind, obj, value, value
        return
    if k.tensordict is not None and issubclass(tp, k.tensordict):
        yield from _tensordict_children(obj)
        return
    if issubclass(tp, k.module):
        yield from _module_children(obj)
        return
    if tp is types.FunctionType:
        yield from _function_children(obj)
        return
    if tp is types.MethodType:
        yield _attr("__self__"), READONLY, obj, "__self__", obj.__self__
        yield _attr("__func__"), READONLY, obj, "__func__", obj.__func__
        return
    if tp is types.BuiltinMethodType:
        owner = getattr(obj, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            yield _attr("__self__"), READONLY, obj, "__self__", owner
        return
    if tp is functools.partial:
        yield _attr("func"), READONLY, obj, "func", obj.func
        for i, value in enumerate(obj.args):
            yield (*_attr("args"), *_index(i)), PARTIAL_ARG, obj, i, value
        for key, value in (obj.keywords or {}).items():
            yield (*_attr("keywords"), *_key(key)), ITEM, obj.keywords, key, value
        return
    if tp is types.CellType:
        try:
            yield (), CELL, obj, None, obj.cell_contents
        except ValueError:  # empty cell
            pass
        return
    if issubclass(tp, BaseException):
        yield from _exception_children(obj)
        return
    if issubclass(tp, weakref.WeakKeyDictionary):
        yield from _weak_key_children(obj)
        return
    if tp in _SUSPENDED:
        yield from _frame_children(obj)
        return
    if tp is _LRU_WRAPPER:
        yield from _lru_children(obj)  # then its __dict__ (``__wrapped__``), below
    if tp is types.MappingProxyType:
        # A read-only view: its entries are the mapping's (``output.stats['entropy']``).
        mappings = [r for r in gc.get_referents(obj) if isinstance(r, dict)]
        if mappings:
            yield from _children(mappings[0], k, generic)
        return
    if tp is _THREAD_LOCAL:
        # This thread's attributes of a ``threading.local()`` (the thread that ran the step):
        # the C type's own getter picks the thread's dict; the generic one sees none.
        d = _THREAD_LOCAL.__getattribute__(obj, "__dict__")
        for key, value in list((d or {}).items()):
            yield _key(key), ATTR, d, key, value
        return
    if tp is _CONTEXT_VAR:
        value = obj.get(_NO_VALUE)
        if value is not _NO_VALUE:
            yield (Segment(SegmentKind.CALL, "get"),), CONTEXT_VAR, obj, None, value
        return
    if is_library_type(tp):
        if not generic or is_interpreter_internal(tp):
            return
        yield from _generic_children(obj)
        return
    if getattr(tp, "_is_tensorclass", False):
        d = _instance_dict(obj) or {}
        inner = d.get("_tensordict")
        if inner is not None:
            yield from _tensordict_children(inner)
        extra = d.get("_non_tensordict")
        if type(extra) is dict:
            for key, value in list(extra.items()):
                yield _key(key), ITEM, extra, key, value
        return
    d = _instance_dict(obj)
    if d:
        for key, value in list(d.items()):
            yield _key(key), ATTR, d, key, value
    found = bool(d)
    for name, value, descr in _slot_values(obj):
        found = True
        yield _attr(name), SLOT, obj, descr, value
    if generic and not found and not is_interpreter_internal(tp):
        yield from _referents(obj)


def _generic_children(obj: Any) -> Iterable[Child]:
    """A library object the user owns: its attributes, else what the interpreter says it refers to."""
    d = _instance_dict(obj)
    if d:
        for key, value in list(d.items()):
            yield _key(key), ATTR, d, key, value
        return
    slots = list(_slot_values(obj))
    for name, value, descr in slots:
        yield _attr(name), SLOT, obj, descr, value
    if not slots:
        yield from _referents(obj)


def _referents(obj: Any) -> Iterable[Child]:
    """What a C-level object (an iterator, a ``methodcaller``, a ``weakref.finalize`` record)
    refers to, named by the referent's type (``engine.pending.<list>[0]``). Read through
    ``gc.get_referents``: no user code runs."""
    for value in gc.get_referents(obj):
        if isinstance(value, (type, types.ModuleType, types.CodeType)):
            continue
        yield (Segment(SegmentKind.REFERENT, type(value).__name__),), READONLY, obj, None, value


_THREAD_LOCAL = threading.local
_CONTEXT_VAR = contextvars.ContextVar
_NO_VALUE = object()
_SUSPENDED = {types.GeneratorType: "gi_frame", types.CoroutineType: "cr_frame", types.AsyncGeneratorType: "ag_frame"}
_LRU_WRAPPER = type(functools.lru_cache(maxsize=1)(lambda: None))


def _weak_key_children(wkd: weakref.WeakKeyDictionary[Any, Any]) -> Iterable[Child]:
    """Values of a ``WeakKeyDictionary`` are held strongly (only the keys are weak)."""
    data = (_instance_dict(wkd) or {}).get("data")
    if type(data) is not dict:
        return
    for ref, value in list(dict.items(data)):
        key = ref() if isinstance(ref, weakref.ref) else None
        yield (_key(key) if key is not None else (Segment(SegmentKind.OBJECT_KEY, "dead key"),)), ITEM, data, ref, value


def _frame_children(gen: Any) -> Iterable[Child]:
    """Locals (and closed-over cells) of a suspended generator or coroutine.

    Read from the frame (``gi_frame.f_locals``), never by resuming it; see
    :func:`leakscope.probe.release._set_frame_local` for how one is released. Before Python 3.13
    reading ``f_locals`` leaves a snapshot dict on the frame; it refers only to
    what the frame's locals refer to at that moment, and every later walk
    refreshes it before anything is judged alive, so it cannot turn a freed
    graph into a finding.
    """
    attr = _SUSPENDED[type(gen)]
    frame = getattr(gen, attr, None)
    if frame is not None:  # None: finished, holds nothing
        yield from _frame_locals(frame, _attr(attr), follow_back=False)


def _exception_children(exc: BaseException) -> Iterable[Child]:
    """What a stored exception keeps: its ``args``, its attributes, the locals of
    every frame of its traceback (``self.last_error = e`` keeps the whole failed
    step's frames), and the exceptions it chains to."""
    for i, value in enumerate(exc.args):
        yield (*_attr("args"), *_index(i)), EXC_ARG, exc, i, value
    d = _instance_dict(exc)
    if d:
        for key, value in list(d.items()):
            yield _key(key), ATTR, d, key, value
    tb = exc.__traceback__
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
        chained = getattr(exc, attr, None)
        if chained is not None:
            yield _attr(attr), READONLY, exc, attr, chained


def _frame_locals(frame: Any, segment: tuple[Segment, ...], *, follow_back: bool) -> Iterable[Child]:
    """Locals of a finished frame, and with ``follow_back`` its callers' frames up to the
    first one of a library package (leakscope's own caller frames, torch, pytest), whose
    locals are not the engine's."""
    while frame is not None:
        if is_library_module(str(frame.f_globals.get("__name__", ""))):
            return
        for name, value in list(frame.f_locals.items()):
            yield (*segment, Segment(SegmentKind.LOCAL, name)), FRAME, frame, name, value
        if not follow_back:
            return
        frame = frame.f_back
        segment = (*segment, *_attr("f_back"))


def _lru_children(wrapper: Any) -> Iterable[Child]:
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
    import gc

    refs = gc.get_referents(wrapper)
    caches = [r for r in refs if type(r) is dict and r]
    if not caches:
        return
    cache = caches[0]
    keys = {id(key) for key in cache}
    entry_type = type(next(iter(cache.values())))
    if entry_type.__name__ != "_lru_list_elem":
        results = list(cache.values())
    else:
        results = [refs[i - 1] for i in range(2, len(refs)) if refs[i] is entry_type and id(refs[i - 2]) in keys]
    # Newest last: the entry a step just added is ``cache[-1]`` however old the cache is.
    for i, value in enumerate(results):
        yield (Segment(SegmentKind.CACHE, "cache"), *_index(i - len(results))), LRU, wrapper, None, value


def _tensordict_children(td: Any) -> Iterable[Child]:
    d = _instance_dict(td) or {}
    inner = d.get("_tensordict")
    if type(inner) is dict:
        for key, value in list(inner.items()):
            yield _key(key), TD, td, key, value
        return
    stacked = d.get("tensordicts")
    if type(stacked) is list:
        for i, value in enumerate(stacked):
            yield _index(i), READONLY, stacked, i, value
        return
    for key, value in list(td.items()):
        yield _key(key), TD, td, key, value


_MODULE_PLAIN_DICTS = ("_modules", "_buffers")


def _module_children(module: Any) -> Iterable[Child]:
    d = _instance_dict(module) or {}
    for key, value in list(d.items()):
        if key == "_parameters":
            # Parameters hold no step graph themselves; their hooks' closures and
            # their public attributes (``weight.kfac_a = input``) can.
            if type(value) is dict:
                k = kinds()
                for name, param in list(value.items()):
                    if param is not None and (k.tensor_hooks(param) or k.tensor_attrs(param) is not None):
                        yield _attr(name), READONLY, value, name, param
            continue
        if key in _MODULE_PLAIN_DICTS and type(value) is dict:
            for name, child in list(value.items()):
                if child is not None:
                    segment = _index(int(name)) if name.isdigit() else _attr(name)
                    yield segment, ITEM, value, name, child
            continue
        if key.endswith("_hooks") and isinstance(value, dict):
            # Hook dicts are keyed by global handle ids that differ from run to
            # run; name hooks by position so paths are stable.
            hooks = _HookDict(value)
            yield (Segment(SegmentKind.HOOKS, key),), READONLY, d, key, hooks
            continue
        yield _key(key), ATTR, d, key, value


class _HookDict:
    """A view of a module's hook dict whose children are named by position."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: dict[Any, Any]) -> None:
        self.hooks = hooks

    def children(self) -> Iterable[Child]:
        for i, (key, value) in enumerate(list(dict.items(self.hooks))):
            yield _index(i), ITEM, self.hooks, key, value


def _function_children(fn: types.FunctionType) -> Iterable[Child]:
    if is_library_module(fn.__module__ or ""):
        return
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            yield (Segment(SegmentKind.CELL, name),), CELL, cell, None, value
    if fn.__defaults__:
        for i, value in enumerate(fn.__defaults__):
            yield (*_attr("__defaults__"), *_index(i)), DEFAULTS, fn, i, value
    if fn.__kwdefaults__:
        for key, value in list(fn.__kwdefaults__.items()):
            yield (*_attr("__kwdefaults__"), *_key(key)), ITEM, fn.__kwdefaults__, key, value
    d = fn.__dict__
    for key, value in list(d.items()):
        yield _key(key), ITEM, d, key, value


def class_children(cls: type) -> Iterable[Child]:
    """Class-level state (``Engine.cache = []``) of a class defined in a walked module."""
    for key, value in list(vars(cls).items()):
        if key.startswith("__") and key.endswith("__"):
            continue
        if isinstance(value, (staticmethod, classmethod, property)):
            continue
        yield _attr(key), CLASSATTR, cls, key, value


def module_globals(module: types.ModuleType, generic: bool = False) -> Iterable[Child]:
    """The globals of a user module that can hold state: containers, objects, functions, classes
    (with ``generic``, objects of any type but modules and other modules' classes and functions)."""
    name = module.__name__
    d = module.__dict__
    for key, value in list(d.items()):
        if key.startswith("__") and key.endswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            continue
        if isinstance(value, type):
            if value.__module__ != name:
                continue
            yield _attr(key), READONLY, d, key, value
            continue
        if isinstance(value, types.FunctionType) and value.__module__ != name:
            continue
        if not (_is_state(value, name) or (generic and not is_interpreter_internal(type(value)))):
            continue
        yield _attr(key), ITEM, d, key, value


def _is_state(value: Any, module_name: str) -> bool:
    tp = type(value)
    if tp.__module__ in ("builtins", "collections", "types", "functools", module_name):
        return True  # containers, SimpleNamespace, partial, and the module's own objects
    if tp is _LRU_WRAPPER:  # a module's own cached function keeps its results
        return getattr(value, "__module__", None) == module_name
    k = kinds()
    if issubclass(tp, k.tensor) or k.is_node(value):
        return True
    if k.tensordict is not None and issubclass(tp, k.tensordict):
        return True
    return False


@dataclasses.dataclass
class WalkStats:
    """What a walk did: objects entered, whether it hit ``max_objects``, and the objects whose
    children could not be listed (counted, never silently skipped)."""

    visited: int = 0
    truncated: bool = False
    errors: int = 0
    #: the first error: ``TypeError: ... at engine.x``
    first_error: str | None = None

    def note_error(self, exc: BaseException, where: str) -> None:
        self.errors += 1
        if self.first_error is None:
            text = str(exc).strip().splitlines()
            self.first_error = f"{type(exc).__name__}: {text[0] if text else '(no message)'} at {where}"


def walk(
    roots: Iterable[Root],
    *,
    skip_ids: Iterable[int] = (),
    max_objects: int = 2_000_000,
    stats: WalkStats | None = None,
    generic: bool = False,
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
    """
    k = kinds()
    skip = set(skip_ids)
    visited: set[int] = set()
    stats = stats if stats is not None else WalkStats()
    for root in roots:
        if root.holder is not None:
            root_link = Link(None, (), ITEM, root.holder, root.name, root.name, root.kind)
        else:
            root_link = Link(None, (), READONLY, None, None, root.name, root.kind)
        stack: list[tuple[Any, Link]] = []
        if root.kind == "global":
            module = root.obj
            visited.add(id(module.__dict__))
            for segment, kind, container, key, value in module_globals(module, generic):
                stack.append((value, Link(root_link, segment, kind, container, key)))
            stack.reverse()
        else:
            stack.append((root.obj, root_link))
        while stack:
            obj, link = stack.pop()
            tp = type(obj)
            is_class = isinstance(obj, type)
            if is_class:
                # Only classes defined in a walked module hold state we name.
                if not (root.kind == "global" and link.parent is root_link):
                    continue
            elif issubclass(tp, _ATOMS):
                continue
            if issubclass(tp, k.tensor):
                if not k.is_parameter(obj):
                    yield Hit(obj, link, root)
                for name, hooks in k.tensor_hooks(obj):
                    stack.append((_HookDict(hooks), Link(link, (Segment(SegmentKind.HOOKS, name),), READONLY, None, None)))
                attrs = k.tensor_attrs(obj)
                if attrs is not None and id(attrs) not in visited:
                    visited.add(id(attrs))
                    for key, value in list(attrs.items()):
                        if type(key) is str and not key.startswith("_"):
                            stack.append((value, Link(link, _key(key), ATTR, attrs, key)))
                continue
            if k.is_node(obj):
                yield Hit(obj, link, root)
                continue
            oid = id(obj)
            if tp is _HookDict:
                # A temporary view: mark the dict it wraps, never the view's own id.
                oid = id(obj.hooks)
            if oid in visited or (oid in skip and link is not root_link):
                continue
            visited.add(oid)
            stats.visited += 1
            if stats.visited > max_objects:
                stats.truncated = True
                return
            try:
                if is_class:
                    children = list(class_children(obj))
                else:
                    children = list(_children(obj, k, generic))
            except Exception as exc:
                stats.note_error(exc, str(link.path()))
                continue
            for segment, kind, container, key, value in reversed(children):
                if kind == CELL and not segment:
                    stack.append((value, link))
                else:
                    stack.append((value, Link(link, segment, kind, container, key)))
