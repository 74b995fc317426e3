"""``leakscope fix``: prove each finding's one-line edit, show it as a diff, and write the verified ones."""

from __future__ import annotations

import contextlib
import enum
import sys
from pathlib import Path
from typing import Annotated

import typer

from leakscope.commands.check import DEFAULT_TIMEOUT, prepare
from leakscope.commands.common import (
    DEFAULT_TARGET,
    Confirm,
    Debug,
    Device,
    DeviceChoice,
    Factory,
    FormatChoice,
    MicroBatches,
    Mode,
    ModeChoice,
    Model,
    Output,
    SetValues,
    check_output,
    emit,
    explicit_flags,
    fail,
    print_tracebacks,
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
        bool, typer.Option("--diff", help="Print each edit as a unified diff against its file.")
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
    mode: Mode = ModeChoice.both,
    factory: Factory = None,
    model: Model = "peft-checkpoint",
    confirm: Confirm = True,
    micro_batches: MicroBatches = 3,
    device: Device = DeviceChoice.auto,
    debug: Debug = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="Read the tool.leakscope table of FILE instead of ./pyproject.toml.",
        ),
    ] = None,
    set_values: SetValues = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help=f"Kill a target's check, or one proof run, after SECONDS (0: no limit). Default: {DEFAULT_TIMEOUT:g}.",
            show_default=False,
        ),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Check N targets at once (the proofs run one at a time).",
        ),
    ] = 1,
) -> None:
    """Check engines, then prove each finding's one-line fix: re-run with the edit and compare one train
    step's gradients. Verified edits are written with --apply; nothing is written without it.

    Exit codes: 0 nothing to fix, or every fix verified (with --apply: written), 1 a leak remains
    without a verified (or written) fix, 2 usage error, 3 a target could not be checked.
    """
    shown = FormatChoice(fmt.value)
    check_output(output, shown)  # before anything runs (NOTE [Reports are never lost])
    targets_, options, _gate = prepare(
        explicit_flags(ctx),
        targets=list(targets or []),
        mode=mode,
        fmt=shown,
        output=output,
        factory=factory,
        model=model,
        confirm=confirm,
        micro_batches=micro_batches,
        device=device,
        at=None,
        config=config,
        isolate=True,
        timeout=timeout,
        jobs=jobs,
    )
    _refuse_input(output, targets_, shown)
    from leakscope.api import fix as run_fix
    from leakscope.render import fixes as render_fixes

    try:
        with contextlib.redirect_stdout(sys.stderr):
            report = run_fix(targets_, options, apply=apply, allow_outside=allow_outside)
    except LeakscopeError as exc:
        if debug and exc.detail:
            typer.echo(terminal(exc.detail, newlines=True), err=True)
        fail(exc.message, int(exc.exit_code), shown, output)
    if debug:  # tracebacks go to stderr, never into the report on stdout
        print_tracebacks(report.report)
    if fmt is FixFormat.json:
        text = render_fixes.render_json(report, debug=debug)
    else:
        text = render_fixes.render_text(report, diff=diff)
    emit(text, output)
    raise typer.Exit(render_fixes.exit_code(report))


def _refuse_input(output: Path | None, targets: list[str], shown: FormatChoice) -> None:
    """An output path that is an input (a target's own file) is refused, exit 2 (NOTE [Files are the
    user's] in ``leakscope/harness/patch.py``)."""
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


__all__ = ["FixFormat", "fix"]
