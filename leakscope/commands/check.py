"""``leakscope check``: engines on tiny models owned by leakscope; the run ``estimate`` shares."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from leakscope.commands.common import (
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT,
    At,
    Color,
    ColorChoice,
    Config,
    Confirm,
    Debug,
    Device,
    DeviceChoice,
    Factory,
    FailOn,
    Format,
    FormatChoice,
    Jobs,
    MicroBatches,
    Mode,
    ModeChoice,
    Model,
    Output,
    Quiet,
    Run,
    SetValues,
    Timeout,
    Version,
    emit,
    fail,
    print_tracebacks,
    report_text,
    resolve,
    summarize,
)
from leakscope.errors import LeakscopeError
from leakscope.render.escape import terminal

if TYPE_CHECKING:
    from leakscope.options import CheckOptions
    from leakscope.results import Report


def check(
    ctx: typer.Context,
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TARGET",
            help="Engines to check: 'pkg.module:Name' or 'path/to/file.py:Name' "
            f"(a class built as Name(model), a factory, or a step function). Default: {DEFAULT_TARGET}.",
            show_default=False,
        ),
    ] = None,
    mode: Mode = ModeChoice.both,
    fmt: Format = FormatChoice.text,
    output: Output = None,
    factory: Factory = None,
    model: Model = "peft-checkpoint",
    confirm: Confirm = True,
    micro_batches: MicroBatches = 3,
    device: Device = DeviceChoice.auto,
    at: At = None,
    debug: Debug = False,
    config: Config = None,
    fail_on: FailOn = None,
    quiet: Quiet = False,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress",
            help="Live status line on stderr. Default: on a terminal, not with --format json.",
            show_default=False,
        ),
    ] = None,
    isolate: Annotated[
        bool,
        typer.Option(
            "--isolate/--no-isolate",
            help="Check each target in its own process; off: in this one, for debugging.",
        ),
    ] = True,
    set_values: SetValues = None,
    timeout: Timeout = None,
    jobs: Jobs = 1,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Prove each finding's one-line edit (re-run with it, gradients compared); the "
            "report marks it verified, and SARIF, github and html show verified edits. Writes no "
            "source file (leakscope fix does).",
        ),
    ] = False,
    color: Color = ColorChoice.auto,
    version: Version = False,
) -> None:
    """Check engines for autograd graphs their forward_step leaves reachable.

    Exit codes: 0 every target clean, 1 a leak, 2 usage error, 3 a target could not be checked.
    """
    run(resolve(ctx), progress=progress, fix=fix)


def run(settings: Run, *, progress: bool | None = None, fix: bool = False) -> None:
    """Check with the resolved ``settings``, render, exit (``check`` and ``estimate``)."""
    from leakscope.harness.distributed import barrier, is_reporting_rank, session

    fmt, output = settings.fmt, settings.output
    with session():  # under torchrun: one process group for the check and the merged report
        try:
            # the live status line: on a terminal, unless JSON or --quiet was asked for
            shown = (
                False
                if settings.quiet
                else (False if progress is None and fmt is FormatChoice.json else progress)
            )
            report = _check(list(settings.targets), settings.options, progress=shown, fix=fix)
        except LeakscopeError as exc:
            if settings.debug and exc.detail:
                typer.echo(terminal(exc.detail, newlines=True), err=True)
            fail(exc.message, int(exc.exit_code), fmt, output)
        if settings.debug:  # tracebacks go to stderr, never into the report on stdout
            print_tracebacks(report)
        from leakscope.policy import exit_code

        text = report_text(
            report,
            fmt,
            output,
            fail_on=settings.fail_on,
            debug=settings.debug,
            color=settings.color,
        )
        # under torchrun rank 0 prints the merged report
        if is_reporting_rank():
            if output is not None or not settings.quiet:
                emit(text, output)
            if output is not None or settings.quiet:
                summarize(report, settings.fail_on, output)
        barrier()  # no rank exits (torchrun would stop the others) before it is written
    raise typer.Exit(exit_code(report, settings.fail_on))


def _check(
    targets: list[str], options: CheckOptions, progress: bool | None = None, fix: bool = False
) -> Report:
    """Run the library check with stdout redirected: engines that print cannot corrupt the report.
    ``fix``: and prove each finding's edit (:func:`leakscope.api.fix`, writing nothing)."""
    from leakscope.api import check as run_check
    from leakscope.api import fix as run_fix
    from leakscope.render import progress as display

    total = len(targets) * len(options.modes)
    enabled = display.wanted(progress)
    with display.display(
        total, enabled, modes=len(options.modes), timeout=options.timeout
    ) as on_result:
        with contextlib.redirect_stdout(sys.stderr):
            if fix:
                return run_fix(targets, options, on_result=on_result).report
            return run_check(targets, options, on_result=on_result)


__all__ = ["DEFAULT_TIMEOUT", "check", "run"]
