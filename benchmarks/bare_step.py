"""The baseline for the check-cost benchmark: run the reference engine's step once, no leakscope.

What a user pays to try the engine at all: import torch and tensordict, make a
single-process gloo group (FSDP2 needs one), build the same tiny model and the
same ``FSDPEngine``, run one forward + backward and one forward-only step,
exit. ``--plain`` drops FSDP (no process group, the model called directly): a
stricter baseline, reported alongside.
"""

from __future__ import annotations

import resource
import sys

import tensordict  # noqa: F401 - part of the baseline's cost, as in the engine's real imports
import torch

from leakscope.models.tiny import build_micro_batch, build_model, loss_function


def main(plain: bool) -> None:
    model = build_model()
    micro_batch = build_micro_batch()
    if plain:
        logits = model(input_ids=micro_batch["input_ids"]).logits
        log_probs = (
            torch.log_softmax(logits.float(), -1)
            .gather(-1, micro_batch["input_ids"].unsqueeze(-1))
            .squeeze(-1)
        )
        loss, _ = loss_function(model_output={"log_probs": log_probs}, data=micro_batch)
        loss.backward()
        with torch.no_grad():
            model(input_ids=micro_batch["input_ids"])
    else:
        import torch.distributed as dist

        from leakscope.models.engines import FSDPEngine

        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        engine = FSDPEngine(model)
        loss, _ = engine.forward_step(micro_batch, loss_function, False)
        loss.backward()
        engine.forward_step(micro_batch, loss_function, True)
        dist.destroy_process_group()
    print(f"MAXRSS_KIB={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)


if __name__ == "__main__":
    main("--plain" in sys.argv[1:])
