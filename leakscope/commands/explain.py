"""``leakscope explain``: draw the graph one finding keeps alive."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from leakscope.commands.common import (
    DEFAULT_TARGET,
    FormatChoice,
    ModeChoice,
    check_output,
    emit,
    explicit_flags,
    fail,
)
from leakscope.errors import LeakscopeError
from leakscope.render.escape import terminal


def explain(
    ctx: typer.Context,
    target: Annotated[
        str | None,
        typer.Argument(metavar="[TARGET]", help=f"The engine. Default: {DEFAULT_TARGET}."),
    ] = None,
    path: Annotated[
        str | None, typer.Option("--path", help="The finding to explain (default: the first).")
    ] = None,
    mode: Annotated[
        ModeChoice, typer.Option("--mode", help="train or forward-only.")
    ] = ModeChoice.train,
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
    model: Annotated[
        str, typer.Option("--model", help="Tiny model (see `check --help`).")
    ] = "peft-checkpoint",
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Draw the graph one finding keeps alive: nodes, saved tensors with shapes and bytes, leaves.

    Exit codes: 0 drawn (or nothing retained), 2 usage error (unknown --path), 3 the target could not be run.
    """
    from leakscope import config as project_config
    from leakscope.api import explain as run_explain
    from leakscope.errors import ConfigError
    from leakscope.options import CheckOptions
    from leakscope.render.dot import render as render_dot
    from leakscope.render.tree import render as render_tree
    from leakscope.results import Mode

    try:  # [tool.leakscope] fills what the command line did not give
        settings = project_config.discover().override(
            project_config.parse(explicit_flags(ctx), "the command line")
        )
    except ConfigError as exc:
        fail(exc.message, int(exc.exit_code), FormatChoice.text, None)
    # a config's "both" is a check setting; explain then keeps its own --mode
    mode = ModeChoice(settings.mode) if settings.mode not in (None, "both") else mode
    model = settings.model or model
    if mode is ModeChoice.both:
        fail(
            "explain takes one mode: --mode train or --mode forward-only",
            2,
            FormatChoice.text,
            None,
        )
    check_output(dot, FormatChoice.text, "--dot FILE")  # before anything runs
    if target is None:  # as check does: the project's first target, else the built-in engine
        target = settings.targets[0] if settings.targets else DEFAULT_TARGET
    try:
        options = CheckOptions(model=model)
        with contextlib.redirect_stdout(sys.stderr):
            view = run_explain(target, path, options, Mode(mode.value), max_nodes=max_nodes)
    except LeakscopeError as exc:
        if debug and exc.detail:
            typer.echo(terminal(exc.detail, newlines=True), err=True)
        fail(exc.message, int(exc.exit_code), FormatChoice.text, None)
    emit(render_tree(view, max_lines=max_lines), None)
    if dot is not None:
        emit(render_dot(view), dot, "--dot FILE")
        typer.echo(f"leakscope: wrote {terminal(dot)}", err=True)


__all__ = ["explain"]
