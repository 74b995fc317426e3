"""Confirm without leakscope: a leaf probe on the GP model's forward input (fresh leaf per
grad-enabled model call) and the autograd graph reachable from the ExpMAStoppingCriterion's
`_prev_fvals` (the instance fit_gpytorch_mll_torch creates; found by wrapping its __init__),
measured from torch_minimize's per-step `callback` (called after each step)."""
import argparse
import sys
import weakref

import driver

from realbugs.common.probe import LeafProbe, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    from botorch.optim.stopping import ExpMAStoppingCriterion

    crit = []
    orig_init = ExpMAStoppingCriterion.__init__

    def init(self, *args, **kw):
        orig_init(self, *args, **kw)
        crit.append(weakref.ref(self))

    ExpMAStoppingCriterion.__init__ = init
    series, nodes, pinned = [], [], []
    probe = {}
    orig_build = driver.build

    def build():
        model, mll = orig_build()
        probe["p"] = LeafProbe(model, patch_forward=True)  # gpytorch bypasses nn.Module hooks
        return model, mll

    driver.build = build

    def callback(parameters, result):
        # called at the end of step k: the current step's graph is legitimately alive
        # (torch_minimize's local `fval`), so count leaves of steps < k
        p = probe["p"]
        series.append(p.alive(upto=len(p.refs) - 1))
        c = crit[-1]() if crit else None
        held = [getattr(c, "_prev_fvals", None)]
        nodes.append(graph_nodes(held))
        pinned.append(saved_bytes(held))

    driver.main(a.steps, callback=callback)
    series = series[1:]  # the first step has no earlier step
    return report("botorch", series, {
        "graph nodes reachable from ExpMAStoppingCriterion._prev_fvals": nodes,
        "pinned by that graph (last sample)": pinned[-1]}, expect=a.expect, steps=a.steps - 1)


if __name__ == "__main__":
    sys.exit(main())
