"""`leakscope check` with the user's own data: what a user who builds N-BEATS from their own data set
gives `--factory` (`leakscope check pytorch_forecasting.models.nbeats:NBeats` needs neither: it builds
the model with `NBeats.from_dataset` on a data set of its own and feeds it that data set's batches).

    PYTHONPATH=../.envs/pytorch-forecasting-step-outputs-1.4.0:../..:. \\
        leakscope check pytorch_forecasting.models.nbeats:NBeats --factory check_module:make_module

- `make_module(net)`: the driver's model and its loader, as `(module, loader)`;
- `make_with_datamodule(net)`: the driver's model and a LightningDataModule serving its loader;
- `make_with_data(net)`: `NBeatsWithData`, a subclass that returns the driver's loader from its own
  `train_dataloader()` / `val_dataloader()` (the module alone: its own data hooks feed it);
- `make_without_data(net)`: the driver's model alone (its data set out of leakscope's sight: it is fed
  a data set remade from the `dataset_parameters` that `from_dataset` recorded on it).

`net` (leakscope's network) is not used: N-BEATS builds its own network for its data set.
"""

import driver
from lightning.pytorch import LightningDataModule
from pytorch_forecasting import NBeats


def make_module(net):
    model, _, loader = driver.build(6)
    return model, loader


class ForecastData(LightningDataModule):
    def setup(self, stage):
        _, _, self.loader = driver.build(6)

    def train_dataloader(self):
        return self.loader

    def val_dataloader(self):
        return self.loader


def make_with_datamodule(net):
    model, _, _ = driver.build(6)
    return model, ForecastData()


class NBeatsWithData(NBeats):
    def __init__(self, **kwargs):
        loader = None
        if not kwargs:  # built with no arguments: the driver's model and data
            model, _, loader = driver.build(6)
            kwargs = dict(model.hparams)
        super().__init__(**kwargs)
        self._loader = loader

    def train_dataloader(self):
        return self._loader

    def val_dataloader(self):
        return self._loader


def make_with_data(net):
    return NBeatsWithData()


def make_without_data(net):
    model, _, _ = driver.build(6)
    return model
