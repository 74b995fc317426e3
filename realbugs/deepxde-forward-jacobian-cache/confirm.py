"""Confirm without leakscope: a leaf probe on the FNN's first Linear (fresh leaf per grad-
enabled forward) and the size of DeepXDE's module-level Jacobian cache
(deepxde.gradients.gradients_forward.jacobian._Jacobians.Js) with the autograd graph
reachable from it, measured at the start of every iteration (dde.callbacks.Callback)."""
import argparse
import sys

import deepxde as dde
import driver
import torch
from deepxde.gradients import gradients_forward

from realbugs.common.probe import LeafProbe, attr_tensors, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    series, sizes, nodes, pinned = [], [], [], []
    probe = {}

    class Measure(dde.callbacks.Callback):
        def on_epoch_begin(self):
            if "p" not in probe:
                lin = next(m for m in self.model.net.modules() if isinstance(m, torch.nn.Linear))
                probe["p"] = LeafProbe(lin)
            else:
                self.sample()

        def on_train_end(self):
            self.sample()

        def sample(self):
            cache = gradients_forward.jacobian._Jacobians.Js
            held = attr_tensors(cache, depth=4)
            series.append(probe["p"].alive())
            sizes.append(len(cache))
            nodes.append(graph_nodes(held))
            pinned.append(saved_bytes(held))

    driver.main(a.steps, callbacks=[Measure()])
    return report("deepxde", series, {
        "len(deepxde.gradients.gradients_forward.jacobian._Jacobians.Js)": sizes,
        "graph nodes reachable from that module-level cache": nodes,
        "pinned by that graph (last sample)": pinned[-1]}, expect=a.expect, steps=a.steps)


if __name__ == "__main__":
    sys.exit(main())
