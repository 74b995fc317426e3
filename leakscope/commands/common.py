"""What every command shares: option declarations, the report's way out, the one-line failure."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from leakscope import __version__

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
    Path | None, typer.Option("--output", "-o", help="Write the report to FILE instead of stdout.", metavar="FILE")
]
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
Model = Annotated[
    str,
    typer.Option(
        "--model",
        help="Tiny model: peft-checkpoint, reentrant-checkpoint, full-finetune, hf-lora (needs transformers and peft).",
    ),
]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks of engine and import errors.")]


def emit(text: str, output: Path | None) -> None:
    """The report on stdout, or in ``output``."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        output.write_text(text, encoding="utf-8")


def fail(message: str, code: int, fmt: FormatChoice, output: Path | None) -> NoReturn:
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
        emit(json.dumps(doc, indent=2) + "\n", output)
    raise typer.Exit(code)


#: options whose command-line value beats ``[tool.leakscope]`` (and their config key)
CONFIGURABLE = {
    "mode": "mode", "model": "model", "factory": "factory", "confirm": "confirm",
    "micro_batches": "micro_batches", "fail_on": "fail_on", "set_values": "set",
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
    "DEFAULT_TARGET", "At", "Debug", "Device", "DeviceChoice", "FailOnChoice", "Format", "FormatChoice",
    "MicroBatches", "Model", "ModeChoice", "Output", "SetValues", "emit", "explicit_flags", "fail",
]
