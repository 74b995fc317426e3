"""Tiny PyTorch Lightning 1.0 job using the (then new) pl.metrics API the way its docs
showed: a metric module called inside training_step and its batch value logged.

    self.train_mse = pl.metrics.MeanSquaredError()
    ...
    self.log('train_mse', self.train_mse(y_hat, y))

Per-batch step: driver:LitRegressor.training_step (Lightning calls it once per batch); the
metric step is pytorch_lightning.metrics.metric:Metric.forward.
Works unchanged on pytorch-lightning 1.0.4 and 1.0.5.
"""
import argparse
import warnings

import pytorch_lightning as pl
import torch

warnings.filterwarnings("ignore")


class LitRegressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.train_mse = pl.metrics.MeanSquaredError()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = torch.nn.functional.mse_loss(y_hat, y)
        self.log("train_mse", self.train_mse(y_hat, y))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def build(steps: int):
    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(16 * steps, 8), torch.randn(16 * steps, 1))
    loader = torch.utils.data.DataLoader(ds, batch_size=16)
    model = LitRegressor()
    return model, loader


def main(steps: int = 4, callbacks=()):
    model, loader = build(steps)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=steps, logger=False, checkpoint_callback=False,
                         progress_bar_refresh_rate=0, weights_summary=None, callbacks=list(callbacks))
    trainer.fit(model, loader)
    print("trained", trainer.global_step, "steps")
    return model, trainer


if __name__ == "__main__":
    # The job runs from the module `driver` (this file imported once more), not from __main__,
    # so that `leakscope watch --method driver:...` can name its step by module.
    import driver

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    driver.main(ap.parse_args().steps)
