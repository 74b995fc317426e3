"""Probe overhead: a ~50M-parameter model's forward + backward with leakscope's probes armed vs not.

The model is leakscope's own ``TinyLM`` (frozen embedding made to require
grad, checkpointed residual MLP blocks, LM head) at a realistic width. Armed
is what a trial adds to a step: a weakref probe on every checkpoint input
during forward, and after backward ``collect_evidence`` over the step's graph
(weakrefs to every leaf, grad, saved and ctx tensor it still holds). Steps
alternate armed / unarmed; the ratio is of medians.
"""

from __future__ import annotations

import time

from benchmarks._common import Row, median

TARGET_RATIO = 1.10


def run(short: bool) -> list[Row]:
    import torch

    from leakscope.models.tiny import build_micro_batch, build_model, loss_function
    from leakscope.options import ModelSize
    from leakscope.probe.liveness import collect_evidence

    size = ModelSize(vocab=1024, hidden=1024, layers=12, batch=2, seq=64 if short else 128)
    model = build_model("peft-checkpoint", size)
    params = sum(p.numel() for p in model.parameters())
    micro_batch = build_micro_batch(size)

    def step(armed: bool) -> float:
        model.record_probes = armed
        started = time.perf_counter()
        logits = model(
            input_ids=micro_batch["input_ids"],
            attention_mask=micro_batch["attention_mask"],
            position_ids=micro_batch["position_ids"],
        ).logits
        log_probs = (
            torch.log_softmax(logits.float(), -1)
            .gather(-1, micro_batch["input_ids"].unsqueeze(-1))
            .squeeze(-1)
        )
        loss, _ = loss_function(model_output={"log_probs": log_probs}, data=micro_batch)
        loss.backward()
        if armed:
            evidence = collect_evidence(
                [loss.grad_fn], list(model.leakscope_probes), is_preexisting=lambda t: False
            )
            evidence.items.clear()
        seconds = time.perf_counter() - started
        model.leakscope_probes.clear()
        model.zero_grad(set_to_none=True)
        return seconds

    step(True)
    step(False)
    reps = 4 if short else 10
    armed: list[float] = []
    bare: list[float] = []
    for i in range(reps):
        for on in (True, False) if i % 2 == 0 else (False, True):
            (armed if on else bare).append(step(on))
    a, b = median(armed), median(bare)
    return [
        Row(
            "probes",
            f"TinyLM {params / 1e6:.1f}M params, batch {size.batch} x seq {size.seq}: unarmed step",
            f"{b:.3f} s",
        ),
        Row("probes", "armed step (probes + evidence)", f"{a:.3f} s"),
        Row(
            "probes",
            "armed / unarmed",
            f"{a / b:.3f}x",
            f"<= {TARGET_RATIO}x",
            a / b <= TARGET_RATIO,
        ),
    ]
