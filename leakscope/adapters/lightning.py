"""The built-in adapter for PyTorch Lightning: a ``LightningModule`` driven by the real ``Trainer``.

``leakscope check pkg.mod:MyLitModule`` builds the module as ``MyLitModule(model)``
(its network as first argument, as lightning-hydra-template's modules take
``net``), or through ``--factory pkg.mod:make(model) -> module``, and drives it
through Lightning's own loops on CPU:

- **train mode**: one real ``Trainer.fit`` for the trial, one epoch, one batch
  per micro-batch. Lightning runs ``training_step``, backward (automatic
  optimization, or the module's ``manual_backward``), the optimizer step,
  ``self.log`` and every batch hook itself. The fit is paused after a batch's
  bookkeeping, before the next batch is fetched (NOTE [Pausing Lightning]),
  so leakscope observes between batches *inside one epoch*: per-epoch holders
  (``self.training_step_outputs.append(loss)``) are seen growing.
- **forward-only**: the real validation loop (``Trainer.validate``, paused the
  same way), one batch per micro-batch.

The micro-batch leakscope hands in is the batch: a dict of ``input_ids``,
``attention_mask`` and ``position_ids`` (``[B, S]`` int64). Findings are rooted
at ``engine.``, the module: its own state (``engine.training_step_outputs[0]``,
``engine.train_loss._forward_cache``) and the trainer's
(``engine._trainer.…``).

What is not Lightning's default, and why (docs/frameworks.md keeps the same list):

- ``Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False,
  enable_checkpointing=False, enable_progress_bar=False,
  enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1)``:
  CPU, nothing written to disk, and ``self.log`` processed after every batch.
- ``inference_mode=False``: validation runs under ``torch.no_grad()``, not
  ``torch.inference_mode()``. No graph can be built under either; inference
  mode is thread-local state that cannot be handed across the pause.
- ``detect_anomaly`` follows leakscope's own anomaly mode (on while it records
  where retained tensors were created).
- The data loader is leakscope's: a sized iterable whose next batch is the next
  micro-batch. ``train_dataloader()``/``val_dataloader()`` of the module are not
  called.
- Lightning's info lines ("GPU available: ...") and its own warnings about
  this set-up ("no val_dataloader", "sync_dist") are silenced while it runs.

Recognising a target imports nothing: it compares the names in the class's MRO.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from leakscope.errors import EngineError, UsageError
from leakscope.harness.target import ResolvedTarget

#: where ``LightningModule`` lives, by package: the classic and the unified install
MODULE_CLASSES = {
    "pytorch_lightning.core.module": "pytorch_lightning",
    "lightning.pytorch.core.module": "lightning.pytorch",
}
#: loggers whose INFO lines (accelerator summary, tips) are silenced while Lightning runs
_LOGGERS = ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric")
#: warnings Lightning raises about how leakscope drives it ("no val_dataloader", "sync_dist")
_WARNING_MODULES = r"(pytorch_lightning|lightning|lightning_fabric)(\.|$)"
#: the data loader's length: no epoch ends before leakscope says so (NOTE [Pausing Lightning])
_LENGTH = 1_000_000


class _Signal:
    """A marker passed across the pause (never a user object)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_WANT = _Signal("want next batch")  # the loop asks for the next batch: the previous one is done
_STOP = _Signal("stop")  # no more batches: let the epoch end


def lightning_package(cls: Any) -> str | None:
    """``"pytorch_lightning"`` or ``"lightning.pytorch"`` when ``cls`` derives from its
    ``LightningModule`` (by name: no import of Lightning); None otherwise."""
    mro = getattr(cls, "__mro__", None) if isinstance(cls, type) else None
    for klass in mro or ():
        if klass.__name__ == "LightningModule":
            package = MODULE_CLASSES.get(getattr(klass, "__module__", "") or "")
            if package is not None:
                return package
    return None


class _ThreadState:
    """Autograd's thread-local modes, which a greenlet switch does not swap.

    NOTE [Pausing Lightning]
    ``Trainer.fit`` owns the loop. To observe between two batches of one epoch,
    the fit runs in a greenlet that switches back to leakscope when Lightning
    asks the data loader for the next batch: after the previous batch's
    ``on_train_batch_end``, optimizer and scheduler steps and logging, before
    anything of the next batch. A greenlet, not a thread: it runs in the same
    OS thread, so autograd's thread-local sequence numbers (which date this
    step's graph) are shared, and no thread is left behind. Grad mode and
    anomaly mode are thread-local too, and Lightning sets them in context
    managers that stay open across the pause (``set_grad_enabled(True)`` around
    the fit, ``no_grad`` around validation); each side of a switch puts its
    own back. The data loader has a length, so Lightning fetches exactly the
    batch it is about to run (no prefetch); a length of a million keeps the
    epoch open until leakscope sends the stop, which ends the epoch normally
    (``on_train_epoch_end`` runs) and returns from ``fit``.
    """

    def __init__(self) -> None:
        import torch

        self.grad = torch.is_grad_enabled()
        self.anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())

    def restore(self) -> None:
        import torch

        if torch.is_grad_enabled() != self.grad:
            torch.set_grad_enabled(self.grad)
        if (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()) != self.anomaly:
            torch.autograd.set_detect_anomaly(*self.anomaly)


def _pause() -> Any:
    """From inside the loop: hand control back to leakscope; return what it sends next."""
    import greenlet

    state = _ThreadState()
    parent = greenlet.getcurrent().parent
    assert parent is not None
    try:
        return parent.switch(_WANT)
    finally:
        state.restore()


class _Loader:
    """The data loader Lightning iterates: each batch is the micro-batch leakscope sends next."""

    def __len__(self) -> int:
        return _LENGTH

    def __iter__(self) -> Any:
        while True:
            batch = _pause()
            if batch is _STOP:
                return
            yield batch
            # No local keeps the previous batch while the loop is paused.
            del batch


class _Run:
    """One Lightning loop (``fit`` or ``validate``) for one module, paused between batches."""

    def __init__(self, module: Any, package: str, stage: str) -> None:
        import greenlet

        self.module: Any = module
        self.package = package
        self.stage = stage
        self.batches = 0
        self.ended = False
        self.glet: Any = greenlet.greenlet(self._main)

    def _main(self) -> Any:
        import importlib

        import torch

        trainer_cls = importlib.import_module(self.package).Trainer
        options: dict[str, Any] = dict(
            accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
            log_every_n_steps=1, inference_mode=False, detect_anomaly=torch.is_anomaly_enabled(),
        )
        if self.stage == "fit":
            trainer = trainer_cls(limit_val_batches=0, **options)
            trainer.fit(self.module, train_dataloaders=_Loader())
        else:
            trainer = trainer_cls(**options)
            trainer.validate(self.module, dataloaders=_Loader(), verbose=False)
        del trainer
        return _STOP

    def _switch(self, *value: Any) -> Any:
        state = _ThreadState()
        levels = {name: logging.getLogger(name).level for name in _LOGGERS}
        for name in _LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", module=_WARNING_MODULES)
                return self.glet.switch(*value)
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            state.restore()

    def run_batch(self, batch: Any) -> None:
        """Run one batch through the loop; return once Lightning asks for the next one."""
        if self.ended:
            raise EngineError(
                f"Trainer.{self.stage} ended the epoch at micro-batch #{self.batches - 1} (the module "
                "stops it: on_train_batch_start returned -1, trainer.should_stop or max_steps); "
                "leakscope runs one batch per micro-batch in one epoch: lower --micro-batches"
            )
        if self.batches == 0:
            first = self._switch()  # set-up, until the loop asks for the first batch
            if first is not _WANT:
                self.ended = True
                raise EngineError(
                    f"Trainer.{self.stage} returned before asking for a batch; "
                    "leakscope runs one batch per micro-batch in one epoch: check the module's hooks"
                )
        answer = self._switch(batch)
        self.batches += 1
        if answer is not _WANT:
            self.ended = True

    def finish(self) -> None:
        """End the epoch normally (epoch-end hooks run), then drop everything."""
        try:
            if self.batches and not self.ended and not self.glet.dead:
                self._switch(_STOP)
        except Exception:
            pass  # an epoch-end hook failed after the check: nothing left to observe
        finally:
            if not self.glet.dead:
                self.glet.throw()  # GreenletExit: unwinds the loop and its context managers
            self.glet = None
            self.module = None


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

    def recognises(self, resolved: ResolvedTarget) -> bool:
        """True for subclasses of ``LightningModule`` (``pytorch_lightning`` or ``lightning.pytorch``)."""
        return lightning_package(resolved.obj) is not None

    def build_engine(self, resolved: ResolvedTarget, model: Any) -> Any:
        """``Cls(model)``: the module with leakscope's tiny network as its first argument."""
        return resolved.obj(model)

    def micro_batch(self, size: Any, index: int) -> Any:
        """The batch Lightning hands to ``training_step``: a dict of ``[B, S]`` int64 tensors."""
        from leakscope.models.tiny import build_micro_batch

        return dict(build_micro_batch(size, index).items())

    def step(self, engine: Any, micro_batch: Any, forward_only: bool) -> Any:
        """One batch through ``Trainer.fit`` (train) or ``Trainer.validate`` (forward-only).

        Returns None: Lightning's loop keeps nothing a step returns
        (``training_step``'s output goes to ``on_train_batch_end`` and is
        dropped); what it keeps lives on the module and its trainer.
        """
        stage = "validate" if forward_only else "fit"
        run = self._runs.get(id(engine))
        if run is not None and (run.module is not engine or run.stage != stage):
            self.close(engine)
            run = None
        if run is None:
            _require_greenlet()
            package = lightning_package(type(engine))
            if package is None:
                raise EngineError(
                    f"the factory returned a {type(engine).__qualname__} object, not a LightningModule; "
                    "make it return the LightningModule to check"
                )
            if forward_only and _is_default(engine, "validation_step"):
                raise EngineError(
                    f"{type(engine).__name__} defines no validation_step, so Lightning has no "
                    "forward-only loop to run; check it with --mode train"
                )
            run = self._runs[id(engine)] = _Run(engine, package, stage)
        run.run_batch(micro_batch)
        return None

    def close(self, engine: Any) -> None:
        """End the module's paused loop (the epoch ends normally) and forget it."""
        run = self._runs.pop(id(engine), None)
        if run is not None:
            run.finish()


def _require_greenlet() -> None:
    import importlib.util

    if importlib.util.find_spec("greenlet") is None:
        raise UsageError(
            "checking a LightningModule needs greenlet, which is not installed; "
            "install it: pip install greenlet (or leakscope's 'lightning' extra: pip install -e '.[lightning]')"
        )


def _is_default(module: Any, hook: str) -> bool:
    """True when ``hook`` is Lightning's own (not overridden by the module)."""
    for klass in type(module).__mro__:
        if hook in vars(klass):
            return klass.__name__ == "LightningModule" and klass.__module__ in MODULE_CLASSES
    return True


ADAPTER = LightningAdapter()

__all__ = ["ADAPTER", "LightningAdapter", "lightning_package"]
