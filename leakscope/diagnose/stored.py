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

import dataclasses
import linecache
import re
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from leakscope.results import Finding, Source

_SEGMENT = re.compile(r"\.(?P<attr>[A-Za-z_]\w*)|\[(?P<index>-?\d+)\]|\[(?P<key>'[^']*'|\"[^\"]*\")\]")
_MISSING = object()


def _parse(path: str) -> tuple[str, list[tuple[str, Any]]] | None:
    """``engine.meter.sum`` -> ("engine", [("attr", "meter"), ("attr", "sum")]); None if unreadable."""
    if path.startswith("global:"):
        body = path[len("global:"):]
        parts = body.split(".")
        for cut in range(len(parts), 0, -1):
            name = ".".join(parts[:cut])
            if name in sys.modules:
                rest = "".join(f".{p}" for p in parts[cut:])
                segs = _segments(rest)
                return (f"global:{name}", segs) if segs is not None else None
        return None
    m = re.match(r"^[A-Za-z_]\w*", path)
    if not m:
        return None
    segs = _segments(path[m.end():])
    return (m.group(0), segs) if segs is not None else None


def _segments(text: str) -> list[tuple[str, Any]] | None:
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text):
        m = _SEGMENT.match(text, pos)
        if not m:
            return None
        if m.group("attr") is not None:
            out.append(("attr", m.group("attr")))
        elif m.group("index") is not None:
            out.append(("index", int(m.group("index"))))
        else:
            out.append(("key", m.group("key")[1:-1]))
        pos = m.end()
    return out


def _step(obj: Any, kind: str, value: Any) -> Any:
    if kind == "attr":
        if isinstance(obj, types.FunctionType) and value in obj.__code__.co_freevars and obj.__closure__:
            return obj.__closure__[obj.__code__.co_freevars.index(value)].cell_contents
        try:
            return object.__getattribute__(obj, value)
        except Exception:
            pass
        found = getattr(obj, value, _MISSING)
        if found is _MISSING and hasattr(obj, "keys"):  # a TensorDict or mapping entry shown as .key
            try:
                found = obj[value] if value in obj.keys() else _MISSING
            except Exception:
                found = _MISSING
        return found
    if kind == "key" or isinstance(obj, dict):
        if isinstance(obj, dict):
            if value in obj:
                return obj[value]
            if kind == "index" and 0 <= value < len(obj):  # an OrderedDict of hooks, by position
                return list(obj.values())[value]
            return _MISSING
        try:
            return obj[value]
        except Exception:
            return _MISSING
    try:
        return list(obj)[value] if not isinstance(obj, (list, tuple)) else obj[value]
    except Exception:
        return _MISSING


def resolver(path: str, roots: dict[str, Any]) -> Callable[[], Any] | None:
    """A function returning the object at ``path`` now (``_MISSING`` when absent), or None."""
    parsed = _parse(path)
    if parsed is None:
        return None
    root_name, segments = parsed
    if root_name.startswith("global:"):
        module_name = root_name[len("global:"):]

        def root() -> Any:
            return sys.modules.get(module_name, _MISSING)
    elif root_name in roots:
        obj = roots[root_name]

        def root() -> Any:
            return obj
    else:
        return None

    def resolve() -> Any:
        current = root()
        for kind, value in segments:
            if current is _MISSING:
                return _MISSING
            current = _step(current, kind, value)
        return current

    return resolve


def store_op(path: str, line: str) -> str:
    """How the line stored the tensor, from the line's text and the holder path."""
    text = line.strip()
    if path == "output" or path.startswith(("output.", "output[")):
        return "return"
    if "_hooks" in path:
        return "hook"
    if "_forward_cache" in path or re.search(r"\.update\(|metric\w*\(", text):
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


@dataclasses.dataclass
class _Watch:
    finding: Finding
    resolve: Callable[[], Any] | None
    last: int
    site: Source | None = None


def trace_stores(
    findings: Sequence[Finding], roots: dict[str, Any], is_user_file: Callable[[str], bool], run: Callable[[], Any]
) -> dict[str, tuple[Source, str, str]]:
    """Run ``run()`` traced; ``{finding path: (stored-at line, store op)}`` (NOTE [Stored at])."""
    from leakscope.harness.source import display_path

    watches = []
    for f in findings:
        resolve = None if f.path.startswith("output") else resolver(f.path, roots)
        last = id(resolve()) if resolve is not None else 0
        watches.append(_Watch(f, resolve, last))
    last_line: list[Source | None] = [None]
    outer_return: list[Source | None] = [None]
    depth = [0]
    user_cache: dict[str, bool] = {}

    def check() -> None:
        where = last_line[0]
        if where is None:
            return
        for w in watches:
            if w.site is not None or w.resolve is None:
                continue
            now = w.resolve()
            if now is not _MISSING and id(now) != w.last:
                w.site = where
            w.last = id(now)

    returns: dict[int, Source] = {}  # per frame: its last `return` line (3.11 reports a with-block's
    # exit line on the return event of a return inside `with`)

    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event in ("line", "return"):
            check()
            where = Source(display_path(frame.f_code.co_filename), frame.f_lineno, frame.f_code.co_name)
            if event == "line":
                last_line[0] = where
                text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip()
                if text.startswith("return"):
                    returns[id(frame)] = where
            else:
                depth[0] -= 1
                if depth[0] == 0 and outer_return[0] is None:  # the step's own return, not a later hook's
                    outer_return[0] = returns.get(id(frame), where)
                returns.pop(id(frame), None)
        return local

    def global_trace(frame: types.FrameType, event: str, arg: Any) -> Any:
        file = frame.f_code.co_filename
        user = user_cache.get(file)
        if user is None:
            user = user_cache[file] = is_user_file(file)
        if not user:
            return None
        depth[0] += 1
        return local

    previous = sys.gettrace()
    sys.settrace(global_trace)
    try:
        run()
    finally:
        sys.settrace(previous)
    out = {}
    for w in watches:
        site = outer_return[0] if w.finding.path.startswith("output") else w.site
        if site is None:
            continue
        code = linecache.getline(_absolute(site.file), site.line).strip()
        out[w.finding.path] = (site, store_op(w.finding.path, code), code)
    return out


def _absolute(file: str) -> str:
    import os

    return os.path.abspath(file)


def add_store_sites(spec: Any, mode: Any, options: Any, findings: list[Finding]) -> list[Finding]:
    """``findings`` with ``stored_at`` and ``store_op`` filled, from one traced re-run of the step."""
    import os

    from leakscope.harness.source import is_internal
    from leakscope.harness.trial import build_subject, make_micro_batch, step_once

    wanted = [f for f in findings if f.severity == "leak" and not f.path.startswith("<")]
    if not wanted:
        return findings
    leakscope_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    engines_file = os.path.join(leakscope_dir, "models", "engines.py")

    def is_user_file(file: str) -> bool:
        if file.startswith("<"):
            return False
        resolved = os.path.abspath(file)
        if resolved == engines_file:
            return True
        return not resolved.startswith(leakscope_dir + os.sep) and not is_internal(resolved)

    model, engine = build_subject(spec, options)
    roots = {"engine": engine, "module": model, "micro_batch": make_micro_batch(spec, options, 0)}
    del model, engine
    result: list[Any] = []

    def run() -> None:
        result.append(step_once(spec, roots["engine"], roots["micro_batch"], mode))

    try:
        sites = trace_stores(wanted, roots, is_user_file, run)
    except Exception:
        return findings  # the untraced verdict stands; stored-at is an extra
    finally:
        result.clear()
        roots.clear()
    return [_with_site(f, sites.get(f.path), spec.adapter) for f in findings]


def _with_site(f: Finding, site: tuple[Source, str, str] | None, adapter: str | None) -> Finding:
    """The finding with its stored-at line and the fix derived from it (leakscope.diagnose.storefix)."""
    from leakscope.diagnose.storefix import StoreSite, fix_for

    store = StoreSite(site[1], site[2], site[0]) if site is not None else None
    hint = fix_for(store, f.path, f.holder, f.cause, adapter) if f.severity == "leak" else None
    changes: dict[str, Any] = {"hint": hint} if hint else {}
    if site is not None:
        changes.update(stored_at=site[0], store_op=site[1])
    return dataclasses.replace(f, **changes) if changes else f


__all__ = ["add_store_sites", "resolver", "store_op", "trace_stores"]
