"""``leakscope estimate``: what a leak costs at the user's scale (docs/estimate.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from leakscope.commands import check
from leakscope.commands.common import (
    Debug,
    DeviceChoice,
    Format,
    FormatChoice,
    Mode,
    ModeChoice,
    Model,
    SetValues,
    explicit_flags,
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
    model: Model = "peft-checkpoint",
    set_values: SetValues = None,
    debug: Debug = False,
) -> None:
    """Project what a leak costs at your scale: bytes per micro-batch, per update, and when memory runs out.

    Same exit codes as check. The model behind the projection is in docs/estimate.md.
    """
    # The flags given to estimate beat [tool.leakscope] as they do for check; its growth run is
    # its own: the config's micro-batches must not replace it.
    flags = {**explicit_flags(ctx), "micro_batches": MICRO_BATCHES}
    check.run(
        flags,
        targets=[target],
        mode=mode,
        fmt=fmt,
        output=None,
        factory=None,
        model=model,
        confirm=True,
        micro_batches=MICRO_BATCHES,
        device=DeviceChoice.auto,
        at=at,
        debug=debug,
        every_setting=False,
    )


__all__ = ["MICRO_BATCHES", "estimate"]
