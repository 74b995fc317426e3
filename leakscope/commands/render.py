"""``leakscope render``: a saved JSON report in any format, without torch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leakscope.commands.common import (
    Color,
    ColorChoice,
    Format,
    FormatChoice,
    Output,
    Version,
    check_output,
    emit,
    fail,
    report_text,
)
from leakscope.errors import UsageError
from leakscope.policy import FailOn


def render_report(
    report_file: Annotated[
        Path,
        typer.Argument(
            metavar="REPORT",
            help="A JSON report written by: leakscope check --format json -o REPORT.",
        ),
    ],
    fmt: Format = FormatChoice.text,
    output: Output = None,
    fail_on: Annotated[
        FailOn,
        typer.Option("--fail-on", help="As check's --fail-on: what the summary counts as failing."),
    ] = FailOn.LEAK,
    color: Color = ColorChoice.auto,
    version: Version = False,
) -> None:
    """Render a saved JSON report in any format (html for a page to look at); torch is not needed.

    Exit codes: 0 rendered, 2 the file is missing or not a leakscope JSON report of this schema version.
    A report is data: every field is checked, nothing it names is imported or read (docs/security.md).
    """
    from leakscope.render.json_report import MAX_REPORT_CHARS, load

    check_output(output, fmt)
    try:
        try:
            # Bounded: /dev/zero or a multi-gigabyte file is refused, not read to the end.
            with report_file.open(encoding="utf-8") as f:
                text = f.read(MAX_REPORT_CHARS + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(
                f"cannot read {report_file}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        report = load(text, str(report_file))
    except UsageError as exc:
        fail(exc.message, int(exc.exit_code), fmt, output)
    emit(report_text(report, fmt, output, fail_on=fail_on, color=color), output)


__all__ = ["render_report"]
