"""One exception hierarchy; every user-facing failure carries its exit code.

The CLI maps :attr:`LeakscopeError.exit_code` to the process exit status in one
place (``leakscope.cli``). Messages are one line: what happened, where, and how
to fix it.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit codes, documented in README.md and docs/cli.md."""

    CLEAN = 0
    LEAK = 1
    USAGE = 2
    ERROR = 3


class LeakscopeError(Exception):
    """Base class: a failure with a one-line message and an exit code."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: optional traceback text, shown only with ``--debug``
        self.detail = detail

    def __str__(self) -> str:
        return self.message


class UsageError(LeakscopeError):
    """Bad command line or option values (exit 2)."""

    exit_code = ExitCode.USAGE


class ConfigError(UsageError):
    """A bad ``[tool.leakscope]`` table (exit 2)."""


class TargetError(LeakscopeError):
    """A target that cannot be resolved or built (exit 3)."""


class EngineError(LeakscopeError):
    """The engine ran but its step could not be judged (exit 3)."""
