"""Run an engine's step as its real caller would: build the subject, make micro-batches, step, validate.

Running only; what the caller keeps afterwards and who holds its graph is
:mod:`leakscope.harness.trial` and :mod:`leakscope.harness.observe`.
"""

from __future__ import annotations

import contextlib
import math
import traceback
from typing import Any

from leakscope.errors import EngineError, LeakscopeError
from leakscope.harness.protocol import EngineSpec, build_engine, describe_exception
from leakscope.harness.rng import seeded
from leakscope.options import CheckOptions
from leakscope.probe import safe
from leakscope.results import Mode


def _validate(result: Any, mode: Mode) -> tuple[Any, Any]:
    # Read as the walk reads (NOTE [Reads that run no user code] in leakscope/probe/safe.py):
    # the pair by its builtin type's own iteration, the loss by torch's getters.
    pair = (
        list(tuple.__iter__(result))
        if safe.is_instance(result, tuple)
        else (list(list.__iter__(result)) if safe.is_instance(result, list) else None)
    )
    if pair is None or len(pair) != 2:
        shape = f"a {safe.type_name(type(result))}" + (
            f" of length {len(pair)}" if pair is not None else ""
        )
        raise EngineError(
            f"forward_step returned {shape}; expected a (loss, output) pair: end it with `return loss, output`"
        )
    loss, output = pair
    if mode is Mode.TRAIN:
        if not safe.is_tensor(loss):
            raise EngineError(
                f"forward_step returned a loss of type {safe.type_name(type(loss))}; expected a scalar tensor "
                "that backward() can run on"
            )
        dims = safe.shape(loss)
        if math.prod(dims) != 1:
            raise EngineError(
                f"forward_step returned a loss of shape {dims}; expected a scalar: reduce it (e.g. .mean())"
            )
        if safe.grad_fn(loss) is None:
            raise EngineError(
                "the loss has no grad_fn in train mode: nothing would train; "
                "do not detach the loss or compute it under torch.no_grad()"
            )
    return loss, output


def make_micro_batch(spec: EngineSpec, options: CheckOptions, index: int) -> object:
    """The ``index``-th micro-batch: the adapter's format when it has one, else leakscope's."""
    from leakscope.models.tiny import build_micro_batch

    if spec.make_micro_batch is not None:
        return spec.make_micro_batch(options.size, index)
    return build_micro_batch(
        options.size, index, options.device or "cpu", keys=options.micro_batch_keys
    )


def build_subject(spec: EngineSpec, options: CheckOptions) -> tuple[Any, Any]:
    """A fresh tiny model and the engine built around it."""
    from leakscope.models.tiny import build_model

    model = build_model(spec.model_kind or options.model, options.size, options.device or "cpu")
    return model, build_engine(spec, model)


def step_once(
    spec: EngineSpec,
    engine: object,
    micro_batch: object,
    mode: Mode,
    *,
    anomaly: bool = False,
    seed: int = 0,
) -> tuple[Any, Any]:
    """Call the step as its real caller does (and backward in train mode); validate what it returns.

    With ``spec.runs_backward`` the framework runs backward inside the step: the
    result is ``(None, what the step returned)`` and leakscope calls no backward.
    """
    import torch

    from leakscope.models.batch_keys import find_missing_key, recording
    from leakscope.models.tiny import loss_function

    forward_only = mode is Mode.FORWARD_ONLY
    grad_mode = (
        torch.no_grad()
        if (forward_only and spec.caller_no_grad_forward_only)
        else torch.enable_grad()
    )
    anomaly_mode = (
        torch.autograd.set_detect_anomaly(True, check_nan=False)
        if anomaly
        else contextlib.nullcontext()
    )
    action = f"the {spec.adapter} step" if spec.runs_backward else "forward_step"
    try:
        with grad_mode, anomaly_mode, seeded(seed), recording():
            result = spec.call_step(
                engine, micro_batch, spec.loss_function or loss_function, forward_only
            )
    except LeakscopeError:
        raise  # an adapter's own one-line error (e.g. the factory built the wrong kind of object)
    except Exception as exc:
        missing = find_missing_key(exc)
        if missing is not None:  # leakscope's micro-batch lacks a key: not the engine's fault
            raise EngineError(missing.message, detail=traceback.format_exc()) from None
        raise EngineError(
            describe_exception(exc, action)
            + "; fix the engine (run with --debug for the traceback)",
            detail=traceback.format_exc(),
        ) from None
    except SystemExit as exc:
        raise EngineError(
            f"{action} called sys.exit({exc.code!r}); an engine must return (loss, output), not exit",
            detail=traceback.format_exc(),
        ) from None
    if spec.runs_backward:
        # NOTE [Framework runs backward]: the framework's own per-micro-batch
        # work (its backward included) ran inside the step; what it returned is
        # what its caller keeps. No loss is held: observe exactly as after backward.
        return None, result
    loss, output = _validate(result, mode)
    del result
    if mode is Mode.TRAIN:
        try:
            loss.backward()
        except Exception as exc:
            raise EngineError(
                describe_exception(exc, "loss.backward()")
                + "; the returned loss must be differentiable",
                detail=traceback.format_exc(),
            ) from None
    return loss, output


__all__ = ["build_subject", "make_micro_batch", "step_once"]
