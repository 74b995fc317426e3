"""The engine protocol: how a resolved target becomes an engine and a step call.

A target is a class built as ``Name(model)``, a factory ``Name(model) -> engine``,
or a step function ``step(model, micro_batch, loss_function, forward_only)``.
An engine has ``forward_step(micro_batch, loss_function, forward_only) ->
(loss, output)``. See docs/protocol.md.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

from leakscope.errors import EngineError, TargetError
from leakscope.harness.source import user_frame
from leakscope.harness.target import ResolvedTarget
from leakscope.options import ModelKind
from leakscope.probe import safe

STEP_PARAMS = ("micro_batch", "loss_function", "forward_only")
_MISSING: Any = object()


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """Everything the harness needs to build and drive one target."""

    name: str
    make_engine: Callable[[Any], Any]
    call_step: Callable[[Any, Any, Any, bool], Any]
    #: the real caller wraps forward-only steps in ``torch.no_grad()`` itself
    caller_no_grad_forward_only: bool = False
    #: modules whose globals are searched for holders
    modules: tuple[types.ModuleType, ...] = ()
    #: where to point users when no finer source is known
    anchor: Any = None
    #: ``(size, index) -> micro_batch`` in the engine's format (adapters); None: leakscope's
    make_micro_batch: Callable[[Any, int], Any] | None = None
    #: the loss function handed to ``forward_step`` (adapters); None: leakscope's
    loss_function: Callable[..., Any] | None = None
    #: ``(engine, micro_batches, loss_function, forward_only) -> output``: the
    #: framework's own micro-batch loop (adapters; see ``--micro-batches``)
    run_micro_batches: Callable[[Any, Any, Any, bool], Any] | None = None
    #: name of the adapter that built this spec, if any
    adapter: str | None = None
    #: the framework runs backward itself inside ``call_step`` (TRL's
    #: ``training_step``, Lightning's automatic optimization): leakscope calls the
    #: step and observes after it, without calling ``loss.backward()``; what
    #: ``call_step`` returns is what the real caller keeps (the ``output`` root)
    runs_backward: bool = False
    #: the tiny model this target runs on whatever ``--model`` says (an adapter's
    #: ``model_kind``, e.g. ``"hf-lora"`` for transformers/TRL); None: ``--model``
    model_kind: ModelKind | None = None
    #: ``(engine) -> None``: end what the adapter started for this engine (a
    #: framework loop paused between micro-batches) once a trial is done with it
    close_engine: Callable[[Any], None] | None = None
    #: the adapter settings this spec drives the step with, as ``key=value`` (shown in reports)
    settings: tuple[str, ...] = ()


def describe_exception(exc: BaseException, action: str) -> str:
    """``<action> raised Type: message (file:line in func)`` for one-line errors."""
    text = str(exc).strip().splitlines()
    message = text[0] if text else "(no message)"
    where = user_frame(exc.__traceback__)
    location = f" at {where}" if where else ""
    return f"{action} raised {type(exc).__name__}: {message}{location}"


def _call_forward_step(
    engine: Any, micro_batch: Any, loss_function: Any, forward_only: bool
) -> object:
    return engine.forward_step(micro_batch, loss_function=loss_function, forward_only=forward_only)


def check_forward_step(engine: Any, spec_name: str) -> None:
    """Fail with a clear line when ``engine.forward_step`` is missing or has the wrong signature."""
    # Looked up as the walk reads (never a ``__dict__`` property or a metaclass hook); then called
    # as the real caller calls it.
    name = safe.type_name(type(engine))
    method = (safe.instance_dict(engine) or {}).get(
        "forward_step", safe.class_attr(type(engine), "forward_step", _MISSING)
    )
    if method is _MISSING:
        raise EngineError(
            f"{name} (from {spec_name}) has no forward_step; "
            "define forward_step(self, micro_batch, loss_function, forward_only) -> (loss, output)"
        )
    bound = engine.forward_step
    if not callable(bound):
        raise EngineError(f"{name}.forward_step is not callable ({safe.type_name(type(method))})")
    try:
        inspect.signature(bound).bind(None, loss_function=None, forward_only=False)
    except TypeError as exc:
        raise EngineError(
            f"{name}.forward_step{_signature(bound)} cannot be called as "
            f"forward_step(micro_batch, loss_function=..., forward_only=...): {exc}; "
            "use the signature forward_step(self, micro_batch, loss_function, forward_only)"
        ) from None
    except ValueError:
        pass  # builtins without signatures: let the call decide


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _is_step_function(obj: object) -> bool:
    if not isinstance(obj, (types.FunctionType, types.MethodType)):
        return False
    try:
        params = list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return False
    return len(params) == 4 and tuple(params[1:]) == STEP_PARAMS


def _module_of(obj: object) -> types.ModuleType | None:
    name = getattr(obj, "__module__", None)
    return sys.modules.get(name) if isinstance(name, str) else None


def from_target(resolved: ResolvedTarget, factory: object = None) -> EngineSpec:
    """Turn a resolved target (and an optional factory object) into an :class:`EngineSpec`."""
    obj = resolved.obj
    modules = [resolved.module]
    if factory is not None:
        if not callable(factory):
            raise TargetError(
                f"--factory names a {type(factory).__name__}, not a callable taking the model"
            )
        fmod = _module_of(factory)
        if fmod is not None:
            modules.append(fmod)
        return EngineSpec(
            resolved.spec, factory, _call_forward_step, modules=tuple(modules), anchor=factory
        )
    if inspect.isclass(obj):
        return EngineSpec(
            resolved.spec, obj, _call_forward_step, modules=tuple(modules), anchor=obj
        )
    if _is_step_function(obj):
        step = obj

        def call_step(
            model: object, micro_batch: object, loss_function: object, forward_only: bool
        ) -> object:
            return step(model, micro_batch, loss_function, forward_only)

        return EngineSpec(
            resolved.spec, lambda model: model, call_step, modules=tuple(modules), anchor=obj
        )
    if callable(obj):
        return EngineSpec(
            resolved.spec, obj, _call_forward_step, modules=tuple(modules), anchor=obj
        )
    raise TargetError(
        f"{resolved.spec} is a {type(obj).__name__}, not an engine class, factory or step function; "
        "point the target at a class built as Name(model) or a callable returning an engine"
    )


def build_engine(spec: EngineSpec, model: object) -> object:
    """Build the engine around ``model``; a failure becomes a one-line :class:`EngineError`."""
    try:
        engine = spec.make_engine(model)
    except EngineError:
        raise  # an adapter's own one line (what to pass instead), already naming the fix
    except Exception as exc:
        raise EngineError(
            describe_exception(exc, f"building the engine {spec.name}(model)")
            + "; make __init__ work with a small nn.Module, or pass --factory",
            detail=traceback.format_exc(),
        ) from None
    except SystemExit as exc:
        raise EngineError(
            f"building the engine {spec.name}(model) called sys.exit({exc.code!r}); "
            "raise an exception instead of exiting, or pass --factory",
            detail=traceback.format_exc(),
        ) from None
    if engine is None:
        raise EngineError(f"{spec.name}(model) returned None; the factory must return the engine")
    if spec.call_step is _call_forward_step:
        check_forward_step(engine, spec.name)
    return engine
