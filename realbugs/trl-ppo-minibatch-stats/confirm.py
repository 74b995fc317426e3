"""Confirm without leakscope: a leaf probe on the first GPT-2 block (fresh leaf per
grad-enabled forward: the no-grad old/ref log-prob passes get none) and, at the start of every
PPOTrainer.train_minibatch call, the autograd graph reachable from the stats dicts that the
earlier minibatches returned (PPOTrainer.step keeps them in its local list `all_stats`)."""
import argparse
import sys

import driver

from realbugs.common.probe import LeafProbe, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    from trl import PPOTrainer

    series, nodes, pinned, attached = [], [], [], []
    returned = []  # what earlier train_minibatch calls returned, as PPOTrainer.step keeps it
    probe = {}
    orig = PPOTrainer.train_minibatch

    def sample():
        series.append(probe["p"].alive())
        nodes.append(graph_nodes(returned))
        pinned.append(saved_bytes(returned))
        attached.append(sorted(k for d in returned[-1:] for k, v in d.items()
                               if getattr(v, "grad_fn", None) is not None))

    def train_minibatch(self, *args, **kw):
        if "p" not in probe:
            probe["p"] = LeafProbe(self.model.pretrained_model.transformer.h[0])
        elif returned:
            sample()
        out = orig(self, *args, **kw)
        returned.append(out)  # same objects step() appends to all_stats (no copy)
        return out

    PPOTrainer.train_minibatch = train_minibatch
    # the first minibatch's forward ran before our first call: create the probe early
    orig_bfp = PPOTrainer.batched_forward_pass

    def batched_forward_pass(self, *args, **kw):
        import torch
        if "p" not in probe and torch.is_grad_enabled():
            probe["p"] = LeafProbe(self.model.pretrained_model.transformer.h[0])
        return orig_bfp(self, *args, **kw)

    PPOTrainer.batched_forward_pass = batched_forward_pass
    driver.main(a.steps)
    # after step() returned, all_stats is gone; `returned` is our own copy of the references
    after = probe["p"].alive()
    returned.clear()
    after_drop = probe["p"].alive()
    return report("trl-ppo", series, {
        "graph nodes reachable from the earlier minibatches' stats (all_stats[:k])": nodes,
        "stats keys still attached in the last one": attached[-1] if attached else [],
        "pinned by that graph (last sample)": pinned[-1] if pinned else {},
        "probes alive after step() returned (our refs / none)": (after, after_drop)},
        expect=a.expect, steps=a.steps - 1)


if __name__ == "__main__":
    sys.exit(main())
