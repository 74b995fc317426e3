"""Confirm without leakscope: leaf probes on the first Linear of N-BEATS + node count of
model.training_step_outputs, measured at the start of every batch (Lightning callback)."""
import argparse
import sys

import driver
import torch

from realbugs.common.probe import LeafProbe, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()

    import lightning.pytorch as pl

    series, nodes, grad_fns, pinned = [], [], [], []

    class Measure(pl.Callback):
        def __init__(self):
            self.probe = None

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if self.probe is None:
                lin = next(m for m in module.modules() if isinstance(m, torch.nn.Linear))
                self.probe = LeafProbe(lin)
            elif batch_idx > 0:
                self.sample(module)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if batch_idx == a.steps - 1:  # after the last step, before on_train_epoch_end clears the list
                outputs = None  # noqa: F841  (drop our own reference)
                self.sample(module)

        def sample(self, module):
            held = module.training_step_outputs
            series.append(self.probe.alive(upto=len(self.probe.refs) - 0))
            nodes.append(graph_nodes(held))
            pinned.append(saved_bytes(held))
            grad_fns.append(sum(1 for d in held if getattr(d.get("loss"), "grad_fn", None) is not None))

    m = Measure()
    # measure "earlier steps" only: at batch start the current step has not run yet
    driver.main(a.steps, callbacks=[m])
    # at on_train_batch_end of the last step the last step's own loss is still legitimately
    # referenced by Lightning (outputs); subtract at most 1 for it
    series[-1] = max(0, series[-1] - 1)
    return report("pytorch-forecasting", series,
                  {"graph nodes reachable from model.training_step_outputs": nodes,
                   "entries of training_step_outputs whose 'loss' has grad_fn": grad_fns,
                   "pinned by that graph (last sample)": pinned[-1]},
                  expect=a.expect, steps=a.steps)


if __name__ == "__main__":
    sys.exit(main())
