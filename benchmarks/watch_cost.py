"""Watch's cost: a ~50M-parameter model's step watched by ``leakscope watch`` against the same step unwatched.

The subject is a verl-shaped actor step on leakscope's ``TinyLM`` at a realistic
width (checkpointed blocks, the embedding output a leaf with a grad): the
engine's ``forward_step`` computes log-probs and the loss, the loop runs
backward and keeps what the step returns, as verl's loop does. Iterations run
in this process, watched (``leakscope.watch`` with
``then="continue"``: the same patch, observer and looks the CLI installs) and
unwatched (the original function, called directly) in alternation (ABBA), so
that a change in machine load or an order effect hits both alike; ratios are of medians.

- watched call / unwatched call: the step method alone (the observer's own
  timing of the watched call: the sequence-number reads, the walk of the
  return value, and on the first call anomaly-mode stack traces for created-at
  lines, NOTE [Created at, in a running job]), against the method unwatched,
  timed the same way. Target: at most 1.2x (issue 14). The first call and the
  later ones are also shown apart.
- watched iteration / unwatched iteration: the loop's whole iteration, the
  look before the call included (``gc.collect`` and the holder walk).
- the same for a leaky loop (it keeps the attached outputs): its first look
  finds the leak, so the job is traced until the next look to find the
  stored-at line (NOTE [Stored at, in a running job]). Reported, no target.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks._common import Row, median

TARGET_CALL = 1.2
METHOD = "benchmarks.watch_cost:ActorEngine.forward_step"


class ActorEngine:
    """A verl-shaped engine: ``forward_step`` returns the loss and the model output."""

    def __init__(self, model: Any, detach: bool) -> None:
        self.model = model
        self.detach = detach

    def forward_step(self, micro_batch: Any) -> tuple[Any, dict[str, Any]]:
        import torch

        from leakscope.models.tiny import loss_function

        logits = self.model(
            input_ids=micro_batch["input_ids"],
            attention_mask=micro_batch["attention_mask"],
            position_ids=micro_batch["position_ids"],
        ).logits
        log_probs = (
            torch.log_softmax(logits.float(), -1)
            .gather(-1, micro_batch["input_ids"].unsqueeze(-1))
            .squeeze(-1)
        )
        loss, metrics = loss_function(model_output={"log_probs": log_probs}, data=micro_batch)
        return loss, {
            "log_probs": log_probs.detach() if self.detach else log_probs,
            "metrics": metrics,
        }


def _timed(
    step: Any, engine: ActorEngine, micro_batch: Any, kept: list[Any]
) -> tuple[float, float]:
    """One iteration of verl's loop (call the step, run backward, keep what it returned):
    the call's seconds and the iteration's."""
    started = time.perf_counter()
    loss, output = step(engine, micro_batch)
    called = time.perf_counter()
    loss.backward()
    kept.append(output)
    return called - started, time.perf_counter() - started


def _measure(model: Any, batches: list[Any], detach: bool, reps: int) -> dict[str, float]:
    """Unwatched and watched iterations alternate (the unwatched ones call the original function),
    so a change in machine load hits both alike."""
    from leakscope.live.session import Watch, WatchOptions

    engine = ActorEngine(model, detach)
    original = ActorEngine.forward_step
    _timed(original, engine, batches[0], [])  # warm-up
    bare_call: list[float] = []
    bare_step: list[float] = []
    step: list[float] = []
    kept: list[Any] = []
    watch = Watch(WatchOptions(methods=(METHOD,), micro_batches=reps, then="continue"))
    watch.start()
    try:
        for i, micro_batch in enumerate(
            batches[: reps + 1]
        ):  # the call after the last watched one looks last
            if i % 2 == 1:  # the order alternates too: ABBA
                step.append(_timed(ActorEngine.forward_step, engine, micro_batch, kept)[1])
            if i < reps:
                call, whole = _timed(original, engine, micro_batch, [])
                bare_call.append(call)
                bare_step.append(whole)
            if i % 2 == 0:
                step.append(_timed(ActorEngine.forward_step, engine, micro_batch, kept)[1])
    finally:
        report = watch.stop()
        kept.clear()
        model.zero_grad(set_to_none=True)
    watched_call = [c["seconds"] for c in report.watch.calls] if report.watch else []
    leak = any(r.verdict.value == "leak" for r in report.results)
    assert leak is not detach and len(watched_call) == reps, [
        (r.target, r.verdict, r.error) for r in report.results
    ]
    return {
        "bare_call": median(bare_call),
        "bare_step": median(bare_step),
        "watched_call": median(watched_call),
        "watched_step": median(step[1:]),  # iterations with a look
        "first_call": watched_call[0] / bare_call[0],
        "later_calls": median([w / b for w, b in zip(watched_call[1:], bare_call[1:])]),
    }


def run(short: bool) -> list[Row]:
    import torch

    from leakscope.models.tiny import build_micro_batch, build_model
    from leakscope.options import ModelSize

    size = ModelSize(vocab=1024, hidden=1024, layers=12, batch=2, seq=64 if short else 128)
    model = build_model("peft-checkpoint", size)
    model.record_probes = False  # leakscope's own check probes are not part of a user's model
    params = sum(p.numel() for p in model.parameters())
    reps = 3 if short else 6
    batches = [build_micro_batch(size, i) for i in range(reps + 1)]
    torch.manual_seed(0)
    clean = _measure(model, batches, detach=True, reps=reps)
    leaky = _measure(model, batches, detach=False, reps=reps)
    call_ratio = clean["watched_call"] / clean["bare_call"]
    label = f"TinyLM {params / 1e6:.1f}M params, batch {size.batch} x seq {size.seq}, {reps} watched calls"
    return [
        Row(
            "watch",
            f"{label}: unwatched call / watched call",
            f"{clean['bare_call']:.3f} s / {clean['watched_call']:.3f} s",
        ),
        Row(
            "watch",
            "watched call / unwatched call (clean loop, median)",
            f"{call_ratio:.3f}x",
            f"<= {TARGET_CALL}x",
            call_ratio <= TARGET_CALL,
        ),
        Row(
            "watch",
            "first watched call (records created-at lines) / later watched calls, each / unwatched call",
            f"{clean['first_call']:.3f}x / {clean['later_calls']:.3f}x",
        ),
        Row(
            "watch",
            "iteration with its look (call + backward + look) / unwatched iteration, clean loop",
            f"{clean['watched_step']:.3f} s / {clean['bare_step']:.3f} s = "
            f"{clean['watched_step'] / clean['bare_step']:.3f}x",
        ),
        Row(
            "watch",
            "leaky loop (stored-at tracing after the first leaky look): watched call / unwatched call",
            f"{leaky['watched_call'] / leaky['bare_call']:.3f}x; iteration {leaky['watched_step'] / leaky['bare_step']:.3f}x",
        ),
    ]
