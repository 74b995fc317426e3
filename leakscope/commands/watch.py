"""``leakscope watch``: run a real training job and find which earlier step's graph it keeps."""

from __future__ import annotations

import enum
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from leakscope.atomic import write
from leakscope.commands.common import (
    Color,
    ColorChoice,
    Format,
    FormatChoice,
    Method,
    Output,
    Quiet,
    Version,
    check_output,
    emit,
    fail,
    print_tracebacks,
    report_text,
    summarize,
)
from leakscope.errors import LeakscopeError, UsageError
from leakscope.policy import FailOn, exit_code
from leakscope.render.escape import terminal

if TYPE_CHECKING:
    from leakscope.live.job import JobResult


class ThenChoice(str, enum.Enum):
    stop = "stop"
    continue_ = "continue"


def watch(
    script: Annotated[
        str | None,
        typer.Argument(
            metavar="SCRIPT.py",
            help="The training script, run as __main__ (or -m MODULE).",
            show_default=False,
        ),
    ] = None,
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ARGS]...", help="The script's own arguments, as given.", show_default=False
        ),
    ] = None,
    module: Annotated[
        str | None,
        typer.Option(
            "-m", "--module", metavar="MODULE", help="Run a module as __main__, as python -m does."
        ),
    ] = None,
    method: Method = None,
    micro_batches: Annotated[
        int, typer.Option("--micro-batches", min=1, help="Watched calls (after --skip).")
    ] = 3,
    skip: Annotated[
        int, typer.Option("--skip", min=0, help="Warm-up calls let through unwatched first.")
    ] = 0,
    then: Annotated[
        ThenChoice,
        typer.Option(
            "--then",
            help="stop: end the job once the report is made; continue: detach and let it run.",
        ),
    ] = ThenChoice.stop,
    fmt: Format = FormatChoice.text,
    output: Output = None,
    quiet: Quiet = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="Interrupt the job after SECONDS; the report covers the calls before.",
            show_default=False,
        ),
    ] = None,
    source: Annotated[
        bool,
        typer.Option(
            "--source/--no-source",
            help="Record where retaining tensors were created (anomaly-mode traces).",
        ),
    ] = True,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the job's traceback when it fails.")
    ] = False,
    emit_test: Annotated[
        Path | None,
        typer.Option(
            "--emit-test",
            metavar="FILE",
            help="Write a pytest test (the leakscope fixture) that checks each class whose watched step "
            "kept a graph, failing until the leak is fixed (docs/fix.md).",
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="PATH",
            help="With --emit-test: a finding path you confirm is deliberate, allowlisted in the test (repeatable).",
        ),
    ] = None,
    color: Color = ColorChoice.auto,
    version: Version = False,
) -> None:
    """Run a training job and find which earlier step's graph it keeps alive, who holds it, and the bytes.

    Exit codes as for check: 0 clean, 1 a leak, 2 usage error, 3 the step could not be watched or the job failed.
    """
    from leakscope.live.methods import parse_method, unknown_in_source
    from leakscope.live.session import WatchOptions

    check_output(output, fmt)  # before the job runs
    if emit_test is not None:
        check_output(emit_test, fmt, "--emit-test FILE")
    elif allow:
        fail(
            "--allow names findings for the test --emit-test writes; add --emit-test FILE",
            2,
            fmt,
            output,
        )
    _refuse_inputs([p for p in (output, emit_test) if p is not None], script, fmt)
    argv = list(args or [])
    if (
        module is not None and script is not None
    ):  # -m MODULE takes the rest as the module's arguments
        argv, script = [script, *argv], None
    try:
        if script is None and module is None:
            raise UsageError("give a script to run (leakscope watch train.py ...) or -m MODULE")
        # NOTE [A typo in --method fails before the job]: the job's sys.path starts with the
        # script's directory (python SCRIPT.py) or the working directory (python -m)
        search = [str(Path(script).resolve().parent) if script else str(Path.cwd()), *sys.path]
        for text in method or []:
            problem = unknown_in_source(parse_method(text), search)
            if problem is not None:
                raise UsageError(problem)
        if timeout is not None and (timeout < 0 or timeout != timeout):
            raise UsageError(
                f"--timeout {timeout:g} is negative; give seconds > 0, or 0 for no limit"
            )
        options = WatchOptions(
            methods=tuple(method or ()),
            micro_batches=micro_batches,
            skip=skip,
            then=then.value,
            source=source,
        )
    except UsageError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    from leakscope.live.job import watch_job

    try:
        # The job runs in a process of its own, its stdout on stderr: stdout carries only the report.
        done = watch_job(
            module or script or "",
            argv,
            options,
            as_module=module is not None,
            timeout=timeout or None,
        )
    except LeakscopeError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    if emit_test is not None and done.reporting:
        _emit_test(done.report, emit_test, list(allow or []), script, argv, list(method or []))
    raise typer.Exit(_output(done, fmt, output, debug, quiet=quiet, color=color))


def _refuse_inputs(outputs: list[Path], script: str | None, fmt: FormatChoice) -> None:
    """An output path that is the script itself (``--emit-test train.py train.py``), or the same path
    twice, is refused before the job runs, exit 2."""
    written = [p.resolve() for p in outputs]
    if len(set(written)) < len(written):
        fail("-o and --emit-test name the same file: give each its own", 2, fmt, None)
    if script is not None:
        for given, path in zip(outputs, written, strict=True):
            if path == Path(script).resolve():
                fail(
                    f"{terminal(given)} is the script being watched, an input: write it elsewhere",
                    2,
                    fmt,
                    None,
                )


def _emit_test(
    report: Any,
    path: Path,
    allow: list[str],
    script: str | None,
    argv: list[str],
    methods: list[str],
) -> None:
    """Write the regression test for the report's leaking classes, and for a graph the job itself
    holds, a watch of the job (NOTE [From a real job to a gate]); say on stderr what it checks, or
    that there was nothing to write."""

    from leakscope.render import regression

    found = regression.leaking_classes(report, script)
    note = regression.job_note(report, script, allow)
    if note is not None:
        typer.echo(f"leakscope: {terminal(note)}", err=True)
    held = regression.job_held(report, allow) if script else []
    if held:
        found = {**found, terminal(f"the job {script}"): held}
        found = {k: v for k, v in found.items() if v}
    if not found:
        typer.echo(f"leakscope: no step kept a graph: {terminal(path)} not written", err=True)
        return
    seen = {p for paths in found.values() for p in paths}
    for entry in allow:
        if entry not in seen and not (
            entry.endswith("*") and any(p.startswith(entry[:-1]) for p in seen)
        ):
            typer.echo(
                f"leakscope: warning: --allow {terminal(entry)} matches no finding of this watch",
                err=True,
            )
    try:
        text = regression.render(
            report,
            allow=allow,
            script=script,
            args=argv,
            methods=methods,
            cwd=os.path.relpath(os.getcwd(), path.resolve().parent),
        )
        write(path, text.encode("utf-8"))
    except OSError as exc:
        typer.echo(
            f"leakscope: error: cannot write {terminal(path)}: {exc.strerror or exc}", err=True
        )
        raise typer.Exit(2) from None
    typer.echo(
        f"leakscope: wrote {terminal(path)}: it checks {terminal(', '.join(found))}", err=True
    )


def _output(
    done: JobResult,
    fmt: FormatChoice,
    output: Path | None,
    debug: bool,
    *,
    quiet: bool = False,
    color: ColorChoice = ColorChoice.auto,
) -> int:
    """Print a watch's errors on stderr and its report; the exit code."""

    report = done.report
    if not done.reporting:
        # A torchrun rank other than 0: rank 0 reports (and exits with) the merged verdict, and this
        # rank has waited until it printed (NOTE [One launch's store]); it exits with its job's own code.
        return int(done.job_exit_code)
    if debug:  # tracebacks go to stderr, never into the report on stdout
        print_tracebacks(report)
    if output is not None or quiet:
        if output is not None:
            emit(report_text(report, fmt, output, debug=debug, color=color), output)
        summarize(report, FailOn.LEAK, output)  # each error, and the summary line
    else:
        for result in report.results:
            if result.verdict.value == "error" and result.error:
                typer.echo(
                    f"leakscope: {terminal(result.target)}: {terminal(result.error)}", err=True
                )
        emit(report_text(report, fmt, output, debug=debug, color=color), output)
    return exit_code(report)


__all__ = ["ThenChoice", "watch"]
