"""``leakscope estimate``: what a leak costs at the user's scale (docs/estimate.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from leakscope.commands import check
from leakscope.commands.common import (
    Color,
    ColorChoice,
    Config,
    Debug,
    Factory,
    Format,
    FormatChoice,
    MicroBatches,
    Mode,
    ModeChoice,
    Model,
    Output,
    Quiet,
    SetValues,
    Version,
    resolve,
)

#: micro-batches of estimate's growth run: enough to tell a growing leak from a bounded one
MICRO_BATCHES = 3


def estimate(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET", help="The engine: 'pkg.module:Name' or 'path/to/file.py:Name'."
        ),
    ],
    at: Annotated[
        str,
        typer.Option(
            "--at",
            metavar="SCALE",
            help="hidden=4096,tokens=17700,dtype=bf16,micro-batches=16,gpu-memory=80GiB (hidden and tokens required).",
        ),
    ],
    mode: Mode = ModeChoice.train,
    fmt: Format = FormatChoice.text,
    output: Output = None,
    quiet: Quiet = False,
    factory: Factory = None,
    model: Model = "peft-checkpoint",
    micro_batches: MicroBatches = MICRO_BATCHES,
    config: Config = None,
    set_values: SetValues = None,
    debug: Debug = False,
    color: Color = ColorChoice.auto,
    version: Version = False,
) -> None:
    """Project what a leak costs at your scale: bytes per micro-batch, per update, and when memory runs out.

    Same exit codes as check. The model behind the projection is in docs/estimate.md.
    """
    # The flags given to estimate beat [tool.leakscope] as they do for check; its growth run is
    # its own (--micro-batches, else 3): the config's micro-batches, set for check, do not replace it.
    check.run(
        resolve(ctx, targets=[target], every_setting=False, fixed={"micro_batches": micro_batches})
    )


__all__ = ["MICRO_BATCHES", "estimate"]
