"""Holder paths: how a finding names the reference that keeps a graph alive.

A :class:`HolderPath` is a root (``output``, ``engine``, ``micro_batch``,
``module``, ``global:pkg.mod``) and the typed :class:`Segment` steps the holder
walk took from it. Everything inside leakscope (fix hints, growth, confirmation,
the allowlist) reads the segments; the documented string
(``engine.history[0]``, ``module.blocks[0]._forward_hooks[0].store[0]``) is made
only at the output edge, by ``str()``. Torch-free: renderers and the gate use it.
"""

from __future__ import annotations

import dataclasses
import enum

MAX_SHOWN = 160


class SegmentKind(str, enum.Enum):
    """How a step of a path reaches its child from its parent."""

    #: ``.name``: an instance, class or slot attribute, a named-tuple field, ``partial.func``
    ATTR = "attr"
    #: a mapping key: ``.name`` for an identifier string, else ``[repr(key)]``
    KEY = "key"
    #: ``[i]``: a list, tuple or deque position; a hook's position in its dict
    INDEX = "index"
    #: ``{}``: a set member
    MEMBER = "member"
    #: ``[<Type>]``: a mapping value under a key that is an object
    OBJECT_KEY = "object-key"
    #: ``[<key Tensor>]``: a tensor or graph node used as a mapping key
    KEY_OBJECT = "key-object"
    #: ``.name``: a closure variable of a function
    CELL = "cell"
    #: ``._forward_hooks``: a dict of registered hooks (module or tensor)
    HOOKS = "hooks"
    #: ``.f_locals['x']``: a local of a frame (a suspended generator's, a traceback's)
    LOCAL = "local"
    #: ``.cache``: the results of a ``functools.lru_cache`` (an index follows, newest last: ``[-1]``)
    CACHE = "cache"
    #: ``.get()``: what a getter returns (a ``ContextVar``'s value)
    CALL = "call"
    #: ``.<Type>``: an object reached through the interpreter's referents
    REFERENT = "referent"


class RootKind(str, enum.Enum):
    """What a walk's root is, where every holder path starts (:attr:`HolderPath.root_kind`):
    ``output`` what the step returned, ``engine`` the engine (``self`` in its code),
    ``micro_batch`` the batch it ran on, ``module`` the model, ``global`` a module's globals
    (``global:pkg.mod``; a script's own by its file, ``train.py``), ``caller`` a running loop's
    frame (``caller:train.py:main``), ``argument`` a watched call's argument (``args[0]``),
    ``cycle`` a tensor in a reference cycle through autograd (NOTE [Cycles through autograd])."""

    OUTPUT, ENGINE, MICRO_BATCH, MODULE = "output", "engine", "micro_batch", "module"
    GLOBAL, CALLER, ARGUMENT, CYCLE = "global", "caller", "argument", "cycle"

    def __str__(self) -> str:
        return self.value


_ROOT_KINDS = {kind.value: kind for kind in RootKind}

#: segments that name one entry of a container (another run puts the same slot at another entry)
ENTRY_KINDS = frozenset(
    {
        SegmentKind.INDEX,
        SegmentKind.MEMBER,
        SegmentKind.OBJECT_KEY,
        SegmentKind.KEY_OBJECT,
    }
)
#: frame-navigation attributes of generators and tracebacks
SUSPENDED_FRAMES = {"gi_frame": "gi", "cr_frame": "cr", "ag_frame": "ag"}
WILDCARD = "*"


@dataclasses.dataclass(frozen=True)
class Segment:
    """One step: its kind and the name (or position) it takes."""

    kind: SegmentKind
    name: str | int = ""

    def __str__(self) -> str:
        kind, name = self.kind, self.name
        if kind in (SegmentKind.ATTR, SegmentKind.CELL, SegmentKind.HOOKS, SegmentKind.CACHE):
            return f".{name}"
        if kind is SegmentKind.KEY:
            return f".{name}" if isinstance(name, str) and name.isidentifier() else f"[{name}]"
        if kind is SegmentKind.INDEX:
            return f"[{name}]"
        if kind is SegmentKind.MEMBER:
            return "{}" if name != WILDCARD else "[*]"
        if kind is SegmentKind.OBJECT_KEY:
            return f"[<{name}>]" if name != WILDCARD else "[*]"
        if kind is SegmentKind.KEY_OBJECT:
            return f"[<key {name}>]" if name != WILDCARD else "[*]"
        if kind is SegmentKind.LOCAL:
            return f".f_locals[{name!r}]"
        if kind is SegmentKind.CALL:
            return f".{name}()"
        return f".<{name}>"

    def code(self) -> str:
        """The step as Python spells it: a mapping key is always subscripted (``["loss"]``, where
        :meth:`__str__` prints ``.loss``); every other step as printed."""
        if self.kind is SegmentKind.KEY:
            name = self.name
            return f'["{name}"]' if isinstance(name, str) and name.isidentifier() else f"[{name}]"
        return str(self)


_SCALARS = (str, int, float, bool, type(None))
#: a type's own ``__name__`` (``type(key).__name__`` would run the key class's metaclass hooks)
_TYPE_NAME = type.__dict__["__name__"].__get__


def _builtin_literal(key: object, depth: int = 0) -> bool:
    """A key whose ``repr`` only builtins write: a scalar, or a tuple of such keys (a tuple's repr
    calls its items' ``__repr__``: a tensor or a module inside one would run user code). Types are
    compared by identity (``in`` would run a metaclass's ``__eq__``)."""
    if any(type(key) is scalar for scalar in _SCALARS):
        return True
    return (
        type(key) is tuple
        and depth < 8
        and len(key) <= 16
        and all(_builtin_literal(k, depth + 1) for k in key)
    )


def key_segment(key: object) -> Segment:
    """The segment of a mapping value under ``key`` (no user code runs: only builtin reprs)."""
    if type(key) is str and key.isidentifier():
        return Segment(SegmentKind.KEY, key)
    if _builtin_literal(key):
        try:
            return Segment(SegmentKind.KEY, repr(key))
        except Exception:
            pass
    return Segment(SegmentKind.OBJECT_KEY, _TYPE_NAME(type(key)))


@dataclasses.dataclass(frozen=True)
class HolderPath:
    """Where a holder sits: a root and the typed segments from it."""

    root: str
    segments: tuple[Segment, ...] = ()
    #: the root's kind when its name does not say it (``args[0]`` is an ``argument``)
    kind: str = ""

    def __str__(self) -> str:
        text = "".join(str(s) for s in self.segments)
        if self.script and text.startswith("."):
            return f"{self.root}:{text[1:]}"  # a script's own variable: ``train.py:total_loss``
        return self.root + text

    @property
    def script(self) -> bool:
        """The root is a script's own top-level namespace (``__main__``), named by its file:
        ``train.py:total_loss`` is the variable ``total_loss`` the script assigns at top level."""
        return self.root_kind is RootKind.GLOBAL and not self.root.startswith("global:")

    @property
    def root_kind(self) -> RootKind | None:
        """The root's kind (None for a placeholder root such as ``<unknown holder>``)."""
        return _ROOT_KINDS.get(self.kind or self.root.partition(":")[0])

    def shape(self) -> HolderPath:
        """The same slot in another run: every container entry as ``*``
        (``engine.history[3].x`` -> ``engine.history[*].x``)."""
        return HolderPath(
            self.root,
            tuple(Segment(s.kind, WILDCARD) if s.kind in ENTRY_KINDS else s for s in self.segments),
            self.kind,
        )

    def container(self) -> HolderPath:
        """The path without its trailing container entries (``engine.history[0]`` -> ``engine.history``)."""
        segments = list(self.segments)
        while segments and (segments[-1].kind in ENTRY_KINDS or str(segments[-1]).startswith("[")):
            segments.pop()
        return HolderPath(self.root, tuple(segments), self.kind)

    def prefix(self, length: int) -> HolderPath:
        return HolderPath(self.root, self.segments[:length], self.kind)

    def within(self, ancestor: str) -> bool:
        """True when ``ancestor`` is this path, or the path of a holder it sits in, as printed.

        Whole segments only: ``engine.history`` is within ``engine`` and
        ``engine.history`` (and ``engine.history[0].x`` within ``engine.history``),
        but ``engine.history_old`` is not within ``engine.history``. A trailing
        ``.`` or ``[`` on ``ancestor`` is ignored (``output.*`` is written for ``output``).
        """
        ancestor = ancestor.rstrip(".[")
        return any(str(self.prefix(length)) == ancestor for length in range(len(self.segments) + 1))

    def in_hook(self) -> bool:
        return any(s.kind is SegmentKind.HOOKS for s in self.segments)

    def last(self, kind: SegmentKind) -> int | None:
        """The index of the last segment of ``kind``, or None."""
        for i in range(len(self.segments) - 1, -1, -1):
            if self.segments[i].kind is kind:
                return i
        return None

    def grad_slot(self) -> bool:
        """Whether the holder is a tensor's ``.grad`` (NOTE [A gradient that keeps a graph])."""
        last = self.segments[-1] if self.segments else None
        return last is not None and last.kind is SegmentKind.ATTR and last.name == "grad"

    def leaf_name(self) -> str:
        """The last name along the path that code could spell (``log_probs``), else ``value``."""
        for segment in reversed(self.segments):
            name = segment.name
            if (
                isinstance(name, str)
                and name.isidentifier()
                and segment.kind
                in (
                    SegmentKind.ATTR,
                    SegmentKind.KEY,
                    SegmentKind.CELL,
                )
            ):
                return name
            if segment.kind is SegmentKind.LOCAL and isinstance(name, str):
                return name
            if segment.kind not in ENTRY_KINDS:
                break
        return "value"

    def code(self) -> str:
        """The path as the engine's code spells it: ``engine.x`` -> ``self.x``, ``global:m.X`` -> ``m.X``,
        a mapping key subscripted (``self.outputs[0]["loss"]``)."""
        alias = _ROOT_ALIASES.get(self.root)
        if alias is None:
            alias = self.root.partition(":")[2] if self.root_kind is RootKind.GLOBAL else self.root
        code = "".join(s.code() for s in self.segments)
        if self.script:
            return shorten(code[1:] if code.startswith(".") else code)
        return shorten(alias + code)


_ROOT_ALIASES = {
    "engine": "self",
    "module": "model",
    "micro_batch": "micro_batch",
    "output": "output",
}

#: a holder path that names no reference: retention proven, holder out of reach
UNKNOWN = HolderPath("<unknown holder>")
#: the holder of a graph only the cyclic garbage collector frees
CYCLE = HolderPath("<reference cycle>")


def printed(text: str) -> HolderPath:
    """A path read back from a saved report: its documented text, for display only.

    The report carries ``str(path)``, not the segments; the text is kept whole as
    the root, so ``str()`` gives it back unchanged (``leakscope render``).
    """
    return HolderPath(text)


def shorten(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` with its middle elided when longer than ``limit`` (a 3000-deep path stays readable)."""
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"


__all__ = [
    "CYCLE",
    "ENTRY_KINDS",
    "MAX_SHOWN",
    "UNKNOWN",
    "HolderPath",
    "RootKind",
    "Segment",
    "SegmentKind",
    "key_segment",
    "printed",
    "shorten",
]
