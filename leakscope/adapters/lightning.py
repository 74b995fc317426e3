"""The built-in adapter for PyTorch Lightning: a ``LightningModule`` driven by the real ``Trainer``.

``leakscope check pkg.mod:MyLitModule`` builds the module from its constructor
(NOTE [Building a LightningModule]): ``MyLitModule(model)`` when its first argument
takes the network (as lightning-hydra-template's modules take ``net``),
``MyLitModule()`` with its hyperparameters' defaults otherwise, or through
``--factory pkg.mod:make(model) -> module``, and drives it through Lightning's own
loops on CPU (pytorch_lightning from 1.4, Lightning 2; what differs between releases
is read from their signatures and their loops' behaviour, not from a version table):

- **train mode**: one real ``Trainer.fit`` for the trial, one epoch, one batch
  per micro-batch. Lightning runs ``training_step``, backward (automatic
  optimization, or the module's ``manual_backward``), the optimizer step,
  ``self.log`` and every batch hook itself. The fit is paused after a batch's
  bookkeeping and the next batch's hooks, as its ``training_step`` starts (NOTE [Pausing
  Lightning], NOTE [Judged when the next step starts]),
  so leakscope observes between batches *inside one epoch*: per-epoch holders
  (``self.training_step_outputs.append(loss)``) are seen growing.
- **forward-only**: the real validation loop (``Trainer.validate``, paused
  before the next batch is fetched), one batch per micro-batch.

The micro-batch leakscope hands in is the batch: a dict of ``input_ids``,
``attention_mask`` and ``position_ids`` (``[B, S]`` int64), for a module built on
leakscope's network; a module built on its own network gets its own data
(NOTE [A module's own data]). Findings are rooted
at ``engine.``, the module: its own state (``engine.training_step_outputs[0]``,
``engine.train_loss._forward_cache``) and the trainer's
(``engine._trainer.…``).

What is not Lightning's default, and why (docs/frameworks.md keeps the same list):

- ``Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False,
  enable_checkpointing=False, enable_progress_bar=False,
  enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1)``
  (before 1.5: ``checkpoint_callback=False``, ``progress_bar_refresh_rate=0``,
  ``weights_summary=None``): CPU, nothing written to disk, and ``self.log``
  processed after every batch. A callback counts batch starts (NOTE [Prefetching loops]).
- ``inference_mode=False``: validation runs under ``torch.no_grad()``, not
  ``torch.inference_mode()``. No graph can be built under either; inference
  mode is thread-local state that cannot be handed across the pause.
- ``detect_anomaly`` follows leakscope's own anomaly mode (on while it records
  where retained tensors were created).
- The data loader is leakscope's: a sized iterable whose next batch is the next
  micro-batch (or, for a module on its own network, the next batch of its own data:
  its ``train_dataloader()``/``val_dataloader()``, the data set it was built from, the
  data a ``--factory`` returned with it, or its ``example_input_array``).
- Lightning's info lines ("GPU available: ...") and its own warnings about
  this set-up ("no val_dataloader", "sync_dist") are silenced while it runs.

Recognising a target imports nothing: it compares the names in the class's MRO. A
pytorch_lightning release without the loop API the pause relies on (``pytorch_lightning.loops``,
1.4 on) is refused with one line naming the range and the ``leakscope watch`` command to use.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from leakscope.adapters.lightning_build import (
    _Data,
    _defines_data,
    _holds,
    _is_default,
    _is_lightning_class,
    _network_first,
    build_from_dataset,
    build_module,
    lightning_package,
)
from leakscope.adapters.lightning_loop import _WARNING_MODULES, _Run
from leakscope.errors import EngineError, UsageError
from leakscope.harness.target import ResolvedTarget
from leakscope.probe import safe


def own_step(cls: object, hook: str = "training_step") -> str | None:
    """``pkg.mod:Class.training_step``: where the module's ``hook`` is defined (its own class or the
    nearest base that is not Lightning's), as ``leakscope watch --method`` names it; None when
    only Lightning defines it."""
    if not isinstance(cls, type):
        return None
    for klass in safe.mro(cls):
        if hook in safe.class_dict(klass):
            return (
                None
                if _is_lightning_class(klass)
                else f"{safe.type_module(klass)}:{safe.type_qualname(klass)}.{hook}"
            )
    return None


def step_method(cls: Any, hook: str = "training_step") -> str:
    """:func:`own_step`, or the class's own name when only Lightning defines ``hook``."""
    return own_step(cls, hook) or f"{cls.__module__}:{cls.__qualname__}.{hook}"


def loop_api_missing(package: str) -> bool:
    """True when the installed ``package`` (``pytorch_lightning``) has no loop API
    (``<package>.loops``, pytorch_lightning 1.4 on): the batch hooks, the prefetch and the
    epoch end the pause relies on (NOTE [Prefetching loops]) are not those of the loops."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"{package}.loops") is None
    except (ImportError, ValueError):
        return True


#: what ``check`` drives, for the one line a release outside it gets
SUPPORTED = "pytorch_lightning from 1.4 and lightning 2"


def release(package: str, loaded: Any = None) -> str:
    """``pytorch_lightning 1.0.4``: the release of ``package`` loaded in ``loaded`` (a ``sys.modules``
    mapping; this process's by default), for messages: read, never compared."""
    import sys

    version = getattr((sys.modules if loaded is None else loaded).get(package), "__version__", "")
    return f"{package} {version}".strip()


class LightningAdapter:
    """Drives a ``LightningModule`` through the real ``Trainer`` (see the module docstring)."""

    name = "lightning"
    #: Lightning's validation loop runs under no_grad (inference mode by default)
    caller_no_grad_forward_only = True
    #: Lightning runs backward (and the optimizer step) itself
    runs_backward = True
    #: ``--factory`` builds the module (for ``__init__`` that takes more than the network)
    accepts_factory = True

    def __init__(self) -> None:
        #: the paused loop of each module being checked, by ``id(module)``
        self._runs: dict[int, _Run] = {}
        #: where the batches of each module on its own network come from (by ``id``; forgotten
        #: at close); a module not here gets leakscope's micro-batches
        self._data: dict[int, _Data] = {}

    def recognises(self, resolved: ResolvedTarget) -> bool:
        """True for subclasses of ``LightningModule`` (``pytorch_lightning`` or ``lightning.pytorch``)."""
        return lightning_package(resolved.obj) is not None

    def unsupported(self, resolved: ResolvedTarget) -> str | None:
        """One line for a pytorch_lightning release without the loop API (before 1.4)."""
        package = lightning_package(resolved.obj)
        if package is None or not loop_api_missing(package):
            return None
        return (
            f"{resolved.spec} cannot be driven by leakscope check: {release(package)} has no loop API "
            f"({package}.loops, which check pauses between batches); check drives {SUPPORTED}; watch the "
            f"job's own step instead: leakscope watch --method {step_method(resolved.obj)} your_train.py"
        )

    def build_engine(self, resolved: ResolvedTarget, model: object) -> object:
        """The module from its constructor or its ``from_dataset`` (NOTE [Building a LightningModule]):
        ``Cls(model)`` when its first argument takes the network, ``Cls.from_dataset(dataset)`` for a
        module built for a data set, else ``Cls()`` with its hyperparameters' defaults."""
        cls = resolved.obj
        with _quiet():
            made = None if _network_first(cls) or _defines_data(cls) else build_from_dataset(cls)
            if made is not None:
                module, dataset = made
                self._data[id(module)] = _Data(dataset=dataset)
                return module
            module, on_network = build_module(cls, model)
        if not on_network:
            self._data[id(module)] = _Data()
        return module

    def adopt(self, built: object, model: object) -> object:
        """What ``--factory`` returned, as the module to drive (NOTE [A module's own data]): the
        module, or ``(module, data)``; a module not on leakscope's network is fed its own data."""
        if (
            isinstance(built, tuple)
            and len(built) == 2
            and lightning_package(type(built[0])) is not None
        ):
            module, data = built
            self._data[id(module)] = _Data(given=data)
            return module
        if lightning_package(type(built)) is not None and not _holds(built, model):
            self._data[id(built)] = _Data()
        return built

    def micro_batch(self, size: Any, index: int) -> object:
        """The batch Lightning hands to ``training_step``: a dict of ``[B, S]`` int64 tensors."""
        from leakscope.models.tiny import build_micro_batch

        return dict(build_micro_batch(size, index).items())

    def step(self, engine: object, micro_batch: object, forward_only: bool) -> object:
        """One batch through ``Trainer.fit`` (train) or ``Trainer.validate`` (forward-only).

        Returns None: Lightning's loop keeps nothing a step returns
        (``training_step``'s output goes to ``on_train_batch_end`` and is
        dropped); what it keeps lives on the module and its trainer.
        """
        stage = "validate" if forward_only else "fit"
        run = self._runs.get(id(engine))
        if run is not None and (run.module is not engine or run.stage != stage):
            self._runs.pop(id(engine)).finish()
            run = None
        if run is None:
            _require_greenlet()
            package = lightning_package(type(engine))
            if package is None:
                raise EngineError(
                    f"the factory returned a {type(engine).__qualname__} object, not a LightningModule; "
                    "make it return the LightningModule to check (or the module and its data loader)"
                )
            if forward_only and _is_default(type(engine), "validation_step"):
                raise EngineError(
                    f"{type(engine).__name__} defines no validation_step, so Lightning has no "
                    "forward-only loop to run; check it with --mode train"
                )
            data = self._data.get(id(engine))
            own = data.loader(engine, stage) if data is not None else None
            run = self._runs[id(engine)] = _Run(engine, package, stage, own)
        run.run_batch(micro_batch)
        return None

    def close(self, engine: object) -> None:
        """End the module's paused loop (the epoch ends normally) and forget it."""
        run = self._runs.pop(id(engine), None)
        if run is not None:
            run.finish()
        self._data.pop(id(engine), None)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Lightning's warnings about a module being built (``save_hyperparameters`` of an ``nn.Module``)
    silenced, as they are while Lightning runs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=_WARNING_MODULES)
        yield


def _require_greenlet() -> None:
    import importlib.util

    if importlib.util.find_spec("greenlet") is None:
        raise UsageError(
            "checking a LightningModule needs greenlet, which is not installed; "
            "install it: pip install greenlet (or leakscope's 'lightning' extra: pip install -e '.[lightning]')"
        )


ADAPTER = LightningAdapter()

__all__ = ["ADAPTER", "LightningAdapter", "lightning_package"]
