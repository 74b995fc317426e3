"""The ``leakscope`` command: parse options, call the library, render, exit.

No detection logic here. torch is imported only when a check runs, so
``leakscope --help`` and ``--version`` stay fast.
"""

from __future__ import annotations

import contextlib
import enum
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from leakscope import __version__
from leakscope.errors import ExitCode, LeakscopeError, UsageError

if TYPE_CHECKING:
    from leakscope.options import CheckOptions
    from leakscope.results import Report

DEFAULT_TARGET = "leakscope.models.engines:FSDPEngine"
#: seconds one target's isolated check may take (tiny models: a real check takes seconds)
DEFAULT_TIMEOUT = 600.0
#: micro-batches of estimate's growth run: enough to tell a growing leak from a bounded one
ESTIMATE_MICRO_BATCHES = 3

app = typer.Typer(
    name="leakscope",
    help="Find autograd graphs that a training engine's forward_step keeps alive.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rendering it with rich doubled the CPU cost of `--help` (see docs/performance.md).
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class ModeChoice(str, enum.Enum):
    train = "train"
    forward_only = "forward-only"
    both = "both"


class FormatChoice(str, enum.Enum):
    text = "text"
    json = "json"
    junit = "junit"
    sarif = "sarif"
    github = "github"
    html = "html"


class FailOnChoice(str, enum.Enum):
    leak = "leak"
    warning = "warning"


class DeviceChoice(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


MicroBatches = Annotated[
    int,
    typer.Option(
        "--micro-batches", min=1,
        help="Run N micro-batches the way forward_backward_batch does and report growth (1 disables).",
    ),
]
Device = Annotated[
    DeviceChoice, typer.Option("--device", help="Where the tiny model runs; auto picks cuda when available.")
]
SetValues = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="KEY=VALUE",
        help="An adapter setting, e.g. --set calculate_entropy=true for verl (repeatable; see docs/adapters.md).",
        show_default=False,
    ),
]
At = Annotated[
    str | None,
    typer.Option(
        "--at", metavar="SCALE",
        help="Project leaks to real scale: hidden=4096,tokens=17700,dtype=bf16,micro-batches=16,gpu-memory=80GiB.",
    ),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"leakscope {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """leakscope: catch forward_step outputs that keep autograd graphs alive, before they OOM."""


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        output.write_text(text, encoding="utf-8")


def _fail(message: str, code: int, fmt: FormatChoice, output: Path | None) -> None:
    """One line on stderr; a valid JSON document on stdout when JSON was asked for."""
    typer.echo(f"leakscope: error: {message}", err=True)
    if fmt is FormatChoice.json:
        import json
        import platform

        doc = {
            "schema_version": 1,
            "leakscope_version": __version__,
            "torch_version": None,
            "python_version": platform.python_version(),
            "error": message,
            "results": [],
        }
        _emit(json.dumps(doc, indent=2) + "\n", output)
    raise typer.Exit(code)


@app.command()
def check(
    # None when another command (estimate) calls check() as a function.
    ctx: typer.Context = None,  # type: ignore[assignment]
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TARGET",
            help="Engines to check: 'pkg.module:Name' or 'path/to/file.py:Name' "
            f"(a class built as Name(model), a factory, or a step function). Default: {DEFAULT_TARGET}.",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[ModeChoice, typer.Option("--mode", help="Which step to drive.")] = ModeChoice.both,
    fmt: Annotated[FormatChoice, typer.Option("--format", "-f", help="Report format on stdout.")] = FormatChoice.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to FILE instead of stdout.", metavar="FILE")
    ] = None,
    factory: Annotated[
        str | None,
        typer.Option("--factory", help="'pkg.mod:make_engine': builds the engine from the tiny model.", metavar="TARGET"),
    ] = None,
    model: Annotated[
        str, typer.Option("--model", help="Tiny model: peft-checkpoint, reentrant-checkpoint, full-finetune, hf-lora (needs transformers and peft).")
    ] = "peft-checkpoint",
    confirm: Annotated[
        bool, typer.Option("--confirm/--no-confirm", help="Re-run the step to prove each holder retains on its own.")
    ] = True,
    micro_batches: MicroBatches = 3,
    device: Device = DeviceChoice.auto,
    at: At = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of engine and import errors.")] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", metavar="FILE",
            help="Read the tool.leakscope table of FILE instead of ./pyproject.toml; flags override it.",
        ),
    ] = None,
    fail_on: Annotated[
        FailOnChoice | None,
        typer.Option("--fail-on", help="Exit 1 on a leak (default), or also on a warning such as until-gc.",
                     show_default=False),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print no report on stdout (--output still writes it); the exit code tells.")
    ] = False,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Live status line on stderr. Default: on a terminal, not with --format json.",
                     show_default=False),
    ] = None,
    isolate: Annotated[
        bool,
        typer.Option("--isolate/--no-isolate", help="Check each target in its own process; off: in this one, for debugging."),
    ] = True,
    set_values: SetValues = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", metavar="SECONDS",
            help=f"Kill a target's check after SECONDS (isolated only; 0: no limit). Default: {DEFAULT_TIMEOUT:g}.",
            show_default=False,
        ),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option("--jobs", "-j", min=1, metavar="N",
                     help="Check N targets at once, each in its own process; the report keeps their order."),
    ] = 1,
) -> None:
    """Check engines for autograd graphs their forward_step leaves reachable.

    Exit codes: 0 every target clean, 1 a leak, 2 usage error, 3 a target could not be checked.
    """
    from leakscope import config as project_config
    from leakscope.errors import ConfigError
    from leakscope.harness.target import split_target
    from leakscope.models.names import MODELS
    from leakscope.options import CheckOptions
    from leakscope.results import Mode

    try:
        explicit = _explicit_flags(ctx)
        if ctx is not None and ctx.info_name == "estimate":
            # estimate's growth runs are its own: the config's micro-batches must not replace them.
            explicit["micro_batches"] = micro_batches
        flags = project_config.parse(explicit, "the command line")
        settings = project_config.discover(config).override(flags)
    except ConfigError as exc:
        _fail(exc.message, int(exc.exit_code), fmt, output)
    mode = ModeChoice(settings.mode) if settings.mode else mode
    model = settings.model or model
    factory = settings.factory or factory
    confirm = settings.confirm if settings.confirm is not None else confirm
    micro_batches = settings.micro_batches or micro_batches
    gate = settings.effective_fail_on
    targets = list(targets or settings.targets or [DEFAULT_TARGET])
    scale = None
    try:
        for target in targets:
            split_target(target)
        if model not in MODELS:
            raise UsageError(f"--model {model!r} is not one of: {', '.join(MODELS)}")
        if model == "hf-lora":
            _require_hf()
        if factory is not None:
            split_target(factory)
        if timeout is not None and (timeout < 0 or timeout != timeout):
            raise UsageError(f"--timeout {timeout:g} is negative; give seconds > 0, or 0 for no limit")
        if timeout is not None and not isolate:
            raise UsageError("--timeout needs a child process to kill; drop --no-isolate")
        if jobs > 1 and not isolate:
            raise UsageError(f"--jobs {jobs} needs a process per target; drop --no-isolate")
        if at is not None:
            from leakscope.diagnose.projection import parse_at

            scale = parse_at(at)
    except UsageError as exc:
        _fail(exc.message, int(exc.exit_code), fmt, output)
    modes = (Mode.TRAIN, Mode.FORWARD_ONLY) if mode is ModeChoice.both else (Mode(mode.value),)
    limit = DEFAULT_TIMEOUT if timeout is None else (timeout or None)
    from leakscope.harness.distributed import launcher_env

    # Under torchrun the ranks must be the processes torchrun started: check in them.
    isolate = isolate and launcher_env() is None
    options = CheckOptions(
        modes=modes, model=model, factory=factory, confirm=confirm, micro_batches=micro_batches,
        device=None if device is DeviceChoice.auto else device.value, at=scale,
        isolate=isolate, timeout=limit if isolate else None, jobs=jobs,
        # estimate projects the job the framework runs by default; the gate checks every realistic setting
        every_setting=not (ctx is not None and ctx.info_name == "estimate"),
    )
    from leakscope.harness.distributed import barrier, is_reporting_rank, session

    with session():  # under torchrun: one process group for the check and the merged report
        try:
            options = settings.check_options(options)
            # the live status line: on a terminal, unless JSON or --quiet was asked for
            shown = False if quiet else (False if progress is None and fmt is FormatChoice.json else progress)
            report = _run(targets, options, progress=shown)
        except LeakscopeError as exc:
            if debug and exc.detail:
                typer.echo(exc.detail, err=True)
            _fail(exc.message, int(exc.exit_code), fmt, output)
        if debug and fmt not in (FormatChoice.text, FormatChoice.json):
            # text and JSON reports carry the tracebacks themselves under --debug: print each once.
            for result in report.results:
                if result.traceback:
                    typer.echo(f"--- {result.target} [{result.mode.value}]\n{result.traceback}", err=True)
        from leakscope.policy import exit_code
        from leakscope.render import render

        if fmt is FormatChoice.text:
            color = output is None and sys.stdout.isatty()
            text = render(report, "text", color=color, debug=debug, fail_on=gate)
        else:
            text = render(report, fmt.value, debug=debug, fail_on=gate)
        # under torchrun rank 0 prints the merged report
        if is_reporting_rank() and (output is not None or not quiet):
            _emit(text, output)
        barrier()  # no rank exits (torchrun would stop the others) before it is written
    raise typer.Exit(exit_code(report, gate))


def _require_hf() -> None:
    """``--model hf-lora`` without transformers/peft is a usage error (checked without importing them)."""
    from leakscope.models.names import HF_EXTRA_HINT, missing_hf

    missing = missing_hf()
    if missing:
        raise UsageError(f"--model hf-lora needs {' and '.join(missing)}, which is not installed; {HF_EXTRA_HINT}")


@app.command()
def estimate(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="TARGET", help="The engine: 'pkg.module:Name' or 'path/to/file.py:Name'.")],
    at: Annotated[
        str,
        typer.Option(
            "--at", metavar="SCALE",
            help="hidden=4096,tokens=17700,dtype=bf16,micro-batches=16,gpu-memory=80GiB (hidden and tokens required).",
        ),
    ],
    mode: Annotated[ModeChoice, typer.Option("--mode", help="Which step to drive.")] = ModeChoice.train,
    fmt: Annotated[FormatChoice, typer.Option("--format", "-f", help="Report format on stdout.")] = FormatChoice.text,
    model: Annotated[str, typer.Option("--model", help="Tiny model (see `check --help`).")] = "peft-checkpoint",
    set_values: SetValues = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of engine and import errors.")] = False,
) -> None:
    """Project what a leak costs at your scale: bytes per micro-batch, per update, and when memory runs out.

    Same exit codes as check. The model behind the projection is in docs/estimate.md.
    """
    # ctx: the flags given to estimate beat [tool.leakscope] as they do for check.
    check(
        ctx=ctx, targets=[target], mode=mode, fmt=fmt, output=None, factory=None, model=model, confirm=True,
        micro_batches=ESTIMATE_MICRO_BATCHES, device=DeviceChoice.auto, at=at, debug=debug, set_values=set_values,
    )


@app.command()
def explain(
    ctx: typer.Context,
    target: Annotated[
        str | None, typer.Argument(metavar="[TARGET]", help=f"The engine. Default: {DEFAULT_TARGET}.")
    ] = None,
    path: Annotated[
        str | None, typer.Option("--path", help="The finding to explain (default: the first).")
    ] = None,
    mode: Annotated[ModeChoice, typer.Option("--mode", help="train or forward-only.")] = ModeChoice.train,
    dot: Annotated[
        Path | None, typer.Option("--dot", metavar="FILE", help="Also write the graph as Graphviz DOT text.")
    ] = None,
    max_nodes: Annotated[int, typer.Option("--max-nodes", min=1, help="Describe at most N nodes.")] = 10_000,
    max_lines: Annotated[int, typer.Option("--max-lines", min=5, help="Print at most N tree lines.")] = 200,
    model: Annotated[str, typer.Option("--model", help="Tiny model (see `check --help`).")] = "peft-checkpoint",
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Draw the graph one finding keeps alive: nodes, saved tensors with shapes and bytes, leaves.

    Exit codes: 0 drawn (or nothing retained), 2 usage error (unknown --path), 3 the target could not be run.
    """
    from leakscope import config as project_config
    from leakscope.diagnose.explain import explain as run_explain
    from leakscope.errors import ConfigError
    from leakscope.options import CheckOptions
    from leakscope.render.dot import render as render_dot
    from leakscope.render.tree import render as render_tree
    from leakscope.results import Mode

    try:  # [tool.leakscope] fills what the command line did not give
        settings = project_config.discover().override(project_config.parse(_explicit_flags(ctx), "the command line"))
    except ConfigError as exc:
        _fail(exc.message, int(exc.exit_code), FormatChoice.text, None)
    # a config's "both" is a check setting; explain then keeps its own --mode
    mode = ModeChoice(settings.mode) if settings.mode not in (None, "both") else mode
    model = settings.model or model
    if mode is ModeChoice.both:
        _fail("explain takes one mode: --mode train or --mode forward-only", 2, FormatChoice.text, None)
    if target is None:  # as check does: the project's first target, else the built-in engine
        target = settings.targets[0] if settings.targets else DEFAULT_TARGET
    try:
        with contextlib.redirect_stdout(sys.stderr):
            view = run_explain(target, path, CheckOptions(model=model), Mode(mode.value), max_nodes=max_nodes)
    except LeakscopeError as exc:
        if debug and exc.detail:
            typer.echo(exc.detail, err=True)
        _fail(exc.message, int(exc.exit_code), FormatChoice.text, None)
    _emit(render_tree(view, max_lines=max_lines), None)
    if dot is not None:
        dot.write_text(render_dot(view), encoding="utf-8")
        typer.echo(f"leakscope: wrote {dot}", err=True)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[Callable[[], None]]:
    """File descriptor 1 onto 2 for the job: its output and its child processes' go to stderr.

    Yields a function that puts stdout back early (a report made while the job is still stuck).
    """
    import os

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(saved, 1)
        sys.stdout = sys.__stdout__

    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield restore
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class ThenChoice(str, enum.Enum):
    stop = "stop"
    continue_ = "continue"


@app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
def watch(
    script: Annotated[
        str | None,
        typer.Argument(metavar="SCRIPT.py", help="The training script, run as __main__ (or -m MODULE).", show_default=False),
    ] = None,
    args: Annotated[
        list[str] | None, typer.Argument(metavar="[ARGS]...", help="The script's own arguments, as given.", show_default=False)
    ] = None,
    module: Annotated[
        str | None, typer.Option("-m", "--module", metavar="MODULE", help="Run a module as __main__, as python -m does.")
    ] = None,
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method", metavar="pkg.mod:Class.method",
            help="The step to watch (repeatable). Default: verl engines' forward_step, "
            "transformers Trainer.training_step, Lightning's training_step, when the job imports them.",
            show_default=False,
        ),
    ] = None,
    micro_batches: Annotated[int, typer.Option("--micro-batches", min=1, help="Watched calls (after --skip).")] = 3,
    skip: Annotated[int, typer.Option("--skip", min=0, help="Warm-up calls let through unwatched first.")] = 0,
    then: Annotated[
        ThenChoice, typer.Option("--then", help="stop: end the job once the report is made; continue: detach and let it run.")
    ] = ThenChoice.stop,
    fmt: Annotated[FormatChoice, typer.Option("--format", "-f", help="Report format on stdout.")] = FormatChoice.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to FILE instead of stdout.", metavar="FILE")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="SECONDS", help="Interrupt the job after SECONDS; the report covers the calls before.",
                     show_default=False),
    ] = None,
    source: Annotated[
        bool, typer.Option("--source/--no-source", help="Record where retaining tensors were created (anomaly-mode traces).")
    ] = True,
    debug: Annotated[bool, typer.Option("--debug", help="Show the job's traceback when it fails.")] = False,
) -> None:
    """Run a training job and find which earlier step's graph it keeps alive, who holds it, and the bytes.

    Exit codes as for check: 0 clean, 1 a leak, 2 usage error, 3 the step could not be watched or the job failed.
    """
    from leakscope.live.methods import parse_method
    from leakscope.live.session import WatchOptions

    argv = list(args or [])
    if module is not None and script is not None:  # -m MODULE takes the rest as the module's arguments
        argv, script = [script, *argv], None
    try:
        if script is None and module is None:
            raise UsageError("give a script to run (leakscope watch train.py ...) or -m MODULE")
        for text in method or []:
            parse_method(text)
        if timeout is not None and (timeout < 0 or timeout != timeout):
            raise UsageError(f"--timeout {timeout:g} is negative; give seconds > 0, or 0 for no limit")
        options = WatchOptions(
            methods=tuple(method or ()), micro_batches=micro_batches, skip=skip, then=then.value, source=source,
        )
    except UsageError as exc:
        _fail(exc.message, int(exc.exit_code), fmt, output)
    from leakscope.live.job import watch_job

    restore_stdout: list[Callable[[], None]] = []

    def stuck(done: Any) -> None:  # the job ignored --timeout's interrupt: report, then end the process
        import os

        for restore in restore_stdout:
            restore()
        code = _watch_output(done, fmt, output, debug)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    try:
        with _stdout_to_stderr() as restore:  # the job's prints (and its children's) must not corrupt the report
            restore_stdout.append(restore)
            done = watch_job(
                module or script or "", argv, options, as_module=module is not None, timeout=timeout or None,
                on_stuck=stuck,
            )
    except LeakscopeError as exc:
        _fail(exc.message, int(exc.exit_code), fmt, output)
    raise typer.Exit(_watch_output(done, fmt, output, debug))


def _watch_output(done: Any, fmt: FormatChoice, output: Path | None, debug: bool) -> int:
    """Print a watch's errors on stderr and its report; the exit code."""
    from leakscope.policy import exit_code
    from leakscope.render import render

    report = done.report
    if not done.reporting:
        # A torchrun rank other than 0: rank 0 reports (and exits with) the merged verdict. This
        # rank exits with its job's own code, so that a leak it found does not make torchrun stop
        # rank 0 before it has printed the report.
        return int(done.job_exit_code)
    for result in report.results:
        if result.verdict.value == "error" and result.error:
            typer.echo(f"leakscope: {result.target}: {result.error}", err=True)
            if debug and result.traceback:
                typer.echo(result.traceback, err=True)
    if fmt is FormatChoice.text:
        text = render(report, "text", color=output is None and sys.stdout.isatty(), debug=debug)
    else:
        text = render(report, fmt.value, debug=debug)
    _emit(text, output)
    return exit_code(report)


@app.command("render")
def render_report(
    report_file: Annotated[
        Path, typer.Argument(metavar="REPORT", help="A JSON report written by: leakscope check --format json -o REPORT.")
    ],
    fmt: Annotated[FormatChoice, typer.Option("--format", "-f", help="Report format on stdout.")] = FormatChoice.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to FILE instead of stdout.", metavar="FILE")
    ] = None,
    fail_on: Annotated[
        FailOnChoice, typer.Option("--fail-on", help="As check's --fail-on: what the summary counts as failing.")
    ] = FailOnChoice.leak,
) -> None:
    """Render a saved JSON report in any format (html for a page to look at); torch is not needed.

    Exit codes: 0 rendered, 2 the file is missing or not a leakscope JSON report of this schema version.
    """
    from leakscope.render import render
    from leakscope.render.json_report import load

    try:
        try:
            text = report_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {report_file}: {getattr(exc, 'strerror', None) or exc}") from None
        report = load(text, str(report_file))
    except UsageError as exc:
        _fail(exc.message, int(exc.exit_code), fmt, output)
    color = fmt is FormatChoice.text and output is None and sys.stdout.isatty()
    _emit(render(report, fmt.value, color=color, fail_on=fail_on.value), output)


def _explicit_flags(ctx: typer.Context | None) -> dict[str, object]:
    """The options given on the command line (not defaulted): they override the config file."""
    flags: dict[str, object] = {}
    if ctx is None:
        return flags
    for name in ("mode", "model", "factory", "confirm", "micro_batches", "fail_on", "set_values"):
        # Compared by name: typer may vendor click, so its ParameterSource is not importable here.
        source = ctx.get_parameter_source(name)
        if source is not None and source.name != "DEFAULT":
            value = ctx.params[name]
            flags["set" if name == "set_values" else name] = value.value if isinstance(value, enum.Enum) else value
    return flags


def _run(targets: list[str], options: CheckOptions, progress: bool | None = None) -> Report:
    """Run the library check with stdout redirected: engines that print cannot corrupt the report."""
    from leakscope.api import check as run_check
    from leakscope.render import progress as display

    total = len(targets) * len(options.modes)
    enabled = display.wanted(progress)
    with display.display(total, enabled, modes=len(options.modes), timeout=options.timeout) as on_result:
        with contextlib.redirect_stdout(sys.stderr):
            return run_check(targets, options, on_result=on_result)


def main() -> None:
    """Console-script entry point: the command's exit code; usage errors in one line."""
    # click's UsageError, wherever this typer release keeps click (it vendors it in some).
    usage_error: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    code: object = 0
    try:
        code = app(standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `leakscope`: the help
            exc.show()  # type: ignore[attr-defined]
        else:
            # One line, like every other usage error: what was wrong and the valid choices.
            message = exc.format_message().replace("Value error, ", "")  # type: ignore[attr-defined]
            typer.echo(f"leakscope: error: {message}", err=True)
        code = int(ExitCode.USAGE)
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("leakscope: interrupted", err=True)
        code = 130
    finally:
        from leakscope.harness.runtime import prepare_exit

        prepare_exit()  # see NOTE [Exit cost]
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main", "ExitCode"]
