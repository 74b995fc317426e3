"""The library entry point: ``check(targets, options) -> Report``.

The CLI and the pytest plugin gather options, call :func:`check` and render the
:class:`~leakscope.results.Report` it returns. No detection logic lives there.
"""

from __future__ import annotations

import dataclasses
import platform
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from leakscope import __version__
from leakscope.errors import LeakscopeError, TargetError
from leakscope.options import CheckOptions
from leakscope.results import Mode, Report, TargetResult, Verdict


def check(
    targets: Sequence[Any] | str | Any,
    options: CheckOptions | None = None,
    *,
    on_result: Callable[[TargetResult], None] | None = None,
) -> Report:
    """Check each target in each mode and return the report.

    ``targets`` are target strings (``pkg.mod:Engine``, ``path/file.py:Engine``)
    or the objects themselves (an engine class, a factory, a step function).
    Failures of a target become ``error`` results; nothing here raises for a
    bad target. ``options.allowlist`` marks deliberate findings ``allowed``.
    ``on_result`` is called with each result as soon as it is judged (the
    CLI's progress display; the library itself never draws anything).
    With ``options.isolate`` each target runs in its own child process (see
    ``leakscope.isolation``) and this process never imports torch.
    """
    options = options or CheckOptions()
    if isinstance(targets, (str, bytes)) or not isinstance(targets, Sequence):
        targets = [targets]
    if options.isolate:
        from leakscope.isolation import check_isolated

        return check_isolated(targets, options, on_result=on_result)  # the child resolves the device
    import torch

    from leakscope.distributed import gather_report, session
    from leakscope.policy import allow_result

    options = resolve_device(options)
    results: list[TargetResult] = []
    # Under torchrun each rank checks its own step; the report merges the ranks.
    with session():
        for target in targets:
            for result in check_target(target, options):
                result = allow_result(result, options.allowlist)
                results.append(result)
                if on_result is not None:
                    on_result(result)
        return gather_report(Report(
            results=tuple(results),
            leakscope_version=__version__,
            torch_version=str(torch.__version__),
            python_version=platform.python_version(),
        ))


def resolve_device(options: CheckOptions) -> CheckOptions:
    """``device=None`` means CUDA when available, else CPU."""
    import torch

    if options.device is None:
        return dataclasses.replace(options, device="cuda" if torch.cuda.is_available() else "cpu")
    if options.device == "cuda" and not torch.cuda.is_available():
        from leakscope.errors import UsageError

        raise UsageError("--device cuda: no CUDA device is available here; use --device cpu")
    return options


def _name_of(target: Any) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", "?")
    return f"{module}:{getattr(target, '__qualname__', type(target).__name__)}"


def resolve_spec(target: Any, options: CheckOptions) -> Any:
    """Resolve a target (string or object) and the optional factory to an EngineSpec."""
    import sys

    from leakscope.adapters import find_adapter
    from leakscope.protocol import from_target
    from leakscope.target import ResolvedTarget, resolve

    if isinstance(target, str):
        resolved = resolve(target)
    else:
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        if module is None:
            raise TargetError(f"{target!r} has no importable module; pass 'pkg.mod:Name' instead")
        resolved = ResolvedTarget(_name_of(target), target, module, getattr(target, "__qualname__", ""))
    adapter = find_adapter(resolved)
    if adapter is not None and options.factory is None:
        return adapter.spec(resolved)
    factory = resolve(options.factory).obj if options.factory else None
    return from_target(resolved, factory)


def check_target(
    target: Any, options: CheckOptions, on_result: Callable[[TargetResult], None] | None = None
) -> list[TargetResult]:
    """All modes of one target; a target that cannot be resolved errors in every mode.

    ``on_result`` is called with each result as soon as it is known (the
    isolated check streams them to its parent, so a later crash loses nothing).
    """
    from leakscope.distributed import Lockstep, multi_rank, process_group
    from leakscope.guard import torch_state, warning_for
    from leakscope.liveness import gc_paused
    from leakscope.runtime import single_threaded

    name = _name_of(target)
    try:
        spec = resolve_spec(target, options)
    except LeakscopeError as exc:
        errors = [_error(name, mode, exc.message, exc.detail) for mode in options.modes]
        for error in errors:
            if on_result is not None:
                on_result(error)
        return errors
    lockstep = Lockstep(spec) if multi_rank() else None
    results = []
    # NOTE [Forward-only first]: state an engine keeps in module globals or
    # class attributes outlives a mode. A correct forward-only step builds no
    # graph, so running it first leaves nothing for the train mode to build on;
    # the other order would let a train-mode graph be extended by the
    # forward-only step and reported there. Results keep the requested order.
    for mode in sorted(options.modes, key=lambda m: m is not Mode.FORWARD_ONLY):
        started = time.perf_counter()
        changed: list[str] = []
        try:
            with torch_state(changed), process_group(options.device), gc_paused(), single_threaded():
                if lockstep is None:
                    result = _check_mode(spec, mode, options)
                else:  # NOTE [Ranks in lockstep]
                    try:
                        result = _check_mode(lockstep.wrapped(), mode, options)
                    finally:
                        lockstep.drain(mode, options)
        except LeakscopeError as exc:
            result = _error(name, mode, exc.message, exc.detail)
        except Exception as exc:  # a bug in leakscope or a torch surprise: still one line
            result = _error(
                name, mode,
                f"leakscope failed while checking: {type(exc).__name__}: {exc}; please report it with --debug output",
                traceback.format_exc(),
            )
        if changed:  # the engine left torch state changed: restored, but say so
            result = dataclasses.replace(result, warnings=(*result.warnings, warning_for(changed)))
        results.append(_with_seconds(result, time.perf_counter() - started))
        if on_result is not None:
            on_result(results[-1])
    results.sort(key=lambda r: options.modes.index(r.mode))
    return results


def _with_seconds(result: TargetResult, seconds: float) -> TargetResult:
    return dataclasses.replace(result, seconds=round(seconds, 3))


def _error(name: str, mode: Mode, message: str, detail: str | None) -> TargetResult:
    return TargetResult(target=name, mode=mode, verdict=Verdict.ERROR, error=message, traceback=detail)


def _check_mode(spec: Any, mode: Mode, options: CheckOptions) -> TargetResult:
    from leakscope import attribution

    return attribution.judge(spec, mode, options)


__all__ = ["check", "check_target", "resolve_device", "resolve_spec"]
