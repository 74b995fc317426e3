"""Where a running check is: one torch-free hook the check's stages call.

The stages report each phase as they enter it (``importing the target``,
``finding holders``, ``confirming 2 of 3``, ``releasing every holder``,
``growth``, ``tracing where each holder was stored``) and, inside a phase, the
step that may take long or hang (``building``, ``step``, ``micro-batch 2 of 3``,
and ``walking``, which the holder walk reports itself whenever it starts).
Nothing listens by default, and then :func:`report` costs one comparison. The
CLI's live status line (:mod:`leakscope.render.progress`) listens; in an
isolated check the child (:mod:`leakscope.runner.worker`) listens and forwards
each report to the parent, so the parent's status line shows the phase a hung
engine is stuck in until the timeout kills it, and the timeout's error names
it (``timed out after 600 s while walking the holders``;
:func:`leakscope.runner.isolation.timeout_message`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

#: a report as a dict of the fields given: ``target``, ``mode``, ``phase``, ``step``
Listener = Callable[[dict[str, str]], None]

_listener: Listener | None = None


def report(
    phase: str | None = None,
    *,
    step: str | None = None,
    target: str | None = None,
    mode: str | None = None,
) -> None:
    """Tell the listener, if any, that the check entered ``phase`` (or ``step`` within it).

    A new ``target`` starts over (no mode, phase or step yet), a new ``mode``
    clears the phase, a new ``phase`` clears the step; a field not given keeps
    its value.
    """
    if _listener is None:
        return
    fields = (("target", target), ("mode", mode), ("phase", phase), ("step", step))
    _listener({key: value for key, value in fields if value is not None})


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every :func:`report` made inside the block to ``listener``."""
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous


def listened() -> bool:
    """Whether anything listens (an isolated check's parent relays the child's reports only then)."""
    return _listener is not None


__all__ = ["Listener", "listened", "listening", "report"]
