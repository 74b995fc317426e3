"""Confirm without leakscope: a leaf probe on the model's first Linear (one fresh leaf per
forward) and the autograd graph reachable from LogReport's running Summary, measured at the
start of every iteration."""
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

    orig = driver.train_step

    def train_step(model, *args):
        if "p" not in probe:
            probe["p"] = LeafProbe(model[0])
        return orig(model, *args)

    driver.train_step = train_step

    def on_step(k, state):
        lr = [e for e in state["manager"]._extensions.values() if type(e.extension).__name__ == "LogReport"][0].extension
        holder = {n: (s._x, s._x2) for n, s in lr._summary._summaries.items()}
        series.append(probe["p"].alive())
        nodes.append(graph_nodes(holder))
        pinned.append(saved_bytes(holder))

    driver.main(a.steps, on_step=on_step)
    return report("ppe", series, {
        "graph nodes reachable from LogReport._summary._summaries['train/loss']._x/_x2": nodes,
        "pinned by that graph (last sample)": pinned[-1]}, expect=a.expect, steps=a.steps)


if __name__ == "__main__":
    sys.exit(main())
