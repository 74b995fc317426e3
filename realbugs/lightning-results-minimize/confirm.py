"""Confirm without leakscope, at the moment that separates the two releases: when the next step's
forward begins. A leaf probe on the first Linear (fresh leaf per forward); a forward pre-hook on
the LightningModule itself (it runs before the probe's, on the module's own forward that
training_step calls) counts the probe leaves of earlier steps still alive and walks the graph
reachable from the loop's results, ``trainer._results.minimize`` (the fit loop's
``epoch_loop._results``), and from every live tensor (whoever holds it). The previous step's graph alive at that moment raises the peak by one
step's graph: bounded retention (``leak`` here, kind bounded); dead: ``clean``."""
import argparse
import sys

import driver

from realbugs.common.probe import (
    LeafProbe,
    bounded_verdict,
    graph_nodes,
    live_graph_nodes,
    saved_bytes,
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    import pytorch_lightning as pl

    series, nodes, pinned, live = [], [], [], []
    state = {}

    def at_forward(module, args):
        if "probe" in state and state["probe"].refs:  # from the second step on
            results = state["trainer"]._results
            held = results.minimize if results is not None else None
            series.append(state["probe"].alive())
            nodes.append(graph_nodes(held))
            pinned.append(saved_bytes(held))
            live.append(live_graph_nodes())

    class Setup(pl.Callback):
        def on_train_start(self, trainer, module):
            state["trainer"] = trainer
            state["probe"] = LeafProbe(module.net[0])
            module.register_forward_pre_hook(at_forward)

    driver.main(a.steps, callbacks=[Setup()])
    observed, kind = bounded_verdict(series)
    print(f"[lightning-minimize] probe leaves of earlier steps alive when the next step's forward begins: {series}")
    print(f"[lightning-minimize] graph nodes reachable from trainer._results.minimize then: {nodes}")
    print(f"[lightning-minimize] graph nodes reachable from every live tensor then: {live}")
    print(f"[lightning-minimize] pinned by that graph (last sample): {pinned[-1]}")
    print(f"[lightning-minimize] kind: {kind}")
    print(f"[lightning-minimize] observed: {observed}" + (f"  (expected: {a.expect})" if a.expect else ""))
    return 0 if a.expect is None or observed == a.expect else 1


if __name__ == "__main__":
    sys.exit(main())
