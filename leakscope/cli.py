"""The ``leakscope`` application: one sub-command per module of :mod:`leakscope.commands`.

No detection logic here. torch is imported only when a command runs a check, so
``leakscope --help`` and ``--version`` stay fast.
"""

from __future__ import annotations

import sys

import typer

from leakscope import interrupts
from leakscope.commands import check, estimate, explain, fix, render, watch
from leakscope.commands.common import Version
from leakscope.errors import ExitCode

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
app.command("check")(check.check)
app.command("estimate")(estimate.estimate)
app.command("explain")(explain.explain)
app.command("fix", context_settings={"ignore_unknown_options": True})(
    fix.fix
)  # a script's own options (leakscope fix train.py --lr 1e-4) pass through to it
app.command(
    "watch", context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True}
)(watch.watch)
app.command("render")(render.render_report)


@app.callback()
def _root(version: Version = False) -> None:
    """leakscope: catch forward_step outputs that keep autograd graphs alive, before they OOM."""


def main() -> None:
    """Console-script entry point: the command's exit code; usage errors in one line."""
    # click's UsageError, wherever this typer release keeps click (it vendors it in some).
    usage_error: type[Exception] = next(
        c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
    )
    previous: dict[int, object] = {}
    code: object = 0
    try:
        previous = interrupts.install()  # NOTE [Interrupts at any moment]: exit 130, 143
        try:
            code = app(standalone_mode=False)
            if interrupts.received():  # typer returns 130 for a KeyboardInterrupt: which signal?
                raise interrupts.Interrupted
        except typer.Exit as exc:
            if interrupts.received():
                raise interrupts.Interrupted from exc
            code = exc.exit_code
        except usage_error as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `leakscope`: the help
                exc.show()  # type: ignore[attr-defined]
            else:
                # One line, like every other usage error: what was wrong and the valid choices.
                message = exc.format_message().replace("Value error, ", "")  # type: ignore[attr-defined]
                typer.echo(f"leakscope: error: {message}", err=True)
            code = int(ExitCode.USAGE)
    except (KeyboardInterrupt, typer.Abort):  # also one raised in a handler above
        interrupts.ending()
        typer.echo("leakscope: interrupted", err=True)
        code = interrupts.exit_code()
        interrupts.exit_within(code)  # the interpreter's shutdown cannot hold the exit up
    finally:
        interrupts.ending()  # exiting now: a later signal is remembered, not raised
        from leakscope.harness.runtime import prepare_exit

        prepare_exit()  # see NOTE [Exit cost]
        interrupts.restore(previous)
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["ExitCode", "app", "main"]
