"""Measure what an engine really retains, independently of leakscope: resident memory freed
when what the caller and the engine hold is detached (what the fix saves).

Usage: python measure_retention.py TARGET SEQ HIDDEN VOCAB LAYERS MICRO_BATCHES
Prints one JSON line: {"freed_bytes": ..., "micro_batches": ...}.

Runs leakscope's tiny model and micro-batches at the given size (its builders only), then a
plain forward_backward_batch-style loop: every output kept in a list, backward per micro-batch.
Retention is read from /proc/self/statm, with glibc's mmap threshold fixed small by the caller
(MALLOC_MMAP_THRESHOLD_) so that every tensor buffer is its own mapping and freeing it returns
its pages: RSS then moves by exactly the bytes released.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys

import torch

from leakscope.models.engines import detach_tree
from leakscope.models.tiny import build_micro_batch, build_model, loss_function
from leakscope.options import ModelSize


def rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    target, seq, hidden, vocab, layers, n = sys.argv[1], *map(int, sys.argv[2:7])
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    if hasattr(cls, "total"):
        cls.total = 0.0  # a class-level accumulator starts empty
    size = ModelSize(vocab=vocab, hidden=hidden, layers=layers, seq=seq)
    torch.set_num_threads(1)
    model = build_model("peft-checkpoint", size)
    engine = cls(model)
    batches = [build_micro_batch(size, i) for i in range(n)]
    kept = []
    for mb in batches:
        loss, output = engine.forward_step(mb, loss_function, False)
        loss.backward()
        kept.append(output)
        del loss, output
    model.zero_grad(set_to_none=True)
    gc.collect()
    held = rss()
    # The fix: detach what is held. The tensors themselves stay (same storages);
    # only the graphs they pinned are released, so RSS drops by the retained graph.
    kept[:] = [detach_tree(o) for o in kept]
    if isinstance(getattr(engine, "last_logits", None), torch.Tensor):
        engine.last_logits = engine.last_logits.detach()
    if isinstance(getattr(cls, "total", None), torch.Tensor):
        cls.total = cls.total.detach()
    gc.collect()
    print(json.dumps({"freed_bytes": held - rss(), "micro_batches": n}))


if __name__ == "__main__":
    main()
