"""What every command shares: option declarations, the report's way out, the one-line failure."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from leakscope import __version__
from leakscope.atomic import problem, write, write_atomic
from leakscope.errors import ExitCode
from leakscope.render.escape import terminal

if TYPE_CHECKING:
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


class FailOnChoice(str, enum.Enum):
    leak = "leak"
    warning = "warning"


class DeviceChoice(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


Format = Annotated[FormatChoice, typer.Option("--format", "-f", help="Report format on stdout.")]
Output = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="Write the report to FILE instead of stdout.", metavar="FILE"
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


def report_text(
    report: Report,
    fmt: FormatChoice,
    output: Path | None,
    *,
    fail_on: str = "leak",
    debug: bool = False,
) -> str:
    """The report in ``fmt``: text coloured and folded to 120 columns only on a terminal, never
    wrapped in a log, a pipe or a file (a path is copied from there whole)."""
    from leakscope.render import render

    if fmt is FormatChoice.text:
        terminal_out = output is None and sys.stdout.isatty()
        return render(
            report, "text", color=terminal_out, width=120 if terminal_out else None, fail_on=fail_on
        )
    return render(report, fmt.value, debug=debug, fail_on=fail_on)


def print_tracebacks(report: Report) -> None:
    """``--debug``: each result's traceback on stderr, under its target and mode (never in the report)."""
    for result in report.results:
        if result.traceback:
            header = f"--- {result.target} [{result.mode.value}]"
            typer.echo(
                f"{terminal(header)}\n{terminal(result.traceback.rstrip(), newlines=True)}",
                err=True,
            )


#: options whose command-line value beats ``[tool.leakscope]`` (and their config key)
CONFIGURABLE = {
    "mode": "mode",
    "model": "model",
    "factory": "factory",
    "confirm": "confirm",
    "micro_batches": "micro_batches",
    "fail_on": "fail_on",
    "set_values": "set",
}


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


__all__ = [
    "DEFAULT_TARGET",
    "At",
    "Debug",
    "Device",
    "DeviceChoice",
    "FailOnChoice",
    "Format",
    "FormatChoice",
    "MicroBatches",
    "Model",
    "ModeChoice",
    "Output",
    "SetValues",
    "check_output",
    "emit",
    "explicit_flags",
    "fail",
    "print_tracebacks",
    "report_text",
    "write_atomic",
]
