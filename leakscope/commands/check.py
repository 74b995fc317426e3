"""``leakscope check``: engines on tiny models owned by leakscope; the run ``estimate`` shares."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from leakscope.commands.common import (
    DEFAULT_TARGET,
    At,
    Confirm,
    Debug,
    Device,
    DeviceChoice,
    Factory,
    FailOnChoice,
    Format,
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
    report_text,
)
from leakscope.errors import LeakscopeError, UsageError
from leakscope.render.escape import terminal

if TYPE_CHECKING:
    from leakscope.options import CheckOptions
    from leakscope.results import Report

#: seconds one target's isolated check may take (tiny models: a real check takes seconds)
DEFAULT_TIMEOUT = 600.0


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
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="Read the tool.leakscope table of FILE instead of ./pyproject.toml; flags override it.",
        ),
    ] = None,
    fail_on: Annotated[
        FailOnChoice | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 on a leak (default), or also on a warning such as until-gc.",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print no report on stdout (--output still writes it); the exit code tells.",
        ),
    ] = False,
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
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help=f"Kill a target's check after SECONDS (isolated only; 0: no limit). Default: {DEFAULT_TIMEOUT:g}.",
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
            help="Check N targets at once, each in its own process; the report keeps their order.",
        ),
    ] = 1,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Prove each finding's one-line edit (re-run with it, gradients compared); the "
            "report marks it verified, and SARIF, github and html show verified edits. Writes no "
            "source file (leakscope fix does).",
        ),
    ] = False,
) -> None:
    """Check engines for autograd graphs their forward_step leaves reachable.

    Exit codes: 0 every target clean, 1 a leak, 2 usage error, 3 a target could not be checked.
    """
    run(
        explicit_flags(ctx),
        targets=list(targets or []),
        mode=mode,
        fmt=fmt,
        output=output,
        factory=factory,
        model=model,
        confirm=confirm,
        micro_batches=micro_batches,
        device=device,
        at=at,
        debug=debug,
        config=config,
        quiet=quiet,
        progress=progress,
        isolate=isolate,
        timeout=timeout,
        jobs=jobs,
        fix=fix,
    )


def run(
    flags: dict[str, object],
    *,
    targets: list[str],
    mode: ModeChoice,
    fmt: FormatChoice,
    output: Path | None,
    factory: str | None,
    model: str,
    confirm: bool,
    micro_batches: int,
    device: DeviceChoice,
    at: str | None,
    debug: bool,
    config: Path | None = None,
    quiet: bool = False,
    progress: bool | None = None,
    isolate: bool = True,
    timeout: float | None = None,
    jobs: int = 1,
    every_setting: bool = True,
    fix: bool = False,
) -> None:
    """Merge ``[tool.leakscope]`` under the command line's ``flags``, check, render, exit.

    ``every_setting``: check every realistic value of the adapters' knobs (the gate);
    ``estimate`` projects the framework's default only.
    """
    targets, options, gate = prepare(
        flags,
        targets=targets,
        mode=mode,
        fmt=fmt,
        output=output,
        factory=factory,
        model=model,
        confirm=confirm,
        micro_batches=micro_batches,
        device=device,
        at=at,
        config=config,
        isolate=isolate,
        timeout=timeout,
        jobs=jobs,
        every_setting=every_setting,
    )
    from leakscope.harness.distributed import barrier, is_reporting_rank, session

    with session():  # under torchrun: one process group for the check and the merged report
        try:
            # the live status line: on a terminal, unless JSON or --quiet was asked for
            shown = (
                False
                if quiet
                else (False if progress is None and fmt is FormatChoice.json else progress)
            )
            report = _check(targets, options, progress=shown, fix=fix)
        except LeakscopeError as exc:
            if debug and exc.detail:
                typer.echo(terminal(exc.detail, newlines=True), err=True)
            fail(exc.message, int(exc.exit_code), fmt, output)
        if debug:  # tracebacks go to stderr, never into the report on stdout
            print_tracebacks(report)
        from leakscope.policy import exit_code

        text = report_text(report, fmt, output, fail_on=gate, debug=debug)
        # under torchrun rank 0 prints the merged report
        if is_reporting_rank() and (output is not None or not quiet):
            emit(text, output)
        barrier()  # no rank exits (torchrun would stop the others) before it is written
    raise typer.Exit(exit_code(report, gate))


def prepare(
    flags: dict[str, object],
    *,
    targets: list[str],
    mode: ModeChoice,
    fmt: FormatChoice,
    output: Path | None,
    factory: str | None,
    model: str,
    confirm: bool,
    micro_batches: int,
    device: DeviceChoice,
    at: str | None,
    config: Path | None,
    isolate: bool,
    timeout: float | None,
    jobs: int,
    every_setting: bool = True,
) -> tuple[list[str], CheckOptions, str]:
    """The targets, the check's options and the gate (``fail_on``): ``[tool.leakscope]`` merged under the
    command line's ``flags``; a bad value fails in one line (exit 2). ``check`` and ``fix`` share it."""
    from leakscope import config as project_config
    from leakscope.errors import ConfigError
    from leakscope.harness.target import split_target
    from leakscope.options import CheckOptions
    from leakscope.results import Mode

    check_output(
        output, fmt
    )  # before anything runs: a report that cannot be written is not run for
    try:
        settings = project_config.discover(config).override(
            project_config.parse(flags, "the command line")
        )
    except ConfigError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    mode = ModeChoice(settings.mode) if settings.mode else mode
    model = settings.model or model
    factory = settings.factory or factory
    confirm = settings.confirm if settings.confirm is not None else confirm
    micro_batches = settings.micro_batches or micro_batches
    gate = settings.effective_fail_on
    targets = list(targets or settings.targets or [DEFAULT_TARGET])
    from leakscope.harness.distributed import launcher_env

    # Under torchrun the ranks must be the processes torchrun started: check in them.
    isolate = isolate and launcher_env() is None
    limit = DEFAULT_TIMEOUT if timeout is None else (timeout or None)
    try:
        for target in targets:
            split_target(target)
        if factory is not None:
            split_target(factory)
        if model == "hf-lora":
            _require_hf()
        if timeout is not None and not isolate and launcher_env() is None:
            raise UsageError("--timeout needs a child process to kill; drop --no-isolate")
        scale = None
        if at is not None:
            from leakscope.diagnose.projection import parse_at

            scale = parse_at(at)
        options = CheckOptions(
            modes=(Mode.TRAIN, Mode.FORWARD_ONLY)
            if mode is ModeChoice.both
            else (Mode(mode.value),),
            model=model,
            factory=factory,
            confirm=confirm,
            micro_batches=micro_batches,
            device=None if device is DeviceChoice.auto else device.value,
            at=scale,
            isolate=isolate,
            timeout=limit if isolate else None,
            jobs=jobs if launcher_env() is None else 1,
            every_setting=every_setting,
        )
    except UsageError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    try:
        options = settings.check_options(options)
    except LeakscopeError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    return targets, options, gate


def _require_hf() -> None:
    """``--model hf-lora`` without transformers/peft is a usage error (checked without importing them)."""
    from leakscope.models.names import HF_EXTRA_HINT, missing_hf

    missing = missing_hf()
    if missing:
        raise UsageError(
            f"--model hf-lora needs {' and '.join(missing)}, which is not installed; {HF_EXTRA_HINT}"
        )


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


__all__ = ["DEFAULT_TIMEOUT", "check", "prepare", "run"]
