"""``leakscope fix``: prove each finding's one-line edit, show it as a diff, and write the verified ones."""

from __future__ import annotations

import contextlib
import enum
import sys
from typing import Annotated

import typer

from leakscope.commands.common import (
    DEFAULT_TARGET,
    Config,
    Confirm,
    Debug,
    Device,
    DeviceChoice,
    Factory,
    FormatChoice,
    Jobs,
    MicroBatches,
    Mode,
    ModeChoice,
    Model,
    Output,
    Quiet,
    SetValues,
    Timeout,
    Version,
    emit,
    fail,
    print_tracebacks,
    resolve,
)
from leakscope.errors import LeakscopeError
from leakscope.render.escape import terminal


class FixFormat(str, enum.Enum):
    text = "text"
    json = "json"


def fix(
    ctx: typer.Context,
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TARGET",
            help=f"Engines to check and fix, as for check. Default: the [tool.leakscope] targets, else {DEFAULT_TARGET}.",
            show_default=False,
        ),
    ] = None,
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Write the verified edits as one unified patch (git apply reads it) on stdout, "
            "and the report on stderr.",
        ),
    ] = False,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Write the verified edits into their files (atomically; refused where the "
            "line changed since the check). Unverified edits are never written.",
        ),
    ] = False,
    fmt: Annotated[
        FixFormat, typer.Option("--format", "-f", help="Report format on stdout.")
    ] = FixFormat.text,
    output: Output = None,
    quiet: Quiet = False,
    mode: Mode = ModeChoice.both,
    factory: Factory = None,
    model: Model = "peft-checkpoint",
    confirm: Confirm = True,
    micro_batches: MicroBatches = 3,
    device: Device = DeviceChoice.auto,
    debug: Debug = False,
    config: Config = None,
    set_values: SetValues = None,
    timeout: Timeout = None,
    jobs: Jobs = 1,
    version: Version = False,
) -> None:
    """Check engines, then prove each finding's one-line fix: re-run with the edit and compare one train
    step's gradients. Verified edits are written with --apply; nothing is written without it.

    Exit codes: 0 nothing to fix, or every fix verified (with --apply: written), 1 a leak remains
    without a verified (or written) fix, 2 usage error, 3 a target could not be checked.
    """
    settings = resolve(ctx)
    shown, output = settings.fmt, settings.output
    if diff and fmt is FixFormat.json:  # a project's format = "json" gives way to --diff
        fail("--diff writes a patch, not a report; drop --format json", 2, shown, output)
    if diff:
        shown = FormatChoice.text
    from leakscope.api import fix as run_fix
    from leakscope.render import fixes as render_fixes

    try:
        with contextlib.redirect_stdout(sys.stderr):
            report = run_fix(list(settings.targets), settings.options, apply=apply)
    except LeakscopeError as exc:
        if debug and exc.detail:
            typer.echo(terminal(exc.detail, newlines=True), err=True)
        fail(exc.message, int(exc.exit_code), shown, output)
    if debug:  # tracebacks go to stderr, never into the report on stdout
        print_tracebacks(report.report)
    if diff:  # stdout (or -o) carries the patch only; the report goes to stderr
        emit(render_fixes.render_patch(report), output)
        if not quiet:
            typer.echo(render_fixes.render_text(report), err=True, nl=False)
    elif output is not None or not quiet:
        emit(
            render_fixes.render_json(report, debug=debug)
            if shown is FormatChoice.json
            else render_fixes.render_text(report),
            output,
        )
    if quiet or (output is not None and not diff):  # no run ends in silence
        for result in report.report.results:
            if result.error:
                typer.echo(
                    f"leakscope: {terminal(result.target)}: {terminal(result.error)}", err=True
                )
        typer.echo(f"leakscope: {terminal(render_fixes.summary_line(report))}", err=True)
    raise typer.Exit(render_fixes.exit_code(report))


__all__ = ["FixFormat", "fix"]
