"""Tiny plain-PyTorch loop that tracks the epoch's mean training loss with
torchmetrics.MeanMetric, feeding it the loss tensor through `update` (as in issue #890).

Per-batch step: driver:train_step (it calls torchmetrics.aggregation:MeanMetric.update).
Works unchanged on torchmetrics 0.7.2 and 0.7.3.
"""
import argparse

import torch
from torchmetrics import MeanMetric


def build(steps: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(steps)]
    return model, optimizer, data


def train_step(model, optimizer, train_loss, x, y):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    train_loss.update(loss)


def main(steps: int = 4, on_step=None):
    model, optimizer, data = build(steps)
    train_loss = MeanMetric()
    for k, (x, y) in enumerate(data):
        if on_step and k:
            on_step(k, train_loss)
        train_step(model, optimizer, train_loss, x, y)
    if on_step:
        on_step(steps, train_loss)
    print("mean train loss:", float(train_loss.compute()))
    train_loss.reset()
    return train_loss


if __name__ == "__main__":
    # The job runs from the module `driver` (this file imported once more), not from __main__,
    # so that `leakscope watch --method driver:...` can name its step by module.
    import driver

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    driver.main(ap.parse_args().steps)
