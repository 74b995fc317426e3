"""Tiny ignite job: a training process function that returns the loss tensor (as users wrote
it: `return loss`), with a RunningAverage of the output attached as the 'loss' metric (the
pattern of ignite's examples/docs of the 0.3 era: RunningAverage(output_transform=lambda x: x)).

Per-iteration step: driver:train_step (the Engine's process function; Engine calls it once
per batch).  Works unchanged on pytorch-ignite 0.3.0 and 0.4.0.post1.
"""
import argparse

import torch
from ignite.engine import Engine, Events
from ignite.metrics import RunningAverage

model = optimizer = None


def build(steps: int):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    data = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(steps)]
    return m, opt, data


def train_step(engine, batch):
    model.train()
    optimizer.zero_grad()
    x, y = batch
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def main(steps: int = 4, on_step=None):
    global model, optimizer
    model, optimizer, data = build(steps)
    trainer = Engine(train_step)
    RunningAverage(output_transform=lambda out: out).attach(trainer, "loss")

    @trainer.on(Events.ITERATION_COMPLETED)
    def log(engine):
        if engine.state.iteration == steps:
            print("iteration", engine.state.iteration, "running loss", float(engine.state.metrics["loss"]))

    if on_step:
        @trainer.on(Events.ITERATION_STARTED)
        def _start(engine):
            if engine.state.iteration > 1:
                on_step(engine.state.iteration - 1, engine)

        @trainer.on(Events.EPOCH_COMPLETED)
        def _end(engine):
            on_step(steps, engine)

    trainer.run(data, max_epochs=1)
    return trainer


if __name__ == "__main__":
    # The job runs from the module `driver` (this file imported once more), not from __main__,
    # so that `leakscope watch --method driver:...` can name its step by module.
    import driver

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    driver.main(ap.parse_args().steps)
