"""Confirm without leakscope: a leaf probe on the first Linear (fresh leaf per forward) and
the autograd graph reachable from the MeanMetric's states (value, weight), measured before
every step."""
import argparse
import sys

import driver

from realbugs.common.probe import LeafProbe, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    series, nodes, pinned = [], [], []
    probe = {}
    orig_build = driver.build

    def build(steps):
        model, opt, data = orig_build(steps)
        probe["p"] = LeafProbe(model[0])
        return model, opt, data

    driver.build = build

    def on_step(k, metric):
        held = {name: getattr(metric, name) for name in metric._defaults}
        series.append(probe["p"].alive())
        nodes.append(graph_nodes(held))
        pinned.append(saved_bytes(held))

    driver.main(a.steps, on_step=on_step)
    return report("torchmetrics", series, {
        "graph nodes reachable from train_loss.value / train_loss.weight": nodes,
        "pinned by that graph (last sample)": pinned[-1]}, expect=a.expect, steps=a.steps)


if __name__ == "__main__":
    sys.exit(main())
