"""Hand glue for `leakscope check` (which drives a LightningModule through the real Trainer): N-BEATS
built from the driver's TimeSeriesDataSet, with that data set's loader as the module's own data, so
that a constructor without arguments builds it and its step is fed batches it can read.

    PYTHONPATH=../.envs/pytorch-forecasting-step-outputs-1.4.0:../..:. leakscope check check_module:NBeatsWithData --mode train

(leakscope's Lightning adapter needs greenlet: `pip install greenlet` somewhere on that path.)
"""

import driver
from pytorch_forecasting import NBeats


class NBeatsWithData(NBeats):
    def __init__(self, **kwargs):
        loader = None
        if not kwargs:  # built by leakscope: the driver's model and data
            model, _, loader = driver.build(6)
            kwargs = dict(model.hparams)
        super().__init__(**kwargs)
        self._loader = loader

    def train_dataloader(self):
        return self._loader

    def val_dataloader(self):
        return self._loader
