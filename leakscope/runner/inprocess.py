"""Check targets in this process: each mode of each target, judged and guarded.

:func:`leakscope.api.check` calls this directly with ``isolate=False``; the
isolated check's child process (:mod:`leakscope.runner.worker`) calls it for
its one target.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from leakscope.adapters.registry import resolve_specs, target_name
from leakscope.diagnose.judge import judge
from leakscope.errors import LeakscopeError
from leakscope.harness.distributed import Lockstep, multi_rank, process_group
from leakscope.harness.guard import torch_state, warning_for
from leakscope.harness.runtime import single_threaded
from leakscope.options import CheckOptions
from leakscope.phase import report
from leakscope.probe.liveness import gc_paused
from leakscope.probe.safe import subclass_failure
from leakscope.results import Mode, TargetResult, Verdict

if TYPE_CHECKING:
    from leakscope.harness.protocol import EngineSpec


def check_target(
    target: object, options: CheckOptions, on_result: Callable[[TargetResult], None] | None = None
) -> list[TargetResult]:
    """All modes of one target; a target that cannot be resolved errors in every mode.

    ``on_result`` is called with each result as soon as it is known (the
    isolated check streams them to its parent, so a later crash loses nothing).
    """
    name = target_name(target)
    report("importing the target", target=name)
    try:
        specs = resolve_specs(target, options)
    except LeakscopeError as exc:
        errors = [_error(name, mode, exc.message, exc.detail) for mode in options.modes]
        for error in errors:
            if on_result is not None:
                on_result(error)
        return errors
    results = []
    for spec in specs:  # one per adapter setting checked (Adapter.variants); usually one
        results.extend(_check_spec(spec, options, on_result))
    results.sort(key=lambda r: options.modes.index(r.mode))  # stable: settings keep their order
    return results


def _check_spec(
    spec: EngineSpec, options: CheckOptions, on_result: Callable[[TargetResult], None] | None
) -> list[TargetResult]:
    """Every mode of one spec."""
    name = spec.name
    results: list[TargetResult] = []
    lockstep = Lockstep(spec) if multi_rank() else None
    # NOTE [Forward-only first]: state an engine keeps in module globals or
    # class attributes outlives a mode. A correct forward-only step builds no
    # graph, so running it first leaves nothing for the train mode to build on;
    # the other order would let a train-mode graph be extended by the
    # forward-only step and reported there. Results keep the requested order.
    for mode in sorted(options.modes, key=lambda m: m is not Mode.FORWARD_ONLY):
        started = time.perf_counter()
        report(mode=mode.value)
        changed: list[str] = []
        try:
            with (
                torch_state(changed),
                process_group(options.device),
                gc_paused(),
                single_threaded(),
            ):
                if lockstep is None:
                    result = _check_mode(spec, mode, options)
                else:  # NOTE [Ranks in lockstep]
                    try:
                        result = _check_mode(lockstep.wrapped(), mode, options)
                    finally:
                        lockstep.drain(mode, options)
        except LeakscopeError as exc:
            result = _error(name, mode, exc.message, exc.detail)
        except (
            Exception
        ) as exc:  # a bug in leakscope, a torch surprise, a tensor subclass's code: one line
            result = _error(name, mode, unexpected(exc), traceback.format_exc())
        if spec.settings:
            result = dataclasses.replace(result, settings=spec.settings)
        if changed:  # the engine left torch state changed: restored, but say so
            result = dataclasses.replace(result, warnings=(*result.warnings, warning_for(changed)))
        results.append(_with_seconds(result, time.perf_counter() - started))
        if on_result is not None:
            on_result(results[-1])
    return results


def unexpected(exc: Exception) -> str:
    """The one line for an exception no stage turned into a :class:`LeakscopeError`.

    Raised inside a tensor subclass's own code (its ``__torch_function__``, a property): that
    subclass and where the engine keeps it (``engine.x is a MyTensor whose __torch_function__
    raised ValueError: ...``), the engine's to fix. Anything else is leakscope's: please report it.
    """
    text = str(exc).strip().splitlines()
    what = f"{type(exc).__name__}: {text[0] if text else '(no message)'}"
    failure = subclass_failure(exc)
    if failure is None:
        return f"leakscope failed while checking: {what}; please report it with --debug output"
    subclass, method, path = failure
    return (
        f"{path or 'a tensor the engine keeps'} is a {subclass} whose {method} raised {what}; leakscope reads "
        f"tensors without calling it where it can; make {subclass}.{method} work outside the engine's step, "
        "or keep a plain tensor there"
    )


def _with_seconds(result: TargetResult, seconds: float) -> TargetResult:
    return dataclasses.replace(result, seconds=round(seconds, 3))


def _error(name: str, mode: Mode, message: str, detail: str | None) -> TargetResult:
    return TargetResult(
        target=name, mode=mode, verdict=Verdict.ERROR, error=message, traceback=detail
    )


def _check_mode(spec: EngineSpec, mode: Mode, options: CheckOptions) -> TargetResult:
    from leakscope.models.batch_keys import keys_read, reset_reads

    reset_reads()
    result = judge(spec, mode, options)
    if spec.make_micro_batch is None:  # leakscope's own micro-batch: say which keys the engine read
        result = dataclasses.replace(result, keys_read=keys_read())
    return result


__all__ = ["check_target", "unexpected"]
