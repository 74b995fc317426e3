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
  bookkeeping, before the next batch is fetched (NOTE [Pausing Lightning]),
  so leakscope observes between batches *inside one epoch*: per-epoch holders
  (``self.training_step_outputs.append(loss)``) are seen growing.
- **forward-only**: the real validation loop (``Trainer.validate``, paused the
  same way), one batch per micro-batch.

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
import logging
import warnings
from collections.abc import Iterator
from typing import Any

from leakscope.errors import EngineError, UsageError
from leakscope.harness.target import ResolvedTarget
from leakscope.probe import safe

#: where ``LightningModule`` lives, by package: the classic and the unified install
MODULE_CLASSES = {
    "pytorch_lightning.core.module": "pytorch_lightning",
    "pytorch_lightning.core.lightning": "pytorch_lightning",  # pytorch_lightning before 1.7
    "lightning.pytorch.core.module": "lightning.pytorch",
}
#: names of a constructor's first argument that takes the network (NOTE [Building a LightningModule])
NETWORK_NAMES = ("net", "model", "network", "module", "backbone", "encoder", "policy")
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


def lightning_package(cls: Any) -> str | None:
    """``"pytorch_lightning"`` or ``"lightning.pytorch"`` when ``cls`` derives from its
    ``LightningModule`` (by name: no import of Lightning); None otherwise."""
    for klass in safe.mro(cls) if safe.is_instance(cls, type) else ():
        if safe.type_name(klass) == "LightningModule":
            package = MODULE_CLASSES.get(safe.type_module(klass))
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

    def _step_starts(self, step: Any) -> Any:
        """``step`` (the module's bound ``training_step``), paused when a later batch's first call
        starts (NOTE [Judged when the next step starts])."""
        feed = self

        def training_step(*args: Any, **kwargs: Any) -> Any:
            if feed.started != feed.stepped:
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


def _first(parameters: set[str], *choices: tuple[str, Any]) -> dict[str, Any]:
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
    options: dict[str, Any] = {
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


def _callback(package: str, feed: _Feed) -> Any:
    """A Lightning ``Callback`` that tells the feed when a batch starts (NOTE [Prefetching loops])."""
    import importlib

    base = importlib.import_module(package).Callback

    # `*rest`: pytorch_lightning 1.x passes `dataloader_idx` to every batch hook; Lightning 2 refuses
    # a callback whose on_train_batch_start names it.
    def on_batch_start(
        self: Any, trainer: Any, module: Any, batch: Any, batch_idx: Any, *rest: Any
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

    def __init__(self, module: Any, package: str, stage: str, own: Any = None) -> None:
        import greenlet

        self.module: Any = module
        self.package = package
        self.stage = stage
        self.batches = 0
        self.ended = False
        self.own = own
        self.feed: _Feed | None = None
        self.glet: Any = greenlet.greenlet(self._main)

    def _main(self) -> Any:
        import importlib

        import torch

        trainer_cls = importlib.import_module(self.package).Trainer
        feed = self.feed = _Feed(self.own, at_step=self.stage == "fit" and self.own is not None)
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
# Lightning]) is too early to judge training. A module fed its own data (NOTE [A module's own
# data]) has its next batch at any time, so in `fit` the loop runs on to the next batch's
# `training_step` (an instance attribute of the module wraps it while the check runs, put
# back when the loop ends) and pauses as it starts, after every hook Lightning runs before
# it: the same moment `watch` looks at on a running job (the strategy's `training_step`). A
# module fed leakscope's micro-batches is paused at the fetch: its next batch is only handed
# in with the next step. At the stop, the batch whose `training_step` was paused runs (after
# the check) and the next batch's start ends the epoch (NOTE [Prefetching loops]).


# NOTE [The trainer of a 1.x module]
# Findings name Lightning's own state from the module, as `engine._trainer.fit_loop...`: in
# Lightning 2 the module holds its trainer strongly in `_trainer`. pytorch_lightning 1.x gives
# the module a `weakref.proxy` of it (`module.trainer` before 1.7, `module._trainer` from 1.7),
# which the walk does not follow (a weak reference keeps nothing alive), so what Lightning 1.x
# itself keeps between batches (1.4's `ResultCollection._minimize`, the last step's loss) had
# no name. The user's script keeps the trainer; leakscope's stand-in for that script is the
# module: at the first batch the callback sets `module._trainer` to the trainer itself, and
# the run puts back what was there (nothing, or Lightning's proxy) when the loop ends.


# NOTE [Building a LightningModule]
# A module is built from its own constructor. When its first argument takes a network (annotated
# as a Module, or named net/model/network/module/backbone/encoder/policy), it gets leakscope's
# tiny network and leakscope's micro-batches, as lightning-hydra-template's `LitModule(net)`.
# A module built for a data set (a `from_dataset(dataset)` classmethod, as every
# pytorch-forecasting model has: the data set fixes its inputs, targets and normalisers) and
# defining no data loader of its own is built by that classmethod from a data set leakscope
# makes, when it knows how (DATASETS), and fed that data set's loaders; otherwise one line asks
# for a factory. Any other argument must have a default: hyperparameters (`hidden=64,
# lr=1e-3`, what `save_hyperparameters()` records) are taken at their defaults, so the module
# builds its own network and is fed its own data (NOTE [A module's own data]). A required
# argument without a default cannot be guessed: that is one line asking for `--factory`.

# NOTE [A module's own data]
# A module on its own network reads batches of its own format (`x, y = batch`), never leakscope's
# token batches, so it is fed, first found: its own `train_dataloader()` / `val_dataloader()`
# (defined by its class, or set on the instance; called by the loop's own set-up, after
# `setup()`), the loaders of the data set it was built from (`dataset.to_dataloader(train=...)`
# where the data set has one, else a torch DataLoader), its `example_input_array` as the batch;
# else leakscope's micro-batch. A `--factory` may return the module alone (built on leakscope's
# network, the `net` it was given, it gets the micro-batches; on its own network, its own data
# as above) or `(module, data)`, where data is a LightningDataModule, a data loader or any
# iterable of batches: the data the user's script trains it on. A factory's module built for a
# data set leakscope cannot see (a pytorch-forecasting model built from the user's own data set)
# and returned alone, without data hooks, is fed a data set remade from what it recorded of its
# own: `from_dataset` stores the data set's parameters (`dataset_parameters`: the columns, the
# fitted encoders and normalisers, the window lengths), and the data set class's
# `from_parameters` builds the same kind of data set on a frame leakscope makes with those columns
# (each categorical at a category its encoder knows). The loader is iterated again from the start
# when it runs out.

#: rows of each batch of a data set leakscope makes (NOTE [Building a LightningModule])
BATCH_ROWS = 4


def _time_series_data_set(dataset_cls: Any) -> Any:
    """pytorch-forecasting's ``TimeSeriesDataSet``: two random-walk series of 64 steps, ``value`` the
    target and their one time-varying unknown real, 8 steps of context and 4 to predict (as the
    library's own examples build one for N-BEATS, DeepAR and the like)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    steps = 64
    data = pd.DataFrame(
        {
            "time_idx": np.tile(np.arange(steps), 2),
            "series": np.repeat(["a", "b"], steps),
            "value": rng.standard_normal(2 * steps).cumsum().astype("float32"),
        }
    )
    return dataset_cls(
        data,
        time_idx="time_idx",
        target="value",
        group_ids=["series"],
        max_encoder_length=8,
        max_prediction_length=4,
        time_varying_unknown_reals=["value"],
    )


#: data sets leakscope can make for a ``from_dataset`` classmethod, by ``(top-level package, class
#: name)`` of the data set class or a base of it, with what each makes (for the error lines)
DATASETS: dict[tuple[str, str], tuple[Any, str]] = {
    ("pytorch_forecasting", "TimeSeriesDataSet"): (
        _time_series_data_set,
        "two random-walk series, 'value' their target and one time-varying unknown real",
    ),
}


def _recorded_frame(parameters: dict[str, Any]) -> Any:
    """A frame with the columns a pytorch-forecasting data set's ``parameters`` name: each group id
    and categorical at a category its fitted encoder knows, every real and target a random walk,
    enough time steps per group for a few windows."""
    import numpy as np
    import pandas as pd

    def names(key: str) -> list[str]:
        value = parameters.get(key) or []
        return [value] if isinstance(value, str) else list(value)

    encoders = parameters.get("categorical_encoders") or {}
    steps = int(parameters["max_encoder_length"]) + int(parameters["max_prediction_length"]) + 16
    rng = np.random.default_rng(0)
    columns: dict[str, Any] = {parameters["time_idx"]: np.tile(np.arange(steps), 2)}
    categoricals = [
        *names("group_ids"),
        *names("static_categoricals"),
        *names("time_varying_known_categoricals"),
        *names("time_varying_unknown_categoricals"),
    ]
    for name in categoricals:
        known = list(getattr(encoders.get(name), "classes_", {}) or ["a", "b"])
        columns[name] = np.repeat([str(known[0]), str(known[-1])], steps)
    reals = [
        *names("target"),
        *names("static_reals"),
        *names("time_varying_known_reals"),
        *names("time_varying_unknown_reals"),
    ]
    for name in reals:
        if name not in columns:
            columns[name] = rng.standard_normal(2 * steps).cumsum().astype("float32")
    frame = pd.DataFrame(columns)
    if len(set(columns[names("group_ids")[0]])) == 1:  # one known group: two series of it in a row
        frame[parameters["time_idx"]] = np.arange(2 * steps)
    return frame


def recorded_dataset(module: Any) -> Any:
    """The data set a module built by ``from_dataset`` describes (NOTE [A module's own data]): the
    data set class's ``from_parameters`` on a frame leakscope makes from the parameters the module
    recorded (pytorch-forecasting's ``dataset_parameters``), or an EngineError naming the fix."""
    cls = type(module).__qualname__
    fix = f"make the factory return ({cls}.from_dataset(your_dataset), your_dataloader)"
    found = dataset_parameter(type(module))
    annotation = found[1] if found is not None else None
    parameters = vars(module).get("dataset_parameters")
    from_parameters = getattr(annotation, "from_parameters", None)
    if not isinstance(parameters, dict) or not callable(from_parameters):
        raise EngineError(
            f"the factory's {cls} is built for a data set that leakscope cannot see, and has no data "
            f"loader of its own nor the data set's parameters (dataset_parameters); {fix}"
        )
    try:
        return from_parameters(parameters, _recorded_frame(parameters))
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise EngineError(
            f"the factory's {cls} is built for a data set that leakscope cannot see; remaking it from the "
            f"{cls}.dataset_parameters it recorded raised {type(exc).__name__}: {text[0] if text else '(no message)'}; "
            f"{fix}"
        ) from exc


def build_module(cls: Any, model: Any) -> tuple[Any, bool]:
    """``(module, whether it runs on leakscope's network and micro-batches)`` (NOTE [Building a LightningModule])."""
    import inspect

    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return cls(model), True
    parameters = [
        p
        for p in list(signature.parameters.values())[1:]
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    network = parameters[0] if parameters and _takes_network(parameters[0]) else None
    required = [p.name for p in parameters if p.default is p.empty and p is not network]
    if required:
        raise EngineError(
            f"{cls.__qualname__}.__init__ needs {', '.join(required)} (no default), which leakscope cannot choose "
            "(it builds a LightningModule from its constructor's defaults, its first argument from leakscope's "
            "network when that argument takes the network); build it with --factory pkg.mod:make_module "
            "(a function make_module(net) that returns the module, or (module, its data loader))"
        )
    if network is None:
        return cls(), False
    if network.kind is network.KEYWORD_ONLY:
        return cls(**{network.name: model}), True
    return cls(model), True


def _takes_network(parameter: Any) -> bool:
    if parameter.kind is parameter.VAR_POSITIONAL:
        return False
    if parameter.default is not parameter.empty and parameter.default is not None:
        return False
    annotation = parameter.annotation
    text = (
        annotation
        if isinstance(annotation, str)
        else getattr(annotation, "__name__", "") or str(annotation)
    )
    if annotation is not parameter.empty and "Module" in text:
        return True
    name = parameter.name.lower()
    return name in NETWORK_NAMES or name.endswith("_net") or name.endswith("_model")


def _first_parameter(function: Any) -> Any:
    """The first parameter of ``function`` a caller passes (after ``self``/``cls`` of a bound one), or None."""
    import inspect

    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    return (
        parameters[0]
        if parameters and parameters[0].kind is not parameters[0].VAR_KEYWORD
        else None
    )


def dataset_parameter(cls: Any) -> tuple[str, Any] | None:
    """``(name, data set class or its annotation text)`` when ``cls`` is built for a data set: a
    ``from_dataset(dataset, ...)`` classmethod (pytorch-forecasting's models); else None."""
    import inspect

    factory = inspect.getattr_static(cls, "from_dataset", None)
    if not isinstance(factory, classmethod):
        return None
    first = _first_parameter(cls.from_dataset)
    if first is None or first.kind is first.VAR_POSITIONAL:
        return None
    annotation = first.annotation
    if isinstance(annotation, str):  # postponed annotations: the name in the function's globals
        annotation = getattr(factory.__func__, "__globals__", {}).get(annotation, annotation)
    return first.name, (None if annotation is first.empty else annotation)


def _dataset_recipe(annotation: Any) -> tuple[Any, str] | None:
    """The :data:`DATASETS` entry for a data set class (or a subclass of one), or None."""
    for klass in getattr(annotation, "__mro__", ()) if isinstance(annotation, type) else ():
        key = ((getattr(klass, "__module__", "") or "").partition(".")[0], klass.__name__)
        if key in DATASETS:
            return DATASETS[key]
    return None


def build_from_dataset(cls: Any) -> tuple[Any, Any] | None:
    """``(module, data set)`` for a module built for a data set (NOTE [Building a LightningModule]):
    ``cls.from_dataset(dataset)`` on a data set leakscope makes; None for any other module."""
    found = dataset_parameter(cls)
    if found is None:
        return None
    name, annotation = found
    spelled = (
        annotation
        if isinstance(annotation, str)
        else getattr(annotation, "__qualname__", None) or "a data set"
    )
    recipe = _dataset_recipe(annotation)
    fix = (
        f"build it with --factory pkg.mod:make_module, a function make_module(net) that returns "
        f"({cls.__qualname__}.from_dataset(your_dataset), your_dataloader)"
    )
    if recipe is None:
        raise EngineError(
            f"{cls.__qualname__} is built for a data set ({cls.__qualname__}.from_dataset({name}: {spelled})), "
            f"which leakscope cannot make; {fix}"
        )
    make, what = recipe
    try:
        dataset = make(annotation)
        module = cls.from_dataset(dataset)
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise EngineError(
            f"{cls.__qualname__}.from_dataset on leakscope's {spelled} ({what}) raised {type(exc).__name__}: "
            f"{text[0] if text else '(no message)'}; {fix}"
        ) from exc
    return module, dataset


def _dataset_loader(dataset: Any, stage: str) -> Any:
    """A data loader over ``dataset`` (NOTE [A module's own data]): its own ``to_dataloader`` when it
    has one (pytorch-forecasting's collates its batches), else a torch DataLoader."""
    to_dataloader = getattr(dataset, "to_dataloader", None)
    if callable(to_dataloader) and "train" in _parameters(to_dataloader):
        return to_dataloader(train=stage == "fit", batch_size=BATCH_ROWS, num_workers=0)
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=BATCH_ROWS)


def _given_loader(data: Any, stage: str) -> Any:
    """The loader of the data a factory returned with its module: a LightningDataModule's own
    (prepared and set up as the loop would), or the data itself (a loader or any iterable)."""
    hook = "train_dataloader" if stage == "fit" else "val_dataloader"
    own = getattr(data, hook, None)
    if callable(own) and callable(getattr(data, "setup", None)):
        prepare = getattr(data, "prepare_data", None)
        if callable(prepare):
            prepare()
        data.setup(stage)
        return own()
    return data


def own_data(module: Any, stage: str) -> Any:
    """What the module's step is fed instead of leakscope's batch: its own data loader method
    (a bound method, called by the loop's set-up), its ``example_input_array``, or None."""
    hook = "train_dataloader" if stage == "fit" else "val_dataloader"
    given = vars(module).get(hook)
    if callable(given):
        return given
    if not _is_default(type(module), hook):
        return getattr(module, hook)
    example = getattr(module, "example_input_array", None)
    if example is not None:
        return lambda: [example]
    return None


class _Data:
    """Where one module's batches come from (NOTE [A module's own data]): its own data hooks, or
    a data set / data the adapter holds for it. Holds no module."""

    def __init__(self, dataset: Any = None, given: Any = None) -> None:
        self.dataset = dataset
        self.given = given

    def loader(self, module: Any, stage: str) -> Any:
        """A zero-argument callable that returns the loader for ``stage``, or None (leakscope's batches)."""
        own = own_data(module, stage)
        if self.given is not None:
            given = self.given
            return lambda: _given_loader(given, stage)
        if own is not None:
            return own
        if self.dataset is None:
            if dataset_parameter(type(module)) is not None:
                self.dataset = recorded_dataset(module)
            if self.dataset is None:
                return None
        dataset = self.dataset
        return lambda: _dataset_loader(dataset, stage)


def _holds(module: Any, network: Any) -> bool:
    """True when ``network`` (leakscope's) is one of the module's submodules."""
    modules = getattr(module, "modules", None)
    return callable(modules) and any(sub is network for sub in modules())


def own_step(cls: Any, hook: str = "training_step") -> str | None:
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

    def build_engine(self, resolved: ResolvedTarget, model: Any) -> Any:
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

    def adopt(self, built: Any, model: Any) -> Any:
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

    def close(self, engine: Any) -> None:
        """End the module's paused loop (the epoch ends normally) and forget it."""
        run = self._runs.pop(id(engine), None)
        if run is not None:
            run.finish()
        self._data.pop(id(engine), None)


def _network_first(cls: Any) -> bool:
    """True when the constructor's first argument takes the network (NOTE [Building a LightningModule])."""
    import inspect

    try:
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    parameters = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return bool(parameters) and _takes_network(parameters[0])


def _defines_data(cls: Any) -> bool:
    """True when the class defines its own ``train_dataloader()`` (NOTE [A module's own data])."""
    return not _is_default(cls, "train_dataloader")


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


def _is_lightning_class(klass: type) -> bool:
    """True for a class of Lightning's own packages (``LightningModule``, 1.x's hook mix-ins such as ``DataHooks``)."""
    name = safe.type_module(klass)
    return name in MODULE_CLASSES or name.startswith(("pytorch_lightning.", "lightning.pytorch."))


def _is_default(cls: type, hook: str) -> bool:
    """True when ``hook`` is Lightning's own (not overridden by the class ``cls`` or a base of it
    outside Lightning's packages)."""
    for klass in safe.mro(cls):
        if hook in safe.class_dict(klass):
            return _is_lightning_class(klass)
    return True


ADAPTER = LightningAdapter()

__all__ = ["ADAPTER", "LightningAdapter", "lightning_package"]
