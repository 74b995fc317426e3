"""The CLI's progress display on stderr (never stdout, which carries only the report).

The library knows nothing about it: :func:`leakscope.check` calls an
``on_result`` callback and this module turns the calls into a rich progress bar
on a terminal, or into one plain line per result when ``--progress`` forces it
on a non-terminal (a CI log must not fill with cursor-control codes).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

from leakscope.render.summary import label
from leakscope.results import TargetResult

OnResult = Callable[[TargetResult], None]


def wanted(forced: bool | None, targets: int, stream: TextIO | None = None) -> bool:
    """``--progress``/``--no-progress`` when given; otherwise only multi-target runs on a terminal."""
    if forced is not None:
        return forced
    stream = stream or sys.stderr
    return targets > 1 and stream.isatty()


@contextlib.contextmanager
def display(total: int, enabled: bool, stream: TextIO | None = None) -> Iterator[OnResult | None]:
    """An ``on_result`` callback that advances a display of ``total`` results, or None."""
    if not enabled:
        yield None
        return
    stream = stream or sys.stderr
    if not stream.isatty():
        done = 0

        def line(result: TargetResult) -> None:
            nonlocal done
            done += 1
            stream.write(f"leakscope: [{done}/{total}] {label(result)} {result.verdict.value}\n")
            stream.flush()

        yield line
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=stream)
    with Progress(
        TextColumn("leakscope"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.description}"), console=console, transient=True,
    ) as bar:
        task = bar.add_task("", total=total)

        def advance(result: TargetResult) -> None:
            bar.update(task, advance=1, description=f"{label(result)} {result.verdict.value}")

        yield advance
