"""Confirm without leakscope: a leaf probe on the first Linear (fresh leaf per forward) and
the autograd graph reachable from the metric's states (model.train_mse.sum_squared_error,
.total), measured at the start of every batch (Lightning callback)."""
import argparse
import sys

import driver

from realbugs.common.probe import LeafProbe, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    import pytorch_lightning as pl
    series, nodes, pinned = [], [], []
    probe = {}

    class Measure(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx, *rest):
            if "p" not in probe:
                probe["p"] = LeafProbe(module.net[0])
            else:
                self.sample(module)

        def on_train_end(self, trainer, module):
            self.sample(module)

        def sample(self, module):
            held = {k: getattr(module.train_mse, k) for k in module.train_mse._defaults}
            series.append(probe["p"].alive())
            nodes.append(graph_nodes(held))
            pinned.append(saved_bytes(held))

    driver.main(a.steps, callbacks=[Measure()])
    return report("lightning-metric", series, {
        "graph nodes reachable from model.train_mse.sum_squared_error/.total": nodes,
        "pinned by that graph (last sample)": pinned[-1]}, expect=a.expect, steps=a.steps)


if __name__ == "__main__":
    sys.exit(main())
