"""What every command shares: option declarations, the report's way out, the one-line failure."""

from __future__ import annotations

import dataclasses
import enum
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TextIO

import typer

from leakscope import __version__, policy
from leakscope import config as project_config
from leakscope.atomic import problem, write, write_atomic
from leakscope.errors import ConfigError, ExitCode, LeakscopeError, UsageError
from leakscope.options import CheckOptions, ModelKind
from leakscope.policy import exit_code
from leakscope.render import render
from leakscope.render.escape import terminal

if TYPE_CHECKING:
    from leakscope.config import Settings
    from leakscope.results import Report

DEFAULT_TARGET = "leakscope.models.engines:FSDPEngine"


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


class DeviceChoice(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class ColorChoice(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


# NOTE [Options declared once]: every option two commands share is declared here, once, with one
# help text; a command lists only the options it accepts, so its --help offers nothing it refuses.
# Their values are resolved in one place, :func:`resolve`: the command line's explicit flags, then
# [tool.leakscope], then the command's defaults.

Format = Annotated[FormatChoice, typer.Option("--format", "-f", help="Report format on stdout.")]
Method = Annotated[
    list[str] | None,
    typer.Option(
        "--method",
        metavar="pkg.mod:Class.method",
        help="The step to watch (repeatable). Default: the built-in frameworks' step methods (verl's "
        "forward_step, transformers' Trainer.training_step, Lightning's training_step) when the job "
        "imports them, else the steps found from autograd (backward calls, outermost module calls).",
        show_default=False,
    ),
]
Output = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="Write the report to FILE instead of stdout.", metavar="FILE"
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Print no report on stdout (--output still writes it); one summary line on stderr.",
    ),
]
Config = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="Read the tool.leakscope table of FILE instead of ./pyproject.toml; flags override it.",
    ),
]
Color = Annotated[
    ColorChoice,
    typer.Option(
        "--color",
        help="Colour the text report: auto (on a terminal, unless NO_COLOR is set), always, never.",
    ),
]
MicroBatches = Annotated[
    int,
    typer.Option(
        "--micro-batches",
        min=1,
        help="Run N micro-batches the way forward_backward_batch does and report growth (1 disables).",
    ),
]
Device = Annotated[
    DeviceChoice,
    typer.Option("--device", help="Where the tiny model runs; auto picks cuda when available."),
]
SetValues = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="An adapter setting, e.g. --set calculate_entropy=true for verl (repeatable; see docs/adapters.md).",
        show_default=False,
    ),
]
At = Annotated[
    str | None,
    typer.Option(
        "--at",
        metavar="SCALE",
        help="Project leaks to real scale: hidden=4096,tokens=17700,dtype=bf16,micro-batches=16,gpu-memory=80GiB.",
    ),
]
Model = Annotated[
    str,
    typer.Option(
        "--model",
        help="Tiny model: peft-checkpoint, reentrant-checkpoint, full-finetune, hf-lora (needs transformers and peft).",
    ),
]
Debug = Annotated[
    bool, typer.Option("--debug", help="Show tracebacks of engine and import errors.")
]
Mode = Annotated[ModeChoice, typer.Option("--mode", help="Which step to drive.")]
Factory = Annotated[
    str | None,
    typer.Option(
        "--factory",
        help="'pkg.mod:make_engine': builds the engine from the tiny model.",
        metavar="TARGET",
    ),
]
Confirm = Annotated[
    bool,
    typer.Option(
        "--confirm/--no-confirm",
        help="Re-run the step to prove each holder retains on its own.",
    ),
]
FailOn = Annotated[
    policy.FailOn | None,
    typer.Option(
        "--fail-on",
        help="Exit 1 on a leak (default), or also on a warning such as until-gc.",
        show_default=False,
    ),
]
Timeout = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="Kill a target's check after SECONDS (isolated only; 0: no limit). Default: 600.",
        show_default=False,
    ),
]
Jobs = Annotated[
    int,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        metavar="N",
        help="Check N targets at once, each in its own process; the report keeps their order.",
    ),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"leakscope {__version__}")
        raise typer.Exit(0)


Version = Annotated[
    bool,
    typer.Option(
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        expose_value=True,
        help="Print the version and exit.",
    ),
]


def check_output(output: Path | None, fmt: FormatChoice, flag: str = "--output FILE") -> None:
    """``-o FILE`` (or ``flag``) is writable, checked before anything runs: one line and exit 2 otherwise.

    A regular file (or a new one) is written to a temporary file in FILE's directory and
    renamed over FILE, so the directory must exist and take a new file; a FIFO, a character
    device or ``/dev/stdout`` is written through; a directory, socket or block device is
    refused (NOTE [One writer, by what the path is] in ``leakscope/atomic.py``).
    """
    if output is None:
        return
    why = problem(output, flag)
    if why is not None:
        fail(
            f"cannot write {_what(flag)} to {terminal(output)}: {why}",
            int(ExitCode.USAGE),
            fmt,
            None,
        )


def _what(flag: str) -> str:
    return {"--dot": "the graph", "--emit-test": "the test"}.get(flag.split()[0], "the report")


def emit(text: str, output: Path | None, flag: str = "--output FILE") -> None:
    """The report on stdout, or in ``output``, whole or not at all.

    NOTE [Reports are never lost]: a file report goes through the one writer
    (:func:`leakscope.atomic.write`): a regular file is written to a temporary file beside
    ``output`` and renamed over it, so a reader never sees a half-written file and a
    failed run never truncates the previous report; a symbolic link at ``output`` is
    replaced, not followed; a FIFO, a character device or ``/dev/stdout`` is written
    through, never replaced. A character no encoder accepts (a lone surrogate in an
    engine's message) is written as its escape (``\\udcff``) instead of failing the run:
    the report is still written, and the exit code is still the verdict's.
    """
    if output is None:
        stream = sys.stdout
        encoding = getattr(stream, "encoding", None) or "utf-8"
        stream.write(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
        stream.flush()
        return
    try:
        write(output, text.encode("utf-8", "backslashreplace"))
    except OSError as exc:  # the disk filled up, or the directory went away since check_output
        typer.echo(
            f"leakscope: error: cannot write {_what(flag)} to {terminal(output)}: {exc.strerror or exc}",
            err=True,
        )
        raise typer.Exit(int(ExitCode.USAGE)) from None


def fail(message: str, code: int, fmt: FormatChoice, output: Path | None) -> NoReturn:
    """One line on stderr; a valid JSON document on stdout (or in ``output``) when JSON was asked for."""
    typer.echo(f"leakscope: error: {terminal(message)}", err=True)
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
        emit(json.dumps(doc, indent=2) + "\n", output)
    raise typer.Exit(code)


def use_color(choice: ColorChoice, stream: TextIO | None = None) -> bool:
    """``--color``: ``always``/``never`` as said; ``auto`` on a terminal unless ``NO_COLOR`` is set
    (https://no-color.org: any non-empty value), or when ``FORCE_COLOR`` is."""
    if choice is ColorChoice.always:
        return True
    if choice is ColorChoice.never or os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("FORCE_COLOR", ""):
        return True
    return (stream or sys.stdout).isatty()


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The terminal's columns when ``stream`` (stdout) is one, else None: a log, a pipe or a file is
    never wrapped, so a path is copied from there whole. ``COLUMNS`` wins, as everywhere."""

    if not (stream or sys.stdout).isatty():
        return None
    return max(shutil.get_terminal_size((120, 24)).columns, 40)


def report_text(
    report: Report,
    fmt: FormatChoice,
    output: Path | None,
    *,
    fail_on: policy.FailOn = policy.FailOn.LEAK,
    debug: bool = False,
    color: ColorChoice = ColorChoice.auto,
) -> str:
    """The report in ``fmt``: text coloured (:func:`use_color`) and wrapped to the terminal's width only
    when it goes to a terminal (:func:`terminal_width`), never wrapped in a log, a pipe or a file."""

    if fmt is FormatChoice.text:
        on_terminal = output is None and sys.stdout.isatty()
        colored = use_color(color) if output is None else color is ColorChoice.always
        return render(
            report,
            "text",
            color=colored,
            width=terminal_width() if on_terminal else None,
            fail_on=fail_on,
        )
    return render(report, fmt.value, debug=debug, fail_on=fail_on)


def summarize(report: Report, fail_on: policy.FailOn, output: Path | None) -> None:
    """When the report went to ``-o FILE`` or nowhere (``-q``): each error and the summary line on
    stderr, so no run ends in silence (``leakscope: 0 leak, 0 clean, 1 error (exit 3); report in FILE``)."""
    from leakscope.render.summary import report_line

    for result in report.results:
        if result.error:
            typer.echo(f"leakscope: {terminal(result.target)}: {terminal(result.error)}", err=True)
    where = f"; report in {terminal(output)}" if output is not None else ""
    typer.echo(f"{report_line(report, exit_code(report, fail_on), fail_on)}{where}", err=True)


def print_tracebacks(report: Report) -> None:
    """``--debug``: each result's traceback on stderr, under its target and mode (never in the report)."""
    for result in report.results:
        if result.traceback:
            header = f"--- {result.target} [{result.mode.value}]"
            typer.echo(
                f"{terminal(header)}\n{terminal(result.traceback.rstrip(), newlines=True)}",
                err=True,
            )


#: each option a [tool.leakscope] key can set: its parameter name in a command -> the key
CONFIGURABLE = {
    "mode": "mode",
    "model": "model",
    "factory": "factory",
    "confirm": "confirm",
    "micro_batches": "micro_batches",
    "fail_on": "fail_on",
    "set_values": "set",
    "timeout": "timeout",
    "jobs": "jobs",
    "fmt": "format",
}
#: seconds one target's isolated check may take (tiny models: a real check takes seconds)
DEFAULT_TIMEOUT = 600.0


def explicit_flags(ctx: typer.Context | None) -> dict[str, object]:
    """The options given on the command line (not defaulted): they override the config file."""
    flags: dict[str, object] = {}
    if ctx is None:
        return flags
    for name, key in CONFIGURABLE.items():
        if name not in ctx.params:
            continue
        # Compared by name: typer may vendor click, so its ParameterSource is not importable here.
        source = ctx.get_parameter_source(name)
        if source is not None and source.name != "DEFAULT":
            value = ctx.params[name]
            flags[key] = value.value if isinstance(value, enum.Enum) else value
    return flags


def _choices(ctx: typer.Context, name: str) -> tuple[str, ...]:
    """The values the command's option ``name`` takes: its enum's (empty: it has no such option)."""
    value = ctx.params.get(name)
    if isinstance(value, enum.Enum):
        return tuple(str(member.value) for member in type(value))
    return ()


@dataclasses.dataclass(frozen=True)
class Run:
    """One command's settings, resolved once (:func:`resolve`): what every command passes on."""

    #: the targets: the command line's, else [tool.leakscope]'s, else the built-in engine
    targets: tuple[str, ...]
    #: the library's options
    options: CheckOptions
    #: what fails the run (``leak`` or ``warning``)
    fail_on: policy.FailOn
    fmt: FormatChoice
    output: Path | None
    quiet: bool
    color: ColorChoice
    debug: bool
    #: the project settings the options came from (explain reads its targets)
    settings: Settings


def resolve(
    ctx: typer.Context,
    *,
    targets: list[str] | None = None,
    every_setting: bool = True,
    fixed: dict[str, object] | None = None,
) -> Run:
    """The one settings path: the command line's explicit flags over ``[tool.leakscope]`` (or
    ``--config FILE``) over the command's defaults, validated once; a bad value fails in one line
    (exit 2), and ``-o FILE`` is checked before anything runs. ``fixed``: settings the command
    sets itself (``estimate``'s growth run), over both; ``targets``: the command's own TARGET
    arguments when it does not call them ``targets``."""
    from leakscope.harness.distributed import launcher_env
    from leakscope.harness.target import split_target

    params = ctx.params
    fmt = FormatChoice(_plain(params.get("fmt", "text")))
    output: Path | None = params.get("output")
    check_output(
        output, fmt
    )  # before anything runs: a report that cannot be written is not run for
    try:
        flags = {**explicit_flags(ctx), **(fixed or {})}
        settings = project_config.discover(params.get("config")).override(
            project_config.parse(flags, "the command line")
        )
    except ConfigError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    # A project's value this command does not take (explain's one mode, fix's two formats) leaves
    # the command's own default.
    if settings.mode is not None and settings.mode not in _choices(ctx, "mode"):
        settings = dataclasses.replace(settings, mode=None)
    if settings.format is not None and settings.format not in _choices(ctx, "fmt"):
        settings = dataclasses.replace(settings, format=None)
    if settings.format is not None:
        fmt = FormatChoice(settings.format)
    torchrun = launcher_env() is not None
    # Under torchrun the ranks must be the processes torchrun started: check in them.
    isolate = bool(params.get("isolate", True)) and not torchrun
    device = params.get("device", DeviceChoice.auto)
    try:
        chosen = tuple(targets or params.get("targets") or settings.targets or [DEFAULT_TARGET])
        for target in (*chosen, *([settings.factory] if settings.factory else [])):
            split_target(target)
        if settings.timeout is not None and not isolate and not torchrun:
            raise UsageError("--timeout needs a child process to kill; drop --no-isolate")
        limit = DEFAULT_TIMEOUT if settings.timeout is None else (settings.timeout or None)
        scale = None
        if params.get("at") is not None:
            from leakscope.diagnose.projection import parse_at

            scale = parse_at(params["at"])
        mode = _plain(params.get("mode", "both"))
        base = CheckOptions(
            modes=project_config.modes_of(mode),
            model=params.get("model", "peft-checkpoint"),
            factory=params.get("factory"),
            confirm=params.get("confirm", True),
            micro_batches=params.get("micro_batches", 3),
            device=None if device is DeviceChoice.auto else _plain(device),
            at=scale,
            isolate=isolate,
            timeout=limit if isolate else None,
            jobs=1 if torchrun else (settings.jobs or params.get("jobs", 1)),
            every_setting=every_setting,
        )
        options = settings.check_options(base)
        if options.model is ModelKind.HF_LORA:
            _require_hf()
    except LeakscopeError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    return Run(
        targets=chosen,
        options=options,
        fail_on=settings.effective_fail_on,
        fmt=fmt,
        output=output,
        quiet=bool(params.get("quiet", False)),
        color=params.get("color", ColorChoice.auto),
        debug=bool(params.get("debug", False)),
        settings=settings,
    )


def _plain(value: object) -> str:
    return str(value.value if isinstance(value, enum.Enum) else value)


def _require_hf() -> None:
    """``--model hf-lora`` without transformers/peft is a usage error (checked without importing them)."""
    from leakscope.models.names import HF_EXTRA_HINT, missing_hf

    missing = missing_hf()
    if missing:
        raise UsageError(
            f"--model hf-lora needs {' and '.join(missing)}, which is not installed; {HF_EXTRA_HINT}"
        )


__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT",
    "At",
    "Color",
    "ColorChoice",
    "Config",
    "Confirm",
    "Debug",
    "Device",
    "DeviceChoice",
    "Factory",
    "FailOn",
    "Format",
    "FormatChoice",
    "Jobs",
    "Method",
    "MicroBatches",
    "Mode",
    "ModeChoice",
    "Model",
    "Output",
    "Quiet",
    "Run",
    "SetValues",
    "Timeout",
    "Version",
    "check_output",
    "emit",
    "explicit_flags",
    "fail",
    "print_tracebacks",
    "report_text",
    "resolve",
    "summarize",
    "terminal_width",
    "use_color",
    "write_atomic",
]
