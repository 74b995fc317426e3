"""Locate the user's line: in tracebacks of engine errors and in graph-node stack traces.

A frame is "internal" when it belongs to Python's standard library, torch,
tensordict or leakscope's own machinery. ``leakscope/models/engines.py`` and the
fixtures count as user code: they are engines like any other.
"""

from __future__ import annotations

import inspect
import os
import re
import traceback
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakscope.probe import safe
from leakscope.probe.library import is_leakscope_machinery_file, is_library_file
from leakscope.results import Source

if TYPE_CHECKING:
    from leakscope.harness.protocol import EngineSpec


def is_internal(filename: str) -> bool:
    """True for frames the user cannot change (the one policy: :mod:`leakscope.probe.library`)."""
    return is_library_file(filename)


def display_path(filename: str) -> str:
    """A path relative to the working directory when it is below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def user_frame(tb: types.TracebackType | None) -> Source | None:
    """The innermost frame of ``tb`` in user code."""
    frames = traceback.extract_tb(tb)
    for frame in reversed(frames):
        if not is_internal(frame.filename):
            return Source(display_path(frame.filename), frame.lineno or 0, frame.name)
    return None


_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)')


def user_frame_in_stack_text(text: str, prefer: frozenset[str] = frozenset()) -> Source | None:
    """The innermost user frame of a formatted stack (anomaly mode's ``traceback_``).

    Frames in ``prefer`` (the engine's own files) win over helpers elsewhere, so
    the line shown is the engine's line, the one to change.
    """
    found = preferred = None
    for m in _FRAME_RE.finditer(text):
        file = m.group("file")
        if is_internal(file):
            continue
        found = Source(display_path(file), int(m.group("line")), m.group("func").strip())
        if _resolved(file) in prefer:
            preferred = found
    return preferred or found


def user_frames_in_stack_text(text: str) -> list[Source]:
    """Every user frame of a formatted stack inside the step, innermost first.

    Frames outside the step (the test or script that called leakscope, above
    leakscope's own harness frames) are not the engine's and are left out.
    """
    out: list[Source] = []
    for m in _FRAME_RE.finditer(text):
        file = m.group("file")
        if is_leakscope_machinery_file(file) and not _is_model_file(file):
            out.clear()  # leakscope drives the step from here: what called it is not the engine's
        elif not is_internal(file):
            out.append(Source(display_path(file), int(m.group("line")), m.group("func").strip()))
    out.reverse()
    return out


def _is_model_file(file: str) -> bool:
    """leakscope's models run inside the step (the engine calls them)."""
    return f"{os.sep}leakscope{os.sep}models{os.sep}" in _resolved(file)


def _resolved(file: str) -> str:
    try:
        return str(Path(file).resolve())
    except OSError:
        return file


def engine_files(modules: Any) -> frozenset[str]:
    """Resolved source files of the engine's modules."""
    files = set()
    for module in modules:
        file = getattr(module, "__file__", None)
        if file:
            files.add(_resolved(file))
    return frozenset(files)


def created_at(obj: object, modules: object = ()) -> Source | None:
    """The user line that created ``obj``'s graph node (needs anomaly-mode stack traces).

    Lines in ``modules``' files are preferred.
    """
    node = graph_node(obj)
    if node is not None:
        try:
            text = node.metadata.get("traceback_")
        except Exception:
            text = None
        if isinstance(text, (list, tuple)):
            text = "".join(str(line) for line in text)
        if text:
            found = user_frame_in_stack_text(str(text), engine_files(modules))
            if found is not None:
                return found
    return None


def graph_node(obj: object) -> Any:
    """The graph node of a held object: a tensor's ``grad_fn`` (read without its subclass's code), or
    the node itself."""
    return obj if safe.is_node(obj) else (safe.grad_fn(obj) if safe.is_tensor(obj) else None)


def stack_text(obj: object) -> str | None:
    node = graph_node(obj)
    if node is None:
        return None
    try:
        text = node.metadata.get("traceback_")
    except Exception:
        return None
    if isinstance(text, (list, tuple)):
        text = "".join(str(line) for line in text)
    return str(text) if text else None


#: at most this many engine-side call sites under "created at"
MAX_CALLED_FROM = 3
#: the engine's step entry: where a call chain reaches the engine
STEP_NAMES = ("forward_step", "training_step", "step")


def called_from(obj: object, source: Source | None, modules: object) -> tuple[Source, ...]:
    """When ``source`` is a shared helper or is reached through ``super()``: the user frames
    that called it, innermost first, up to the target's own file or its step method.

    ``modules``: the target's own module(s) (not its bases'): a line there in a function
    that no outer frame repeats is the engine's own line and needs no call site.
    """

    if source is None:
        return ()
    text = stack_text(obj)
    if not text:
        return ()
    frames = user_frames_in_stack_text(text)
    if source not in frames:
        return ()
    outer = frames[frames.index(source) + 1 :]
    files = engine_files(modules)
    if os.path.abspath(source.file) in files and not any(
        f.function == source.function for f in outer
    ):
        return ()
    out = []
    for frame in outer[:MAX_CALLED_FROM]:
        out.append(frame)
        if os.path.abspath(frame.file) in files or frame.function in STEP_NAMES:
            break
    return tuple(out)


def anchor_source(spec: EngineSpec) -> Source | None:
    """Where the engine's ``forward_step`` (or the step function) is defined."""

    anchor = spec.anchor
    # The class's own ``forward_step`` as defined (read without its metaclass's hooks).
    fn = safe.class_attr(anchor, "forward_step") if safe.is_instance(anchor, type) else anchor
    if safe.is_instance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    if fn is None:
        return None
    try:
        fn = inspect.unwrap(fn)
        file = inspect.getsourcefile(fn)
        _, line = inspect.getsourcelines(fn)
    except (TypeError, OSError):
        return None
    if not file:
        return None
    return Source(display_path(file), line, getattr(fn, "__name__", "forward_step"))
