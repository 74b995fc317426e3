"""Hand glue for `leakscope check` (which drives a LightningModule through the real Trainer): the
driver's module with its own data, so that its step is fed (x, y) batches it can read.

    PYTHONPATH=../.envs/lightning-metric-forward-1.0.4:../..:. leakscope check check_module:LitWithData --mode train

(leakscope's Lightning adapter needs greenlet: `pip install greenlet` somewhere on that path.)
"""

import driver


class LitWithData(driver.LitRegressor):
    def train_dataloader(self):
        _, loader = driver.build(6)
        return loader
