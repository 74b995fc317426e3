"""The CLI's progress display on stderr (never stdout, which carries only the report).

The library knows nothing about it: :func:`leakscope.check` calls an
``on_result`` callback, and the check's stages report their phases through
:mod:`leakscope.phase`. On a terminal this module turns both into a live status
line per target being checked::

    leakscope [0/2] pkg.engines:Engine [train] confirming 1 of 2: step (4 s of 600 s timeout)

(target, mode, phase and the step within it, the seconds since the target
started and its ``--timeout`` budget). ``--progress`` on a non-terminal prints
one plain line per result instead (a CI log must not fill with cursor-control
codes).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from leakscope.phase import listening
from leakscope.render.escape import terminal
from leakscope.render.summary import label
from leakscope.results import TargetResult

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

OnResult = Callable[[TargetResult], None]


def wanted(forced: bool | None, stream: TextIO | None = None) -> bool:
    """``--progress``/``--no-progress`` when given; otherwise whenever stderr is a terminal."""
    if forced is not None:
        return forced
    stream = stream or sys.stderr
    return stream.isatty()


def budget(seconds: float, timeout: float | None) -> str:
    """``4 s of 600 s timeout``: the time a target has taken against its ``--timeout``."""
    if timeout is None:
        return f"{seconds:.0f} s, no timeout"
    return f"{seconds:.0f} s of {timeout:g} s timeout"


def status(done: int, total: int, state: dict[str, str]) -> str:
    """The status line's text for one target, from the phase fields reported so far."""
    where = ": ".join(state[key] for key in ("phase", "step") if state.get(key))
    mode = f" [{state['mode']}]" if state.get("mode") else ""
    return f"[{done}/{total}] {state.get('target', '?')}{mode} {where}".rstrip()


@contextlib.contextmanager
def display(
    total: int,
    enabled: bool,
    stream: TextIO | None = None,
    *,
    modes: int = 1,
    timeout: float | None = None,
) -> Iterator[OnResult | None]:
    """An ``on_result`` callback that advances a display of ``total`` results, or None.

    On a terminal it also listens to :mod:`leakscope.phase` and draws each
    target's live status line until its ``modes`` results are in;
    ``timeout`` is the per-target ``--timeout`` (None: none applies, as with
    ``--no-isolate``).
    """
    if not enabled:
        yield None
        return
    stream = stream or sys.stderr
    if not stream.isatty():
        done = 0

        def line(result: TargetResult) -> None:
            nonlocal done
            done += 1
            stream.write(
                f"leakscope: [{done}/{total}] {terminal(label(result))} {result.verdict.value}\n"
            )
            stream.flush()

        yield line
        return
    from rich.console import Console
    from rich.progress import Progress, TextColumn

    live = _Live(total, modes)
    with Progress(
        TextColumn("leakscope"),
        TextColumn("{task.description}", markup=False),
        _budget_column(timeout),
        console=Console(file=stream),
        transient=True,
        refresh_per_second=4,
    ) as bar:
        live.bar = bar
        with listening(live.on_phase):
            yield live.on_result


class _Live:
    """The targets being checked, one status line (a rich task) each."""

    def __init__(self, total: int, modes: int) -> None:
        self.total = total
        self.modes = modes
        self.done = 0
        self.bar: Progress | None = None
        self.lock = threading.Lock()  # phases of an isolated child arrive on a relay thread
        self.states: dict[str, dict[str, str]] = {}
        self.tasks: dict[str, TaskID] = {}
        self.results: dict[str, int] = {}

    def on_phase(self, event: dict[str, str]) -> None:
        with self.lock:
            target = event.get("target") or next(reversed(self.states), "?")
            state = self.states.setdefault(target, {"target": target})
            if "mode" in event and event["mode"] != state.get("mode"):
                state.pop("phase", None)
                state.pop("step", None)
            if "phase" in event:
                state.pop("step", None)
            state.update(event)
            state["target"] = target
            self._draw(target)

    def on_result(self, result: TargetResult) -> None:
        with self.lock:
            self.done += 1
            self.results[result.target] = self.results.get(result.target, 0) + 1
            if self.results[result.target] >= self.modes and result.target in self.tasks:
                assert self.bar is not None
                self.bar.remove_task(self.tasks.pop(result.target))
                self.states.pop(result.target, None)
            for target in self.tasks:
                self._draw(target)

    def _draw(self, target: str) -> None:
        assert self.bar is not None
        text = terminal(
            status(self.done, self.total, self.states[target])
        )  # engine names: no escape codes
        if target not in self.tasks:
            self.tasks[target] = self.bar.add_task(text, total=None)
        self.bar.update(self.tasks[target], description=text, refresh=True)


def _budget_column(timeout: float | None) -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Budget(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"({budget(task.elapsed or 0.0, timeout)})")

    return Budget()
