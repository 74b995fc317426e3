"""Tiny PyTorch Lightning 1.4 job, the LightningModule of its README: training_step returns the
loss, Lightning runs backward and the optimizer step.

Per-batch step: the module's training_step, which Lightning 1.4 calls once per batch through
pytorch_lightning.plugins.training_type.training_type_plugin:TrainingTypePlugin.training_step. Lightning
1.4 keeps what it returns in the loop's results (``trainer._results.minimize``, the fit loop's
``epoch_loop._results``) for its own use after backward.
Works unchanged on pytorch-lightning 1.4.5 and 1.4.6.
"""
import argparse
import warnings

import pytorch_lightning as pl
import torch

warnings.filterwarnings("ignore")


class LitRegressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                       torch.nn.Tanh(), torch.nn.Linear(64, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def build(steps: int):
    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(32 * steps, 8), torch.randn(32 * steps, 1))
    return LitRegressor(), torch.utils.data.DataLoader(ds, batch_size=32)


def main(steps: int = 8, callbacks=()):
    model, loader = build(steps)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=steps, logger=False, checkpoint_callback=False,
                         progress_bar_refresh_rate=0, weights_summary=None, callbacks=list(callbacks))
    trainer.fit(model, loader)
    print("trained", trainer.global_step, "steps")
    return model, trainer


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    main(ap.parse_args().steps)
