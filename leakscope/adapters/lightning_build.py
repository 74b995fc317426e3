"""Building a ``LightningModule`` and its data for the Lightning adapter: the module from its
constructor or its ``from_dataset`` (including the pytorch-forecasting recipe), and the data a
module on its own network is fed (NOTE [Building a LightningModule], NOTE [A module's own data]).

Recognising Lightning's own classes and hooks (by name: no import of Lightning) is here too, as
the adapter and the builder both ask it.
"""

from __future__ import annotations

from typing import Any

from leakscope.adapters.lightning_loop import _parameters
from leakscope.errors import EngineError
from leakscope.probe import safe

MODULE_CLASSES = {
    "pytorch_lightning.core.module": "pytorch_lightning",
    "pytorch_lightning.core.lightning": "pytorch_lightning",  # pytorch_lightning before 1.7
    "lightning.pytorch.core.module": "lightning.pytorch",
}
#: names of a constructor's first argument that takes the network (NOTE [Building a LightningModule])
NETWORK_NAMES = ("net", "model", "network", "module", "backbone", "encoder", "policy")


def lightning_package(cls: Any) -> str | None:
    """``"pytorch_lightning"`` or ``"lightning.pytorch"`` when ``cls`` derives from its
    ``LightningModule`` (by name: no import of Lightning); None otherwise."""
    for klass in safe.mro(cls) if safe.is_instance(cls, type) else ():
        if safe.type_name(klass) == "LightningModule":
            package = MODULE_CLASSES.get(safe.type_module(klass))
            if package is not None:
                return package
    return None


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


def recorded_dataset(module: object) -> Any:
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


def _dataset_recipe(annotation: object) -> tuple[Any, str] | None:
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


def own_data(module: object, stage: str) -> Any:
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

    def __init__(self, dataset: object = None, given: object = None) -> None:
        self.dataset = dataset
        self.given = given

    def loader(self, module: object, stage: str) -> Any:
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


def _holds(module: object, network: object) -> bool:
    """True when ``network`` (leakscope's) is one of the module's submodules."""
    modules = getattr(module, "modules", None)
    return callable(modules) and any(sub is network for sub in modules())


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


__all__ = [
    "BATCH_ROWS",
    "DATASETS",
    "build_from_dataset",
    "build_module",
    "dataset_parameter",
    "lightning_package",
    "own_data",
    "recorded_dataset",
]
