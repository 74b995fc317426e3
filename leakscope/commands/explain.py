"""``leakscope explain``: draw the graph one finding keeps alive."""

from __future__ import annotations

import contextlib
import enum
import sys
from pathlib import Path
from typing import Annotated

import typer

from leakscope.commands.common import (
    DEFAULT_TARGET,
    Config,
    Debug,
    Factory,
    FormatChoice,
    Model,
    Output,
    Version,
    check_output,
    emit,
    fail,
    resolve,
)
from leakscope.errors import LeakscopeError
from leakscope.render.escape import terminal
from leakscope.results import Mode


class ExplainFormat(str, enum.Enum):
    text = "text"
    json = "json"


def explain(
    ctx: typer.Context,
    target: Annotated[
        str | None,
        typer.Argument(metavar="[TARGET]", help=f"The engine. Default: {DEFAULT_TARGET}."),
    ] = None,
    path: Annotated[
        str | None, typer.Option("--path", help="The finding to explain (default: the first).")
    ] = None,
    mode: Annotated[Mode, typer.Option("--mode", help="Which step to drive.")] = Mode.TRAIN,
    fmt: Annotated[
        ExplainFormat,
        typer.Option("--format", "-f", help="The graph on stdout: a text tree, or JSON."),
    ] = ExplainFormat.text,
    output: Output = None,
    dot: Annotated[
        Path | None,
        typer.Option("--dot", metavar="FILE", help="Also write the graph as Graphviz DOT text."),
    ] = None,
    max_nodes: Annotated[
        int, typer.Option("--max-nodes", min=1, help="Describe at most N nodes.")
    ] = 10_000,
    max_lines: Annotated[
        int, typer.Option("--max-lines", min=5, help="Print at most N tree lines.")
    ] = 200,
    model: Model = "peft-checkpoint",
    factory: Factory = None,
    config: Config = None,
    debug: Debug = False,
    version: Version = False,
) -> None:
    """Draw the graph one finding keeps alive: nodes, saved tensors with shapes and bytes, leaves.

    Exit codes: 0 drawn (or nothing retained), 2 usage error (unknown --path), 3 the target could not be run.
    """
    from leakscope.api import explain as run_explain
    from leakscope.render.dot import render as render_dot
    from leakscope.render.tree import render as render_tree

    # [tool.leakscope] fills what the command line did not give; a project's "both" is a check
    # setting, and explain keeps its own --mode (its help offers only the modes it takes)
    settings = resolve(ctx, targets=[target] if target else None)
    fmt_, output = settings.fmt, settings.output
    one_mode = settings.options.modes[0]
    check_output(dot, fmt_, "--dot FILE")  # before anything runs
    try:
        with contextlib.redirect_stdout(sys.stderr):
            view = run_explain(
                settings.targets[0], path, settings.options, Mode(one_mode), max_nodes=max_nodes
            )
    except LeakscopeError as exc:
        if debug and exc.detail:
            typer.echo(terminal(exc.detail, newlines=True), err=True)
        fail(exc.message, int(exc.exit_code), fmt_, output)
    if fmt_ is FormatChoice.json:
        from leakscope.render.json_report import view_json

        emit(view_json(view), output)
    else:
        emit(render_tree(view, max_lines=max_lines), output)
    if dot is not None:
        emit(render_dot(view), dot, "--dot FILE")
        typer.echo(f"leakscope: wrote {terminal(dot)}", err=True)


__all__ = ["ExplainFormat", "explain"]
