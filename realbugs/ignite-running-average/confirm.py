"""Confirm without leakscope: a leaf probe on the first Linear (fresh leaf per forward) and
the autograd graph reachable from engine.state.metrics['loss'] and from the RunningAverage
object, measured at the start of every iteration (ITERATION_STARTED handler)."""
import argparse
import sys

import driver

from realbugs.common.probe import LeafProbe, attr_tensors, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    series, nodes, pinned, ra_nodes = [], [], [], []
    probe = {}
    orig_build = driver.build

    def build(steps):
        model, opt, data = orig_build(steps)
        probe["p"] = LeafProbe(model[0])
        return model, opt, data

    driver.build = build

    def on_step(k, engine):
        from ignite.metrics import RunningAverage
        ras = [h.__self__ for hs in engine._event_handlers.values() for (h, _, _) in hs
               if isinstance(getattr(h, "__self__", None), RunningAverage)]
        # engine.state.output is the current batch's loss (ignite keeps the last output): drop it
        engine.state.output = None
        series.append(probe["p"].alive())
        nodes.append(graph_nodes([engine.state.metrics.get("loss")]))
        held = attr_tensors(ras[0]) if ras else []
        ra_nodes.append(graph_nodes(held))
        pinned.append(saved_bytes(held))

    driver.main(a.steps, on_step=on_step)
    return report("ignite", series, {
        "graph nodes reachable from engine.state.metrics['loss'] (a float here)": nodes,
        "graph nodes reachable from the RunningAverage (_value, src), found via engine._event_handlers": ra_nodes,
        "pinned by that graph (last sample)": pinned[-1]}, expect=a.expect, steps=a.steps)


if __name__ == "__main__":
    sys.exit(main())
