"""Stored at: the user line that put the retaining tensor into its holder.

# NOTE [Stored at]
# "created at" (anomaly-mode stack traces) says where a tensor was computed;
# the fix goes where it was *kept*: ``self.history.append(x)``,
# ``self.last = x``, ``cache[k] = x``, a ``register_buffer``, a return. Only
# when a leak was found, the step is run once more on a fresh model and engine
# with ``sys.settrace`` installed for frames in user files (the tracer returns
# no local trace function for library frames, so torch and leakscope run
# untraced). Before every traced line, and when a traced frame returns, each
# finding's holder path is resolved from the roots that exist before the step
# (``engine``, ``module``, ``micro_batch``, ``global:``); the first time the
# object at that path changes identity, the line executed just before (the
# most recent traced line) is the one that stored it. Holders under
# ``output`` are stored by the step's return: the return line of the
# outermost traced frame. Paths the resolver cannot follow (a generator's
# frame, a key that is a tensor) keep no stored-at line. A clean engine never
# pays for this: it runs only for leak findings.
"""

from __future__ import annotations

import ast
import contextvars
import dataclasses
import linecache
import os
import re
import sys
import types
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from leakscope.harness.source import display_path
from leakscope.holders import HolderPath, RootKind, Segment, SegmentKind
from leakscope.probe import safe
from leakscope.probe.autograd import ScanStats, graph_tensors
from leakscope.probe.library import is_library_type
from leakscope.results import Source

_MISSING = object()


def _key(segment: Segment) -> object:
    """The mapping key a KEY segment names (an identifier as is; a builtin literal from its repr)."""
    name = segment.name
    if type(name) is str and not name.isidentifier():
        try:
            return ast.literal_eval(name)
        except (ValueError, SyntaxError):
            return _MISSING
    return name


def _step(obj: Any, segment: Segment) -> object:
    """The object one typed segment leads to from ``obj`` now (``_MISSING`` if it cannot be followed).

    Read as the walk reads (NOTE [Reads that run no user code] in leakscope/probe/safe.py): an
    instance dict, a class's own namespace, a slot, a named tuple's field, a C-level attribute, a
    builtin container's entry; never a property, ``__getattr__``, ``__getitem__`` or ``__iter__``
    of the engine's classes (the tracer resolves paths before every traced line).
    """
    kind, name = segment.kind, segment.name
    if kind in (SegmentKind.ATTR, SegmentKind.HOOKS, SegmentKind.CELL):
        return _attribute(obj, str(name))
    if kind is SegmentKind.KEY:
        key = _key(segment)
        if key is _MISSING:
            return _MISSING
        return _entry(obj, key)
    if kind is SegmentKind.INDEX and type(name) is int:
        if safe.is_instance(obj, dict):  # an OrderedDict of hooks, by position
            values = list(dict.values(obj))
            return values[name] if -len(values) <= name < len(values) else _MISSING
        for base in (list, tuple, deque):
            if safe.is_instance(obj, base):
                try:
                    return base.__getitem__(obj, name)
                except IndexError:
                    return _MISSING
        children = (safe.instance_dict(obj) or {}).get("_modules")
        if type(children) is dict:  # a ModuleList's or Sequential's child, by position
            values = list(dict.values(children))
            return values[name] if -len(values) <= name < len(values) else _MISSING
        return _MISSING
    if kind is SegmentKind.CALL and name == "get" and type(obj) is contextvars.ContextVar:
        return obj.get(_MISSING)
    return _MISSING  # a frame local, a set member, an object key, a referent: not followed


#: an ``nn.Module``'s own dicts, whose entries the walk names as the module's attributes
_MODULE_DICTS = ("_modules", "_buffers", "_parameters")


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name`` as the walk named it (see :func:`_step`)."""
    if type(obj) is types.FunctionType and name in obj.__code__.co_freevars and obj.__closure__:
        try:
            return obj.__closure__[obj.__code__.co_freevars.index(name)].cell_contents
        except ValueError:
            return _MISSING
    if safe.is_instance(obj, type):  # class state: the class's own namespace
        return safe.class_dict(obj).get(name, _MISSING)
    d = safe.thread_local_dict(obj) or safe.instance_dict(obj)
    if d is not None:
        if name in d:
            return d[name]
        for inner in _MODULE_DICTS:  # a module's children, buffers, parameters
            entries = d.get(inner)
            if type(entries) is dict and name in entries:
                return entries[name]
    for slot, value, _ in safe.slot_values(obj):
        if slot == name:
            return value
    tp = type(obj)
    if safe.is_subtype(tp, tuple):
        fields = safe.class_attr(tp, "_fields", want=tuple)
        if fields is not None and all(type(f) is str for f in fields) and name in fields:
            index = fields.index(name)
            return tuple.__getitem__(obj, index) if index < tuple.__len__(obj) else _MISSING
    descr = safe.class_attr(tp, name)
    if safe.is_exactly(descr, (types.GetSetDescriptorType, types.MemberDescriptorType)):
        # A C-level attribute (``partial.args``, ``exc.__traceback__``, ``t._backward_hooks``).
        try:
            return safe.tensor_read(obj, lambda o: descr.__get__(o, tp))
        except Exception:
            return _MISSING
    if safe.is_instance(obj, dict):  # a hook dict's or a module dict's entry by name
        return dict.get(obj, name, _MISSING)
    return _MISSING


def _entry(obj: Any, key: Any) -> object:
    """``obj[key]`` as the walk named it: a dict's entry, an attribute the walk named by its
    ``__dict__`` key, or an entry of a library container (a TensorDict, a ``threading.local``)."""
    if safe.is_instance(obj, dict):
        return dict.get(obj, key, _MISSING)
    d = safe.instance_dict(obj)
    if d is not None:
        if type(key) is str and key in d:
            return d[key]
        entries = d.get(
            "_tensordict"
        )  # a TensorDict's (or a tensorclass's) entries, as the walk reads them
        if type(entries) is dict and key in entries:
            return entries[key]
    tp = type(obj)
    if is_library_type(tp) or safe.class_attr(tp, "_is_tensorclass") is True:
        # The library's own lookup (its code, not the engine's).
        try:
            return obj[key]
        except Exception:
            return getattr(obj, str(key), _MISSING)
    return _MISSING


def _length(container: Any) -> int:
    """``len(container)`` of a builtin container (by its base type's own method), else -1."""
    for base in (list, tuple, deque, dict):
        if safe.is_instance(container, base):
            return int(base.__len__(container))
    return -1


def resolver(path: HolderPath, roots: dict[str, object]) -> Callable[[], Any] | None:
    """A function returning the object at ``path`` now (``_MISSING`` when absent), or None."""
    if path.root in roots:
        obj = roots[path.root]

        def root() -> object:
            return obj
    elif path.root_kind is RootKind.GLOBAL:
        module_name = path.root.partition(":")[2]

        def root() -> object:
            return sys.modules.get(module_name, _MISSING)
    else:
        return None

    def resolve() -> Any:
        current = root()
        for segment in path.segments:
            if current is _MISSING:
                return _MISSING
            current = _step(current, segment)
        return current

    return resolve


def _signature(
    path: HolderPath, roots: dict[str, object], growth: bool
) -> Callable[[], tuple[int, ...]] | None:
    """A function returning what changes when something is stored at ``path``: the identity of the
    object there and, with ``growth``, the length of every list the path indexes (an append to
    ``output_lst`` changes ``len(output_lst)``, not ``output_lst[0]``)."""
    full = resolver(path, roots)
    if full is None:
        return None
    prefixes = [
        resolver(HolderPath(path.root, path.segments[:i], path.kind), roots)
        for i, s in enumerate(path.segments)
        if growth and s.kind is SegmentKind.INDEX
    ]

    def signature() -> tuple[int, ...]:
        now = full()
        lengths = []
        for prefix in prefixes:
            container: object = prefix() if prefix is not None else _MISSING
            lengths.append(_length(container) if container is not _MISSING else -1)
        # An in-place update (``total += loss`` on a tensor) keeps the object and bumps its version.
        version = safe.version(now) if safe.is_tensor(now) else 0
        return (-1 if now is _MISSING else id(now), version, *lengths)

    return signature


def store_op(path: HolderPath, line: str) -> str:
    """How the line stored the tensor, from the line's text and the holder path."""
    text = line.strip()
    if path.root == "output":  # what the step returns is stored by its return
        return "return"
    if path.in_hook():
        return "hook"
    metric_cache = bool(path.segments) and path.segments[-1].name == "_forward_cache"
    if metric_cache or re.search(r"\.update\(|metric\w*\(", text):
        return "metric"
    if re.search(r"register_buffer\(", text):
        return "buffer"
    if re.search(r"\.(append|extend|insert|appendleft|add)\(", text):
        return "append"
    if text.startswith("return") or text.startswith("yield"):
        return "return"
    if re.search(r"\+=|=\s*.*\b(self|type\(self\)|cls)(\.\w+)+\s*\+", text):
        return "accumulate"
    if re.search(r"\]\s*=[^=]", text):
        return "item"
    if re.search(r"^[\w.()]+\.\w+\s*=[^=]", text):
        return "attribute"
    return "assignment"


@dataclasses.dataclass(frozen=True)
class Stored:
    """The line that stored a holder's tensor, how, and whether backward had run through it by then."""

    where: Source
    #: "append", "attribute", "item", "accumulate", "buffer", "metric", "return", "hook", "assignment"
    op: str
    #: the line's source text, stripped
    code: str
    #: backward had already run through the stored tensor's graph when it was stored (a detached
    #: copy stored there changes no gradient); None when it could not be told (NOTE [Freed by backward])
    backward_done: bool | None = None
    #: the names in the line that held a tensor with a graph when it ran (NOTE [The names a fix detaches])
    graph_names: tuple[str, ...] = ()
    #: the thread's autograd sequence number when it was stored: later than the loss's node, it was
    #: stored after the loss was computed (NOTE [Fixes that never break training])
    seq: int | None = None
    #: the 1-based column where ``code`` starts on its line (its indentation + 1)
    column: int = 1
    #: a detached copy stored there cannot change a gradient: it was stored after the step's loss
    #: was computed, or a run that stored it detached gave the same gradients; None: not known
    detach_safe: bool | None = None


@dataclasses.dataclass
class _Watch:
    path: HolderPath
    signature: Callable[[], tuple[int, ...]] | None
    last: tuple[int, ...]
    #: the object the path's newest entry leads to now (an append's new entry: every list index -1)
    newest: Callable[[], Any] | None = None
    site: Source | None = None
    backward_done: bool | None = None
    graph_names: tuple[str, ...] = ()
    seq: int | None = None


_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")


def _graph_names(frame: types.FrameType | None, line: int) -> tuple[str, ...]:
    """The names line ``line`` of the frame's code reads that hold a tensor with a graph.

    # NOTE [The names a fix detaches]
    # A fix rewrites the stored-at line, and must detach what carries the graph,
    # not whatever comes last on the line: ``runlog.log({"loss": loss})`` stores a
    # dict (``dict(...).detach()`` would be an error), ``self.v = x if self.v is None
    # else a * self.v + (1 - a) * x`` keeps ``x`` in two places, ``kept.append(t)``
    # with ``t`` a plain tensor would be a no-op. When the tracer sees the store, it
    # reads the line's frame's locals (no code runs: a dict of the frame's values)
    # and keeps the names whose value is a tensor with a graph; the fix detaches
    # those. With none, the fix names the tensor inside the stored container, or
    # says in words what to store.
    """
    if frame is None:
        return ()
    code = linecache.getline(frame.f_code.co_filename, line)
    names = dict.fromkeys(m.group(1) for m in _NAME.finditer(code.split("#", 1)[0]))
    # The frame is being traced: its f_locals is the snapshot the tracer machinery already keeps in
    # step with it (and writes back after each event), so it is read, never changed.
    snapshot = frame.f_locals
    found = []
    for name in names:
        value = snapshot.get(name, _MISSING) if type(snapshot) is dict else _MISSING
        if safe.is_tensor(value) and safe.grad_fn(value) is not None:
            found.append(name)
    return tuple(found)


def _sequence_now() -> int | None:
    """This thread's autograd sequence number now (one tiny node, made and dropped)."""
    try:
        from leakscope.probe.steps import next_sequence_nr

        return next_sequence_nr()
    except Exception:
        return None


def _detach_newest(path: HolderPath, roots: dict[str, object]) -> bool:
    """Put a detached copy where the path's newest entry holds a tensor (the experiment of NOTE
    [Fixes that never break training]: does storing a detached copy change a gradient?). Only a
    trial's own objects are ever changed, through the builtin containers' own methods (NOTE [Reads
    that run no user code]); False when the slot cannot be set."""
    segments = tuple(
        Segment(s.kind, -1) if s.kind is SegmentKind.INDEX else s for s in path.segments
    )
    if not segments:
        return False
    parent_of = resolver(HolderPath(path.root, segments[:-1], path.kind), roots)
    if parent_of is None:
        return False
    parent, last = parent_of(), segments[-1]
    value = _step(parent, last) if parent is not _MISSING else _MISSING
    if not safe.is_tensor(value) or safe.grad_fn(value) is None:
        return False
    detached = safe.detached(value)
    if detached is None:
        return False
    try:
        if last.kind is SegmentKind.INDEX and safe.is_instance(parent, list):
            list.__setitem__(parent, int(last.name), detached)
        elif last.kind is SegmentKind.KEY and safe.is_instance(parent, dict):
            key = _key(last)
            if key is _MISSING:
                return False
            dict.__setitem__(parent, key, detached)
        elif last.kind in (SegmentKind.KEY, SegmentKind.ATTR) and isinstance(last.name, str):
            instance = safe.thread_local_dict(parent) or safe.instance_dict(parent)
            if instance is None or last.name not in instance:
                return False
            instance[last.name] = detached
        else:
            return False
    except Exception:
        return False
    return True


def _newest(path: HolderPath, roots: dict[str, object]) -> Callable[[], Any] | None:
    """A resolver of ``path`` with every list index at the list's end: what an append just stored."""
    segments = tuple(
        Segment(s.kind, -1) if s.kind is SegmentKind.INDEX else s for s in path.segments
    )
    return resolver(HolderPath(path.root, segments, path.kind), roots)


def _backward_done(obj: object) -> bool | None:
    """Whether backward has run through every saved slot of ``obj``'s graph (NOTE [Freed by backward])."""

    node = safe.grad_fn(obj) if safe.is_tensor(obj) else None
    if node is None:
        return None
    stats = ScanStats()
    try:
        _, found = graph_tensors([node], stats=stats)
    except Exception:
        return None
    found.clear()
    if not (stats.freed or stats.intact):
        return None
    return stats.freed > 0 and stats.intact == 0


class StoreTracer:
    """Finds the line that stores each finding's tensor into its holder (NOTE [Stored at]).

    :meth:`install` traces every frame in a user file that starts from then on
    (and, given ``frames``, the running ones too); :meth:`remove` stops it and
    gives ``{holder path: (stored-at line, store op, code)}``. ``growth``: an
    append to a list the path indexes counts as a store (a running job whose
    container already holds earlier entries).
    """

    def __init__(
        self,
        paths: Sequence[HolderPath],
        roots: dict[str, object],
        is_user_file: Callable[[str], bool],
        *,
        growth: bool = False,
        detach: bool = False,
    ) -> None:

        self._display = display_path
        #: put a detached copy in place of each store it sees (a trial's own objects only)
        self.detach = detach
        self._roots = roots if detach else {}
        #: the paths whose store was replaced by a detached copy
        self.detached: list[HolderPath] = []
        self.watches = []
        for path in paths:
            signature = None if path.root == "output" else _signature(path, roots, growth)
            self.watches.append(
                _Watch(
                    path,
                    signature,
                    signature() if signature is not None else (),
                    newest=_newest(path, roots) if signature is not None else None,
                )
            )
        self.is_user_file = is_user_file
        self.last_line: Source | None = None
        #: the frame that ran ``last_line`` (while the job is traced only)
        self.last_frame: types.FrameType | None = None
        self.outer_return: Source | None = None
        self.depth = 0
        self._user: dict[str, bool] = {}
        self._returns: dict[int, Source] = {}  # per frame: its last `return` line (3.11 reports a
        # with-block's exit line on the return event of a return inside `with`)
        self._previous: Any = None
        self._running: list[types.FrameType] = []

    def _check(self) -> None:
        where = self.last_line  # None before the first traced line: a change then was made by
        for w in self.watches:  # untraced code, so it sets the baseline and names no line
            if w.site is not None or w.signature is None:
                continue
            now = w.signature()
            stored = w.newest() if w.newest is not None else _MISSING
            if where is not None and now[0] != -1 and now != w.last and stored is not None:
                # (a holder set to None first, ``self._forward_cache = None``, stores nothing yet)
                w.site = where
                w.backward_done = _backward_done(stored) if stored is not _MISSING else None
                w.graph_names = _graph_names(self.last_frame, where.line)
                w.seq = _sequence_now()
                if self.detach and _detach_newest(w.path, self._roots):
                    self.detached.append(w.path)
                    now = w.signature()
            del stored
            w.last = now

    def _local(self, frame: types.FrameType, event: str, arg: object) -> Any:
        if event in ("line", "return"):
            self._check()
            where = Source(
                self._display(frame.f_code.co_filename), frame.f_lineno, frame.f_code.co_name
            )
            if event == "line":
                self.last_line = where
                self.last_frame = frame
                text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip()
                if text.startswith("return"):
                    self._returns[id(frame)] = where
            else:
                self.depth -= 1
                if (
                    self.depth == 0 and self.outer_return is None
                ):  # the step's own return, not a later hook's
                    self.outer_return = self._returns.get(id(frame), where)
                self._returns.pop(id(frame), None)
                caller = frame.f_back
                if caller is not None and self._is_user(caller):
                    # What happens next runs on the caller's line (``self.losses.append(self.logged(x))``
                    # stores after ``logged`` returned): a store seen now is that line's.
                    self.last_line = Source(
                        self._display(caller.f_code.co_filename),
                        caller.f_lineno,
                        caller.f_code.co_name,
                    )
                    self.last_frame = caller
        return self._local

    def _is_user(self, frame: types.FrameType) -> bool:
        file = frame.f_code.co_filename
        user = self._user.get(file)
        if user is None:
            user = self._user[file] = self.is_user_file(file)
        return user

    def _global(self, frame: types.FrameType, event: str, arg: object) -> Any:
        if not self._is_user(frame):
            return None
        self.depth += 1
        return self._local

    def install(self, frames: Sequence[types.FrameType] = ()) -> None:
        """Trace new frames in user files; ``frames`` (a running stack, innermost first) from their next line."""
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        for frame in frames:
            if self._is_user(frame) and frame.f_trace is None:
                frame.f_trace = self._local
                self.depth += 1
                self._running.append(frame)

    def remove(self) -> dict[HolderPath, Stored]:
        """Stop tracing; the stored-at line, store op and code of each holder whose store was seen."""
        sys.settrace(self._previous)
        self._previous = None
        for frame in self._running:
            if frame.f_trace == self._local:
                frame.f_trace = None
        self._running.clear()
        self._returns.clear()
        self.last_frame = None
        out = {}
        for w in self.watches:
            site = self.outer_return if w.path.root == "output" else w.site
            if site is None:
                continue
            raw = linecache.getline(_absolute(site.file), site.line).rstrip("\r\n")
            code = raw.strip()
            column = len(raw) - len(raw.lstrip()) + 1
            out[w.path] = Stored(
                site, store_op(w.path, code), code, w.backward_done, w.graph_names, w.seq, column
            )
        self.watches.clear()
        return out


def trace_stores(
    paths: Sequence[HolderPath],
    roots: dict[str, object],
    is_user_file: Callable[[str], bool],
    run: Callable[[], object],
) -> dict[HolderPath, Stored]:
    """Run ``run()`` traced; ``{holder path: (stored-at line, store op, code)}`` (NOTE [Stored at])."""
    tracer = StoreTracer(paths, roots, is_user_file)
    tracer.install()
    try:
        run()
    finally:
        sites = tracer.remove()
    return sites


def _absolute(file: str) -> str:

    return os.path.abspath(file)


__all__ = ["StoreTracer", "Stored", "resolver", "store_op", "trace_stores"]
