"""Run a script or module as ``__main__`` in this process, as ``python`` and ``python -m`` would.

The job's own failure is returned as data (never raised), so the report is
written whatever the job did: returned, raised, called ``sys.exit`` or was
interrupted.
"""

from __future__ import annotations

import dataclasses
import os
import runpy
import sys
import traceback
import types
from collections.abc import Sequence

from leakscope import phase
from leakscope.errors import UsageError
from leakscope.live.observer import WatchStop


@dataclasses.dataclass
class Outcome:
    """How the job ended."""

    #: the job's ``__main__`` module (its globals), for the look at the end
    module: types.ModuleType | None = None
    #: one line when it raised, exited non-zero or was interrupted
    error: str | None = None
    traceback: str | None = None
    exit_code: int = 0
    interrupted: bool = False
    stopped: bool = False
    #: the frames of the job's traceback when it raised: the loop's locals, for the look at the end
    frames: list[types.FrameType] = dataclasses.field(default_factory=list)


def run(
    target: str, argv: Sequence[str], *, as_module: bool, source: bytes | None = None
) -> Outcome:
    """Run ``target`` (a script path, or a module name with ``as_module``) with ``sys.argv`` = ``[target, *argv]``.
    ``source``: the script's text to run instead of the file's (``leakscope fix`` proving an edit of it)."""
    phase.report("importing the job")
    saved_path = list(sys.path)
    if as_module:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as python -m: the working directory first
        try:
            mod_name, spec, code = runpy._get_module_details(target)  # type: ignore[attr-defined]
        except ImportError as exc:
            sys.path[:] = saved_path
            raise UsageError(
                f"cannot run module {target!r}: {exc}; check the name, or run its file instead"
            ) from None
        except Exception as exc:
            sys.path[:] = saved_path
            raise UsageError(f"cannot run module {target!r}: {type(exc).__name__}: {exc}") from None
        file = spec.origin
        path0 = os.getcwd()
    else:
        require_script(target)
        if source is None:
            with open(target, "rb") as f:
                source = f.read()
        try:
            code = compile(source, target, "exec")
        except SyntaxError as exc:
            raise UsageError(f"{target}:{exc.lineno}: syntax error: {exc.msg}") from None
        file = os.path.abspath(target)
        spec = None
        path0 = os.path.dirname(file)
    module = types.ModuleType("__main__")
    module.__dict__.update(
        {"__file__": file, "__builtins__": __builtins__, "__spec__": spec, "__loader__": None}
    )
    if spec is not None:
        module.__dict__["__loader__"] = spec.loader
        module.__dict__["__package__"] = spec.parent
    saved_main, saved_argv = sys.modules.get("__main__"), sys.argv
    sys.modules["__main__"] = module
    sys.argv = [file if not as_module else (file or target), *argv]
    sys.path.insert(0, path0)
    outcome = Outcome(module=module)
    phase.report("running the job before its first watched call")
    try:
        exec(code, module.__dict__)
    except WatchStop:
        outcome.stopped = True
    except SystemExit as exc:
        code_value = exc.code
        if code_value not in (None, 0):
            outcome.exit_code = code_value if isinstance(code_value, int) else 1
            outcome.error = f"the job exited with sys.exit({code_value!r})"
            outcome.traceback = traceback.format_exc()
        _keep_frames(outcome, exc)
        del exc
    except KeyboardInterrupt as exc:
        outcome.interrupted = True
        outcome.exit_code = 130
        outcome.error = "the job was interrupted (KeyboardInterrupt)"
        outcome.traceback = traceback.format_exc()
        _keep_frames(outcome, exc)
        del exc
    except BaseException as exc:
        from leakscope.harness.source import user_frame

        where = user_frame(exc.__traceback__)
        outcome.exit_code = 1
        outcome.error = f"the job raised {type(exc).__name__}: {exc}" + (
            f" at {where}" if where else ""
        )
        outcome.traceback = traceback.format_exc()
        _keep_frames(outcome, exc)
        del exc
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
    return outcome


def require_script(target: str) -> None:
    """Raise the usage error for a script path that is not a file."""
    if not os.path.isfile(target):
        raise UsageError(f"no such script: {target}; give the path of the training script to run")


def _keep_frames(outcome: Outcome, exc: BaseException) -> None:
    """The frames the job was in when it raised, exited or was interrupted (innermost first): the
    loop's locals are still alive there, and the look at the end searches them."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # below this frame
    while tb is not None:
        outcome.frames.insert(0, tb.tb_frame)
        tb = tb.tb_next


__all__ = ["Outcome", "require_script", "run"]
