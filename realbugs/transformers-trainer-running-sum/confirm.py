"""Confirm without leakscope: a leaf probe on the first GPT-2 block (fresh leaf per forward) and
the autograd graph reachable from Trainer.train's running sum ``tr_loss`` (read from train's
frame, the caller of training_step), measured at the start of every training_step (from a
Trainer subclass, as the Trainer's docs suggest for custom behaviour)."""
import argparse
import sys

import driver

from realbugs.common.probe import LeafProbe, graph_nodes, report, saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--expect", choices=["leak", "clean"])
    a = ap.parse_args()
    from transformers import Trainer

    series, nodes, pinned = [], [], []
    probe = {}

    def sample(tr_loss):
        series.append(probe["p"].alive())
        nodes.append(graph_nodes(tr_loss))
        pinned.append(saved_bytes(tr_loss))

    class Measured(Trainer):
        def training_step(self, model, inputs):
            if "p" not in probe:
                probe["p"] = LeafProbe(model.transformer.h[0])
            else:
                sample(sys._getframe(1).f_locals["tr_loss"])
            return super().training_step(model, inputs)

    trainer = driver.main(a.steps, trainer_class=Measured)
    # tr_loss is a local of train(): the chain lives as long as training does, and dies with it
    after = probe["p"].alive()
    return report("transformers-trainer", series, {
        "graph nodes reachable from Trainer.train's tr_loss, per step": nodes,
        "pinned by that graph (last sample)": pinned[-1],
        "probe leaves alive once train() has returned": after,
        "global step": trainer.global_step}, expect=a.expect, steps=a.steps)


if __name__ == "__main__":
    sys.exit(main())
