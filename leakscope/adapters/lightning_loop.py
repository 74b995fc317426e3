"""Pausing Lightning's loops: one ``Trainer.fit`` or ``Trainer.validate`` run in a greenlet that
hands control back to leakscope between two batches of one epoch (NOTE [Pausing Lightning]).

The adapter (leakscope/adapters/lightning.py) starts a :class:`_Run` per module and stage and sends
it one batch per micro-batch; what the module is fed comes from leakscope/adapters/lightning_build.py.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from leakscope.errors import EngineError

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
_MISSING = _Signal("missing")  # an attribute the module does not have


class _Pending(dict):  # type: ignore[type-arg]
    """The batch the loop fetches for a module fed leakscope's micro-batches, filled in place when
    its ``training_step`` starts (NOTE [Judged when the next step starts]). A ``dict``: Lightning's
    transfer to the device makes a new one of the same type, the object the step and ``self.log``
    both see."""


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


class _Feed:
    """What the paused loop is fed, shared by its data loader and its callback (NOTE [Prefetching loops]).

    Holds no batch once the loop has it: a placeholder is dropped as soon as it is filled.
    """

    def __init__(self, own: Any = None, at_step: bool = False) -> None:
        #: batches whose ``on_*_batch_start`` ran
        self.started = 0
        #: the loop pauses when the next batch's ``training_step`` starts, not when it is fetched
        #: (NOTE [Judged when the next step starts])
        self.at_step = at_step
        #: the batch whose ``training_step`` last started (``started`` then)
        self.stepped = 0
        #: the module whose ``training_step`` this feed wrapped (an instance attribute), while it is
        self.wrapped: Any = None
        #: ``started`` when the loop last paused (None: it has not paused yet)
        self.started_at_pause: int | None = None
        #: placeholders the loop fetched ahead, oldest first, each filled at a later pause
        self.pending: list[dict[str, Any]] = []
        #: leakscope sent the stop: a batch that starts now is a placeholder never filled
        self.stopping = False
        #: the module's own data loader, called once the loop has set the module up (``train_dataloader``)
        self.own = own
        self._own_iter: Any = None
        #: ``(module, what its _trainer was)`` while the module holds its trainer strongly for the
        #: check (NOTE [The trainer of a 1.x module])
        self.attached: tuple[Any, Any] | None = None

    def attach(self, trainer: Any, module: Any) -> None:
        """NOTE [The trainer of a 1.x module]"""
        import weakref

        if self.at_step and self.wrapped is None and module is not None:
            self.wrapped = module
            vars(module)["training_step"] = self._step_starts(module.training_step)
        if self.attached is not None or module is None:
            return
        own = vars(module)
        held = own.get("_trainer", _MISSING)
        if held is _MISSING or isinstance(held, weakref.ProxyTypes):
            self.attached = (module, held)
            own["_trainer"] = trainer

    def _step_starts(self, step: Any) -> object:
        """``step`` (the module's bound ``training_step``), paused when a later batch's first call
        starts (NOTE [Judged when the next step starts])."""
        feed = self

        def training_step(*args: Any, **kwargs: Any) -> object:
            pending = args[0] if args else kwargs.get("batch")
            if isinstance(pending, _Pending) and not pending:
                # leakscope's micro-batch: the loop pauses as each training_step starts, the first
                # one included (set-up), and the batch leakscope sends is the one it runs
                sent = _pause()
                if sent is _STOP:
                    feed.stopping = True  # nothing to run: the next batch's start ends the epoch
                    return None
                pending.update(feed.data(sent))
                del sent
            elif feed.started != feed.stepped:
                feed.stepped = feed.started
                if feed.started > 1 and _pause() is _STOP:
                    feed.stopping = (
                        True  # this batch runs after the check; the next one ends the epoch
                    )
            return step(*args, **kwargs)

        return training_step

    def detach(self) -> None:
        """Put the module's ``_trainer`` and ``training_step`` back as Lightning left them."""
        wrapped, self.wrapped = self.wrapped, None
        if wrapped is not None:
            vars(wrapped).pop("training_step", None)
        if self.attached is None:
            return
        module, held = self.attached
        self.attached = None
        own = vars(module)
        if held is _MISSING:
            own.pop("_trainer", None)
        elif own.get("_trainer") is not held:
            own["_trainer"] = held

    def ahead(self) -> bool:
        """True when the loop asks for a batch before it started the one it fetched last: a prefetch."""
        return self.started_at_pause is not None and self.started == self.started_at_pause

    def data(self, batch: Any) -> Any:
        """The batch to run: leakscope's micro-batch, or the module's own next batch (NOTE [Building a LightningModule])."""
        if self.own is None:
            return batch
        for _ in range(2):
            if self._own_iter is None:
                self._own_iter = iter(self.own())
            try:
                return next(self._own_iter)
            except StopIteration:
                self._own_iter = None
        raise EngineError(
            "the module's own data loader yields no batch; give it data or check it with --factory"
        )

    def batch_started(self, trainer: Any, module: Any) -> None:
        """From the callback, at a batch's start: count it; after the stop, end the epoch before it runs."""
        self.attach(trainer, module)
        if self.stopping:
            # NOTE [Prefetching loops]: the placeholder fetched ahead is never filled.
            raise StopIteration
        self.started += 1


class _Loader:
    """The data loader Lightning iterates: each batch is the micro-batch leakscope sends next."""

    def __init__(self, feed: _Feed) -> None:
        self.feed = feed

    def __len__(self) -> int:
        return _LENGTH

    def __iter__(self) -> Any:
        feed = self.feed
        if feed.at_step and feed.own is None:
            # NOTE [Judged when the next step starts]: leakscope's micro-batch is only there when
            # the step that runs it starts; the loop is handed an empty batch, filled then.
            while not feed.stopping:
                pending = _Pending()
                yield pending
                del pending
            return
        if feed.at_step:
            # NOTE [Judged when the next step starts]: the module's own batches, at any time; the
            # loop pauses here once (set-up), then when each next training_step starts.
            if _pause() is _STOP:
                feed.stopping = True
            while not feed.stopping:
                batch = feed.data(None)
                yield batch
                del batch
            return
        while True:
            if feed.ahead():
                if (
                    feed.own is not None
                ):  # the module's own data is there at any time: no placeholder
                    ahead = feed.data(None)
                else:
                    ahead = {}
                    feed.pending.append(ahead)
                yield ahead
                del ahead
                continue
            batch = _pause()
            feed.started_at_pause = feed.started
            if batch is _STOP:
                feed.stopping = True
                return
            batch = feed.data(batch)
            if feed.pending:
                # The batch the loop runs next was fetched ahead: fill it, and give the loop
                # a new placeholder for the one it asks for now.
                feed.pending.pop(0).update(batch)
                batch = {}
                feed.pending.append(batch)
            yield batch
            # No local keeps the previous batch while the loop is paused.
            del batch


# NOTE [Prefetching loops]
# pytorch_lightning before 1.6 always fetches one batch ahead (1.4: `prefetch_iterator`;
# 1.5: `DataFetcher`, whose `prefetch_batches` is at least 1): it asks for batch k+1 before it
# runs batch k. leakscope has no batch k+1 then (its next micro-batch comes with the next
# step), so the loader hands the loop an empty dict for it and fills that dict at the next
# pause, the loop's next request, which comes after batch k's bookkeeping and before the
# dict is moved to the device (1.4 and 1.5 move a batch after the fetch returns). A callback
# counts batch starts: a request made before the batch fetched last has started is a
# prefetch. The pause is therefore at the same place in every release, after a batch's
# bookkeeping and before the next batch runs; releases that fetch a sized loader's batch only
# when they run it (1.6 on, and Lightning 2) never see a placeholder. At the stop, the one
# placeholder left is never filled: the callback raises StopIteration at its start, which
# the epoch loop takes as the end of the epoch (as for a hook that returns -1), so the epoch
# ends normally and no batch runs after the check.


def _parameters(function: Any) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return set()


def _first(parameters: set[str], *choices: tuple[str, object]) -> dict[str, Any]:
    """The first ``(name, value)`` whose name the signature takes, as keyword arguments (or none)."""
    for name, value in choices:
        if name in parameters:
            return {name: value}
    return {}


def trainer_options(trainer_cls: Any, stage: str, anomaly: bool) -> dict[str, Any]:
    """``Trainer(...)`` keyword arguments for a quiet CPU run, in the installed release's spelling.

    Lightning 1.5 renamed ``checkpoint_callback``, ``progress_bar_refresh_rate`` and
    ``weights_summary`` to ``enable_*``; ``detect_anomaly`` and ``inference_mode`` are newer
    still. Each setting is given under the first name the signature takes.
    """
    parameters = _parameters(trainer_cls.__init__)
    options: dict[str, object] = {
        "max_epochs": 1,
        "logger": False,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
    }
    if "accelerator" in parameters and "devices" in parameters:
        options.update(accelerator="cpu", devices=1)
    options.update(
        _first(parameters, ("enable_checkpointing", False), ("checkpoint_callback", False))
    )
    options.update(
        _first(parameters, ("enable_progress_bar", False), ("progress_bar_refresh_rate", 0))
    )
    options.update(_first(parameters, ("enable_model_summary", False), ("weights_summary", None)))
    options.update(_first(parameters, ("inference_mode", False)))
    options.update(_first(parameters, ("detect_anomaly", anomaly)))
    if stage == "fit":
        options["limit_val_batches"] = 0
    return options


def _callback(package: str, feed: _Feed) -> object:
    """A Lightning ``Callback`` that tells the feed when a batch starts (NOTE [Prefetching loops])."""
    import importlib

    base = importlib.import_module(package).Callback

    # `*rest`: pytorch_lightning 1.x passes `dataloader_idx` to every batch hook; Lightning 2 refuses
    # a callback whose on_train_batch_start names it.
    def on_batch_start(
        self: object,
        trainer: object,
        module: object,
        batch: object,
        batch_idx: object,
        *rest: object,
    ) -> None:
        feed.batch_started(trainer, module)

    return type(
        "LeakscopeBatchStarts",
        (base,),
        {
            "on_train_batch_start": on_batch_start,
            "on_validation_batch_start": on_batch_start,
        },
    )()


class _Run:
    """One Lightning loop (``fit`` or ``validate``) for one module, paused between batches."""

    def __init__(self, module: object, package: str, stage: str, own: object = None) -> None:
        import greenlet

        self.module: Any = module
        self.package = package
        self.stage = stage
        self.batches = 0
        self.ended = False
        self.own = own
        self.feed: _Feed | None = None
        self.glet: Any = greenlet.greenlet(self._main)

    def _main(self) -> object:
        import importlib

        import torch

        trainer_cls = importlib.import_module(self.package).Trainer
        feed = self.feed = _Feed(self.own, at_step=self.stage == "fit")
        self.own = None
        options = trainer_options(trainer_cls, self.stage, torch.is_anomaly_enabled())
        trainer = trainer_cls(callbacks=[_callback(self.package, feed)], **options)
        if self.stage == "fit":
            given = _first(
                _parameters(trainer.fit),
                ("train_dataloaders", _Loader(feed)),
                ("train_dataloader", _Loader(feed)),
            )
            trainer.fit(self.module, **given)
        else:
            parameters = _parameters(trainer.validate)
            given = _first(
                parameters, ("dataloaders", _Loader(feed)), ("val_dataloaders", _Loader(feed))
            )
            trainer.validate(self.module, **given, **_first(parameters, ("verbose", False)))
        feed.detach()
        del trainer, feed, given
        return _STOP

    def _switch(self, *value: object) -> object:
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

    def run_batch(self, batch: object) -> None:
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
            if self.feed is not None:
                self.feed.detach()
            self.glet = None
            self.module = None
            self.own = None
            self.feed = None


# NOTE [Judged when the next step starts]
# Retention is bounded when a step's graph is alive as the next step's forward starts
# (NOTE [Alive when the next forward starts]): it raises the peak by one step's graph. A loop
# may drop what it kept between fetching the next batch and running it (pytorch_lightning
# 1.4.6 clears its `_results.minimize` in `on_train_split_start`, #9343; 1.4.5 keeps it until
# the next `training_step` returned), so the pause after a batch's bookkeeping (NOTE [Pausing
# Lightning]) is too early to judge training. So in `fit` the loop runs on to the next batch's
# `training_step` (an instance attribute of the module wraps it while the check runs, put
# back when the loop ends) and pauses as it starts, after every hook Lightning runs before
# it: the same moment `watch` looks at on a running job (the strategy's `training_step`).
# A module fed its own data (NOTE [A module's own data]) has its next batch at any time: the
# loop fetches it, and at the stop the batch whose `training_step` was paused runs (after the
# check). A module fed leakscope's micro-batches has its next batch only with the next step:
# the loop fetches an empty `_Pending` dict (moved to the device as a new `_Pending`, the
# object the step and `self.log` see), its `training_step` pauses as it starts, the first
# one included, and fills it with the micro-batch leakscope sends; at the stop it returns
# None (Lightning skips the batch) and runs nothing. Either way the next batch's start ends
# the epoch (NOTE [Prefetching loops]). Validation (forward-only) keeps nothing for a
# backward, so it is judged at the fetch (NOTE [Pausing Lightning]).


# NOTE [The trainer of a 1.x module]
# Findings name Lightning's own state from the module, as `engine._trainer.fit_loop...`: in
# Lightning 2 the module holds its trainer strongly in `_trainer`. pytorch_lightning 1.x gives
# the module a `weakref.proxy` of it (`module.trainer` before 1.7, `module._trainer` from 1.7),
# which the walk does not follow (a weak reference keeps nothing alive), so what Lightning 1.x
# itself keeps between batches (1.4's `ResultCollection._minimize`, the last step's loss) had
# no name. The user's script keeps the trainer; leakscope's stand-in for that script is the
# module: at the first batch the callback sets `module._trainer` to the trainer itself, and
# the run puts back what was there (nothing, or Lightning's proxy) when the loop ends.

__all__ = ["trainer_options"]
