"""Adapters: how targets that cannot be built as ``Engine(model)`` are driven.

An adapter recognises a family of engines (verl's FSDP engines are the first
user, see :mod:`leakscope.adapters.verl`), builds one around leakscope's tiny
model the way that framework's own CPU tests do, and says how the framework's
caller runs forward-only steps. It may also supply the micro-batch and loss
function the framework expects, and drive several micro-batches through the
framework's own loop. Third-party adapters register under the entry-point group
``leakscope.adapters``. See docs/adapters.md.

No torch here: recognising a target must stay cheap, and ``import leakscope``
must not import torch.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from leakscope.errors import TargetError, UsageError
from leakscope.harness.target import ResolvedTarget
from leakscope.options import ModelKind

if TYPE_CHECKING:
    from leakscope.harness.protocol import EngineSpec
    from leakscope.options import CheckOptions

ENTRY_POINT_GROUP = "leakscope.adapters"

#: adapters shipped with leakscope, as ``module:attribute`` (imported lazily)
BUILTIN = (
    "leakscope.adapters.verl:ADAPTER",
    "leakscope.adapters.trainer:ADAPTER",
    "leakscope.adapters.lightning:ADAPTER",
)


@runtime_checkable
class Adapter(Protocol):
    """What an adapter provides. Optional hooks are documented on :class:`AdapterHooks`."""

    #: a short name shown in reports and errors, e.g. ``"verl-fsdp"``
    name: str
    #: True when the framework's own caller wraps forward-only steps in
    #: ``torch.no_grad()`` (leakscope's forward-only mode then does the same)
    caller_no_grad_forward_only: bool

    def recognises(self, resolved: ResolvedTarget) -> bool:
        """True when this adapter knows how to build and drive ``resolved.obj``.

        Called for every target: keep it cheap and free of side effects (look
        at names and the MRO; do not import the framework).
        """
        ...

    def build_engine(self, resolved: ResolvedTarget, model: Any) -> Any:
        """A fresh engine around ``model`` with a working ``forward_step``."""
        ...


class AdapterHooks(Protocol):
    """Optional methods an adapter may define; leakscope uses its own defaults otherwise."""

    def micro_batch(self, size: Any, index: int) -> Any:
        """The ``index``-th micro-batch in the framework's format (``size`` is a ModelSize)."""
        ...

    def loss_function(
        self, model_output: Any, data: Any, dp_group: Any = None, **kwargs: Any
    ) -> Any:
        """``(loss, metrics)`` from the framework's model_output, as its real losses are called."""
        ...

    def run_micro_batches(
        self, engine: Any, micro_batches: Sequence[Any], loss_function: Any, forward_only: bool
    ) -> Any:
        """Drive the micro-batches through the framework's own loop; return what its caller keeps."""
        ...

    #: True when the framework runs backward itself (TRL's ``training_step``,
    #: Lightning's automatic optimization); then :meth:`step` is required
    runs_backward: bool

    #: the tiny model to build for this adapter's engines, whatever ``--model`` says
    #: (``"hf-lora"``: a transformers Llama with PEFT LoRA; needs the ``hf`` extra)
    model_kind: str

    #: module-name prefixes (``("trl.",)``): :meth:`prepare` runs before a target
    #: whose module starts with one of them is imported
    prefixes: tuple[str, ...]

    def prepare(self) -> None:
        """Set the process up before the target is imported (e.g. stand-ins for GPU-only
        imports, offline environment variables). Runs at most once per process: before the
        import for targets matching ``prefixes``, and before the first engine is built otherwise."""
        ...

    def step(self, engine: Any, micro_batch: Any, forward_only: bool) -> Any:
        """One micro-batch through the framework's own per-micro-batch work, backward included
        in train mode; return what the real caller keeps. Used when ``runs_backward``."""
        ...

    def close(self, engine: Any) -> None:
        """End what the adapter started for ``engine`` (e.g. a paused loop); called once per engine."""
        ...

    def unsupported(self, resolved: ResolvedTarget) -> str | None:
        """One line when the installed release of the framework lacks what this adapter drives
        (naming the supported range and what to run instead), else None. Called once per target,
        after it is imported and recognised; the line errors every mode of the target (exit 3)."""
        ...

    #: optional attribute: ``--factory`` builds the engine and this adapter still drives it
    #: (without it, ``--factory`` overrides the adapter)
    accepts_factory: bool

    def adopt(self, built: Any, model: Any) -> Any:
        """The engine to drive, from what ``--factory`` returned when called with leakscope's ``model``
        (with ``accepts_factory``; Lightning: the module, or ``(module, its data)``)."""
        ...

    def variants(self, given: Mapping[str, str], every: bool) -> list[tuple[Any, tuple[str, ...]]]:
        """Configured copies of this adapter and their ``key=value`` labels, default first.

        ``given``: the ``--set`` values for this target (raise UsageError for a
        key it does not know). ``every``: also every realistic value of the
        knobs not given that changes what is retained (the gate); otherwise the
        framework's defaults only (``estimate``).
        """
        ...


def spec_for(
    adapter: Adapter,
    resolved: ResolvedTarget,
    factory: Callable[[object], object] | None = None,
    settings: tuple[str, ...] = (),
) -> EngineSpec:
    """The :class:`~leakscope.harness.protocol.EngineSpec` that drives ``resolved`` through ``adapter``
    (built by ``factory`` when given: adapters that declare ``accepts_factory``), with the adapter
    ``settings`` it was configured with (``key=value``, shown in reports)."""
    from leakscope.harness.protocol import EngineSpec, _call_forward_step

    adopt = getattr(adapter, "adopt", None)

    def make_engine(model: object) -> Any:
        if factory is not None:
            built = factory(model)
            return adopt(built, model) if adopt is not None else built
        return adapter.build_engine(resolved, model)

    model_kind = getattr(adapter, "model_kind", None)
    if model_kind == ModelKind.HF_LORA:
        from leakscope.models.names import HF_EXTRA_HINT, missing_hf

        missing = missing_hf()
        if missing:
            raise UsageError(
                f"{resolved.spec} is checked by the {adapter.name} adapter on the hf-lora model, which needs "
                f"{' and '.join(missing)} (not installed); {HF_EXTRA_HINT}"
            )
    prepare(adapter)
    call_step: Any = _call_forward_step
    runs_backward = bool(getattr(adapter, "runs_backward", False))
    if runs_backward:
        adapter_step = cast(AdapterHooks, adapter).step

        def call_step(
            engine: object, micro_batch: object, loss_function: object, forward_only: bool
        ) -> Any:
            return adapter_step(engine, micro_batch, forward_only)

    modules: tuple[Any, ...] = (resolved.module,)
    if factory is not None and getattr(factory, "__module__", None) in sys.modules:
        modules = (*modules, sys.modules[factory.__module__])
    return EngineSpec(
        name=resolved.spec,
        make_engine=make_engine,
        call_step=call_step,
        runs_backward=runs_backward,
        model_kind=model_kind,
        caller_no_grad_forward_only=bool(adapter.caller_no_grad_forward_only),
        modules=modules,
        anchor=resolved.obj,
        make_micro_batch=getattr(adapter, "micro_batch", None),
        loss_function=getattr(adapter, "loss_function", None),
        run_micro_batches=getattr(adapter, "run_micro_batches", None),
        adapter=str(adapter.name),
        close_engine=getattr(adapter, "close", None),
        settings=settings,
    )


_PREPARED: set[int] = set()


def prepare(adapter: Adapter) -> None:
    """Call ``adapter.prepare()`` once per process (a no-op for adapters without one)."""
    hook = getattr(adapter, "prepare", None)
    if hook is None or id(adapter) in _PREPARED:
        return
    _PREPARED.add(id(adapter))
    try:
        hook()
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise TargetError(
            f"the {adapter.name} adapter's prepare() failed: {type(exc).__name__}: "
            f"{text[0] if text else '(no message)'}; fix or uninstall the adapter",
            detail=traceback.format_exc(),
        ) from None


def prepare_for_target(target: str) -> None:
    """Before ``target`` is imported: prepare every adapter whose ``prefixes`` match its module."""
    module_part = target.rpartition(":")[0]
    if not module_part or module_part.endswith(".py") or "/" in module_part:
        return  # a file path: no module name to match
    for adapter in installed_adapters():
        prefixes = tuple(getattr(adapter, "prefixes", ()) or ())
        if any(module_part.startswith(p) or module_part == p.rstrip(".") for p in prefixes):
            prepare(adapter)


@functools.lru_cache(maxsize=1)
def _entry_points() -> tuple[metadata.EntryPoint, ...]:
    return tuple(metadata.entry_points(group=ENTRY_POINT_GROUP))


def _load(label: str, load: Callable[[], object], fix: str) -> Any:
    """Load an adapter object; a class or zero-argument factory is called once."""
    try:
        obj = load()
        if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Adapter)):
            obj = obj()
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise TargetError(
            f"adapter {label} failed to load: {type(exc).__name__}: {text[0] if text else '(no message)'}; {fix}",
            detail=traceback.format_exc(),
        ) from None
    if not isinstance(obj, Adapter):
        raise TargetError(
            f"adapter {label} is a {type(obj).__name__}, not an adapter: it needs name, "
            f"caller_no_grad_forward_only, recognises() and build_engine(); {fix}"
        )
    return obj


@functools.lru_cache(maxsize=1)
def installed_adapters() -> tuple[Adapter, ...]:
    """Third-party adapters (entry points, in name order) followed by the built-in ones.

    Third-party adapters come first so that an installed package can take over
    a family leakscope also knows; ``--factory`` overrides every adapter.
    """
    out: list[Adapter] = []
    for ep in sorted(_entry_points(), key=lambda e: e.name):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "its package"
        label = f"entry point {ep.name!r} ({ep.value}, group {ENTRY_POINT_GROUP})"
        out.append(_load(label, ep.load, f"fix or uninstall {dist}"))
    for spec in BUILTIN:
        module_name, _, attr = spec.partition(":")

        def load(module_name: str = module_name, attr: str = attr) -> Any:
            import importlib

            return getattr(importlib.import_module(module_name), attr)

        out.append(_load(spec, load, "please report this leakscope bug"))
    return tuple(out)


def find_adapter(resolved: ResolvedTarget) -> _Match | None:
    """An object whose ``spec(resolved)`` builds the EngineSpec, or None for the plain protocol."""
    for adapter in installed_adapters():
        if adapter.recognises(resolved):
            return _Match(adapter)
    return None


class _Match:
    """An adapter that recognised a target (what :func:`find_adapter` returns)."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.name = str(adapter.name)

    def specs(
        self,
        resolved: ResolvedTarget,
        given: Mapping[str, str],
        every: bool,
        factory: Callable[[object], object] | None = None,
    ) -> list[EngineSpec]:
        """One spec per setting the adapter checks (its default alone without a ``variants`` hook)."""
        from leakscope.errors import UsageError

        unsupported = getattr(self.adapter, "unsupported", None)
        line = unsupported(resolved) if unsupported is not None else None
        if line:
            raise TargetError(line)
        variants = getattr(self.adapter, "variants", None)
        if variants is None:
            if given:
                raise UsageError(
                    f"--set {', '.join(given)}: adapter {self.name} takes no settings; drop --set for {resolved.spec}"
                )
            return [spec_for(self.adapter, resolved, factory)]
        return [
            spec_for(adapter, resolved, factory, labels)
            for adapter, labels in variants(given, every)
        ]


def target_name(target: object) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", "?")
    return f"{module}:{getattr(target, '__qualname__', type(target).__name__)}"


def settings_for(name: str, settings: Sequence[tuple[str, ...]]) -> dict[str, str]:
    """The ``--set`` values that apply to target ``name``: global ``(key, value)`` and its own ``(target, key, value)``."""
    out: dict[str, str] = {}
    for entry in settings:
        if len(entry) == 2:
            out[entry[0]] = entry[1]
        elif len(entry) == 3 and entry[0] == name:
            out[entry[1]] = entry[2]
    return out


def _resolved(target: object) -> ResolvedTarget:
    """A target string (imported after its adapter's ``prepare()``) or object, resolved."""
    from leakscope.harness.target import ResolvedTarget, resolve

    if isinstance(target, str):
        prepare_for_target(target)
        return resolve(target)
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    if module is None:
        raise TargetError(f"{target!r} has no importable module; pass 'pkg.mod:Name' instead")
    return ResolvedTarget(target_name(target), target, module, getattr(target, "__qualname__", ""))


def resolve_specs(target: object, options: CheckOptions) -> list[EngineSpec]:
    """Every spec one target is checked with: one per adapter setting (see ``Adapter.variants``).

    ``options.factory`` (``--factory pkg.mod:make_engine``) overrides every adapter,
    except one that declares ``accepts_factory`` (Lightning): the factory then
    builds what that adapter drives.
    """
    from leakscope.harness.protocol import from_target
    from leakscope.harness.target import resolve

    resolved = _resolved(target)
    adapter = find_adapter(resolved)
    factory = resolve(options.factory).obj if options.factory else None
    if adapter is None or (
        factory is not None and not getattr(adapter.adapter, "accepts_factory", False)
    ):
        return [from_target(resolved, factory)]
    if factory is not None and not callable(factory):
        raise TargetError(
            f"--factory names a {type(factory).__name__}, not a callable taking the model"
        )
    given = settings_for(resolved.spec, options.settings)
    return list(adapter.specs(resolved, given, options.every_setting, factory))


def resolve_spec(target: object, factory: str | None = None) -> EngineSpec:
    """The spec of ``target`` with its framework's defaults (the first of :func:`resolve_specs`)."""
    from leakscope.options import CheckOptions

    return resolve_specs(target, CheckOptions(factory=factory, every_setting=False))[0]


__all__ = [
    "Adapter",
    "AdapterHooks",
    "ENTRY_POINT_GROUP",
    "find_adapter",
    "installed_adapters",
    "prepare",
    "prepare_for_target",
    "resolve_spec",
    "resolve_specs",
    "settings_for",
    "spec_for",
    "target_name",
]
