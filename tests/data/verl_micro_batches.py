"""Drive N micro-batches through verl's real forward_backward_batch with leakscope's adapter.

Run with the interpreter of a verl venv: ``python verl_micro_batches.py TARGET N``.
Prints one JSON line: how many micro-batches ran, and how many of their
checkpoint-input leaves (the embedding outputs PEFT makes require grad) are
still alive once forward_backward_batch has returned and its result is held,
as verl's trainer holds it.
"""

from __future__ import annotations

import gc
import json
import sys

import torch
import verl

from leakscope.adapters.verl import ADAPTER
from leakscope.harness.distributed import process_group
from leakscope.harness.target import resolve
from leakscope.models.tiny import build_model
from leakscope.options import ModelSize


def main() -> None:
    target, n = sys.argv[1], int(sys.argv[2])
    resolved = resolve(target)
    size = ModelSize()
    with process_group():
        model = build_model("peft-checkpoint", size)
        engine = ADAPTER.build_engine(resolved, model)
        micro_batches = [ADAPTER.micro_batch(size, i) for i in range(n)]
        output = ADAPTER.run_micro_batches(engine, micro_batches, ADAPTER.loss_function, False)
        del micro_batches
        gc.collect()
        # Probes per forward: the embedding leaf, then each later block input.
        leaves = [
            t
            for t in (ref() for ref in model.leakscope_probes)
            if t is not None and t.grad_fn is None
        ]
        alive_bytes = sum(t.nbytes + (t.grad.nbytes if t.grad is not None else 0) for t in leaves)
        print(
            json.dumps(
                {
                    "verl": verl.__version__,
                    "torch": torch.__version__,
                    "forwards": len(model.leakscope_probes) // size.layers,
                    "alive_leaves": len(leaves),
                    "alive_bytes": alive_bytes,
                    "output_keys": sorted(output.keys()),
                }
            )
        )
        del leaves, output


if __name__ == "__main__":
    main()
