"""The human report: per target and mode, the verdict and a table of findings."""

from __future__ import annotations

import io
import textwrap
from typing import Any

from leakscope.holders import shorten
from leakscope.policy import FailOn, exit_code
from leakscope.render.escape import rich_text, terminal
from leakscope.render.summary import (
    growth_line,
    human_bytes,
    leak_size,
    projection_line,
    report_line,
    shown_verdict,
    source_lines,
    warning_count,
)
from leakscope.results import Report, Severity, TargetResult, Verdict

#: the verdict word's style, by :func:`~leakscope.render.summary.shown_verdict`
_STYLE = {
    "clean": "bold green",
    "leak": "bold red",
    "error": "bold yellow",
    "warning": "bold yellow",
}


def fold(text: str, width: int | None) -> str:
    """``text`` with each line longer than ``width`` wrapped at spaces, its continuation lines
    indented four columns past the line's own indent; unchanged when ``width`` is None (a log, a
    pipe or a file). A word longer than the width (a deep path) is never cut: it stays whole on a
    line of its own, for the terminal to soft-wrap and a copy to take whole."""
    if width is None:
        return text

    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        out.extend(
            textwrap.wrap(
                line.strip(),
                width,
                initial_indent=indent,
                subsequent_indent=indent + "    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            or [line]
        )
    return "\n".join(out)


def _result_block(result: TargetResult, fail_on: FailOn, width: int | None = None) -> list[Any]:
    """The verdict line, the findings table, and one block per finding: every engine string escaped
    (:func:`~leakscope.render.escape.terminal`), every cell a ``Text`` that rich never parses as markup."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    shown = shown_verdict(result, fail_on)
    head = Text()
    head.append(f"{terminal(result.target)} ", style="bold")
    head.append(f"[{result.mode.value}] ")
    if result.settings:  # the adapter settings the step ran with
        head.append(terminal(f"[{', '.join(result.settings)}] "))
    if result.rank is not None:  # under torchrun, only where ranks differ
        head.append(terminal(f"[rank {result.rank}] "))
    head.append(shown.upper(), style=_STYLE[shown])
    if result.verdict is Verdict.LEAK:
        head.append(
            f"  {leak_size(result) if result.kind else f'{human_bytes(result.retained_bytes)} retained per micro-batch'}"
        )
    elif shown == "warning":
        head.append(f"  {warning_count(result)} (fails --fail-on warning)")
    blocks: list[object] = [head]
    if result.error:
        blocks.append(Text(fold(f"  error: {terminal(result.error)}", width)))
    if result.findings:
        table = Table(show_header=True, header_style="bold", expand=False, box=box.SIMPLE_HEAD)
        for column in ("path", "holder", "grad_fn", "cause", "kind", "bytes", "confirmed"):
            table.add_column(
                column, overflow="fold", justify="right" if column == "bytes" else "left"
            )
        for f in result.findings:
            severity = "" if f.severity is Severity.LEAK else f" ({f.severity})"
            cells = (
                shorten(str(f.path)),
                f"{f.holder}{severity}",
                f.grad_fn,
                f.cause,
                f.kind or "-",
                human_bytes(f.retained_bytes),
                "yes" if f.confirmed else "no",
            )
            table.add_row(*(rich_text(cell) for cell in cells))
        blocks.append(table)
        for f in result.findings:
            lines = [f"  {shorten(str(f.path))}"]
            lines.extend(source_lines(f))
            if len(f.bytes_by_cause) > 1:
                split = ", ".join(
                    f"{cause} {human_bytes(n)}" for cause, n in f.bytes_by_cause.items()
                )
                lines.append(f"    bytes by cause: {split}")
            if f.node_cost and f.graph_nodes:
                lines.append(f"    graph nodes: {f.graph_nodes}, each counted at {f.node_cost}")
            if f.allowed_reason:
                lines.append(f"    allowed: {f.allowed_reason}")
            lines.append(f"    fix: {f.hint}")
            blocks.append(Text(fold("\n".join(terminal(line) for line in lines), width)))
    if result.growth is not None:
        blocks.append(Text(fold(terminal(growth_line(result)), width)))
    if result.projection is not None:
        lines = projection_line(result.projection).split("\n")
        blocks.append(Text(fold("\n".join(terminal(line) for line in lines), width)))
    if set(result.keys_read) - _TOKEN_KEYS:  # synthesised keys: say what the engine was fed
        keys = terminal(f"  micro-batch keys read: {', '.join(result.keys_read)}")
        blocks.append(Text(fold(keys, width)))
    for warning in result.warnings:
        blocks.append(Text(fold(f"  warning: {terminal(warning)}", width), style="yellow"))
    return blocks


#: the keys of leakscope's micro-batch that need no synthesis
_TOKEN_KEYS = {"input_ids", "attention_mask", "position_ids"}
#: the console width that never wraps (the text report's width when it is not on a terminal)
_UNWRAPPED = 1_000_000


def render(
    report: Report,
    *,
    color: bool = False,
    width: int | None = None,
    fail_on: FailOn = FailOn.LEAK,
    **_: object,
) -> str:
    """The report as terminal text (ANSI colours only when ``color``).

    ``width``: fit a terminal this wide (table cells folded, long lines wrapped at spaces by
    :func:`fold`); None (for logs, files and pipes) never wraps a line, so a path is never cut. The footer's exit code
    is :func:`leakscope.policy.exit_code` under ``fail_on``, the process's own, and each
    verdict line says what that gate made of the result (``WARNING`` when a warning fails it).
    Tracebacks are never part of the report (``--debug`` writes them to stderr).
    """
    from rich.console import Console
    from rich.text import Text

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width or _UNWRAPPED,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=False,
        emoji=False,
        markup=False,
    )
    console.print(
        Text(
            terminal(
                f"leakscope {report.leakscope_version} · torch {report.torch_version} · Python {report.python_version}"
            ),
            style="dim",
        )
    )
    for result in report.results:
        console.print()
        for i, block in enumerate(_result_block(result, fail_on, width)):
            # On a terminal rich folds the table and wraps the verdict line; the other lines were
            # wrapped by fold() (a path stays whole). Elsewhere nothing wraps: paths and fixes are
            # copied into editors from logs and files.
            table = hasattr(block, "columns")
            console.print(block, soft_wrap=not table and (i > 0 or width is None))
    console.print()
    console.print(
        Text(
            report_line(report, exit_code(report, fail_on), fail_on).removeprefix("leakscope: "),
            style="bold",
        )
    )
    return buffer.getvalue()
