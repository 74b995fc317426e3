"""Tiny pytorch-pfn-extras job: ExtensionsManager + LogReport, loss reported every iteration
with ppe.reporting.report (the usage shown in ppe's README/examples).

Per-iteration step: driver:train_step (called inside `with manager.run_iteration():`).
Works unchanged on pytorch-pfn-extras 0.2.1 and 0.4.0.
"""
import argparse
import tempfile

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.training.extensions as extensions
import torch


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    optimizer.step()
    ppe.reporting.report({"train/loss": loss})
    return loss.item()


def main(steps: int = 4, on_step=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(steps)]
    out_dir = tempfile.mkdtemp(prefix="ppe-")
    manager = ppe.training.ExtensionsManager(
        model, optimizer, 1, iters_per_epoch=steps, out_dir=out_dir,
        extensions=[extensions.LogReport(trigger=(1, "epoch"))])
    state = {"manager": manager, "model": model}
    for k, (x, y) in enumerate(data):
        if on_step and k:
            on_step(k, state)
        with manager.run_iteration():
            train_step(model, optimizer, x, y)
        if on_step and k == steps - 1 and not manager.stop_trigger:
            on_step(steps, state)
    print("log:", manager.get_extension("LogReport").log if hasattr(manager, "get_extension") else "")
    return state


if __name__ == "__main__":
    # The job runs from the module `driver` (this file imported once more), not from __main__,
    # so that `leakscope watch --method driver:...` can name its step by module.
    import driver

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    driver.main(ap.parse_args().steps)
