"""``leakscope fix``: prove each finding's one-line edit, show it as a diff, and write the verified ones."""

from __future__ import annotations

import contextlib
import enum
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

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
    Method,
    MicroBatches,
    Mode,
    ModeChoice,
    Model,
    Output,
    Quiet,
    SetValues,
    Timeout,
    Version,
    check_output,
    emit,
    fail,
    print_tracebacks,
    resolve,
)
from leakscope.errors import LeakscopeError
from leakscope.render.escape import terminal

if TYPE_CHECKING:
    from leakscope.results import FixReport


class FixFormat(str, enum.Enum):
    text = "text"
    json = "json"


def fix(
    ctx: typer.Context,
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TARGET",
            help="Engines to check and fix, as for check, or a training script and its arguments "
            f"(train.py [ARGS]...: watched, and each fix proven by re-running it). Default: the "
            f"[tool.leakscope] targets, else {DEFAULT_TARGET}.",
            show_default=False,
        ),
    ] = None,
    method: Method = None,
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
    allow_outside: Annotated[
        bool,
        typer.Option(
            "--allow-outside",
            help="Also prove and write edits of files outside the current directory (the project).",
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
    given = list(targets or [])
    if given and _is_script(given[0]):
        shown = FormatChoice(fmt.value)
        check_output(output, shown)  # before anything runs (NOTE [Reports are never lost])
        _fix_script(
            given,
            list(method or []),
            apply,
            allow_outside,
            fmt,
            output,
            diff,
            debug,
            timeout,
            quiet,
        )
        return
    unknown = next((t for t in given if t.startswith("-")), None)
    if unknown is not None:
        fail(
            f"no such option: {terminal(unknown)}; see leakscope fix --help",
            2,
            FormatChoice(fmt.value),
            output,
        )
    settings = resolve(ctx)
    shown, output = settings.fmt, settings.output
    if diff and fmt is FixFormat.json:  # a project's format = "json" gives way to --diff
        fail("--diff writes a patch, not a report; drop --format json", 2, shown, output)
    if diff:
        shown = FormatChoice.text
    _refuse_input(output, list(settings.targets), shown)
    from leakscope.api import fix as run_fix

    _report(
        lambda: run_fix(
            list(settings.targets), settings.options, apply=apply, allow_outside=allow_outside
        ),
        shown,
        output,
        diff=diff,
        quiet=quiet,
        debug=debug,
    )


def _is_script(target: str) -> bool:
    """``train.py`` (a path without ``:Name``) is a script to watch and fix; ``x.py:Engine`` is a target."""
    return target.endswith(".py") and ":" not in Path(target).name


def _fix_script(
    given: list[str],
    methods: list[str],
    apply: bool,
    allow_outside: bool,
    fmt: FixFormat,
    output: Path | None,
    diff: bool,
    debug: bool,
    timeout: float | None,
    quiet: bool = False,
) -> None:
    """``leakscope fix train.py [ARGS]``: watch the job, prove each edit by re-running it, report (NOTE
    [A script's fix is proven by re-running it])."""
    from leakscope.api import fix_script
    from leakscope.live.methods import parse_method

    shown = FormatChoice(fmt.value)
    script, argv = given[0], given[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if output is not None and output.resolve() == Path(script).resolve():
        fail(
            f"{terminal(output)} is the script being fixed, an input: write the report elsewhere",
            2,
            shown,
            None,
        )
    try:
        for text in methods:
            parse_method(text)
    except LeakscopeError as exc:
        fail(exc.message, int(exc.exit_code), shown, output)
    _report(
        lambda: fix_script(
            script, argv, methods=methods, apply=apply, allow_outside=allow_outside, timeout=timeout
        ),
        shown,
        output,
        diff=diff,
        quiet=quiet,
        debug=debug,
    )


def _report(
    run: Callable[[], FixReport],
    shown: FormatChoice,
    output: Path | None,
    *,
    diff: bool,
    quiet: bool,
    debug: bool,
) -> NoReturn:
    """Run the fix (its progress on stderr), then write what it found: with ``--diff`` the patch alone
    on stdout (``git apply`` takes it) and the report on stderr, else the report; with ``-o`` or ``-q``
    each error and the summary line on stderr (no run ends in silence). Exits with the fix's code."""
    from leakscope.render import fixes as render_fixes

    try:
        with contextlib.redirect_stdout(sys.stderr):
            report = run()
    except LeakscopeError as exc:
        if debug and exc.detail:
            typer.echo(terminal(exc.detail, newlines=True), err=True)
        fail(exc.message, int(exc.exit_code), shown, output)
    if debug:  # tracebacks go to stderr, never into the report on stdout
        print_tracebacks(report.report)
    if diff:
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
    if quiet or (output is not None and not diff):
        _summary_on_stderr(report)
    raise typer.Exit(render_fixes.exit_code(report))


def _refuse_input(output: Path | None, targets: list[str], shown: FormatChoice) -> None:
    """An output path that is an input (a target's own file) is refused, exit 2 (NOTE [Files are the
    user's] in ``leakscope/fix/files.py``)."""
    if output is None:
        return
    from leakscope.harness.target import target_file

    written = output.resolve()
    for target in targets:
        if target_file(target) == written:
            fail(
                f"{terminal(output)} is the file of {terminal(target)}, an input: write the report elsewhere",
                2,
                shown,
                None,
            )


def _summary_on_stderr(report: Any) -> None:
    """Each error and the summary line on stderr, when the report went to ``-o`` or ``-q`` hid it."""
    from leakscope.render import fixes as render_fixes

    for result in report.report.results:
        if result.error:
            typer.echo(f"leakscope: {terminal(result.target)}: {terminal(result.error)}", err=True)
    typer.echo(f"leakscope: {terminal(render_fixes.summary_line(report))}", err=True)


__all__ = ["FixFormat", "fix"]
