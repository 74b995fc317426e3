"""Tiny pytorch-forecasting job: N-BEATS on a synthetic series, trained with Lightning.

The per-batch step is pytorch_forecasting.models.base._base_model:BaseModel.training_step
(Lightning calls it once per batch).  Works unchanged on pytorch-forecasting 1.4.0 and 1.5.0.
"""
import argparse
import warnings

import numpy as np
import pandas as pd
import torch

warnings.filterwarnings("ignore")


def build(steps: int):
    import lightning.pytorch as pl
    from pytorch_forecasting import NBeats, TimeSeriesDataSet

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n = 40 + 8 * steps
    data = pd.DataFrame({
        "time_idx": np.tile(np.arange(n), 2),
        "series": np.repeat(["a", "b"], n),
        "value": rng.standard_normal(2 * n).cumsum().astype("float32"),
    })
    ds = TimeSeriesDataSet(
        data, time_idx="time_idx", target="value", group_ids=["series"],
        max_encoder_length=8, max_prediction_length=4,
        time_varying_unknown_reals=["value"],
    )
    dl = ds.to_dataloader(train=True, batch_size=4, num_workers=0)
    model = NBeats.from_dataset(ds, widths=[16, 16], learning_rate=1e-3, log_interval=-1)
    trainer = pl.Trainer(
        max_epochs=1, limit_train_batches=steps, accelerator="cpu", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    return model, trainer, dl


def main(steps: int = 4, callbacks=()):
    model, trainer, dl = build(steps)
    for cb in callbacks:
        trainer.callbacks.append(cb)
    trainer.fit(model, train_dataloaders=dl)
    print(f"trained {trainer.global_step} steps")
    return model, trainer


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    main(ap.parse_args().steps)
