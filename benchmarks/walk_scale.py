"""Holder walk: many references to one tensor, linear in the references.

Each structure is built and walked in its own process, at ``n`` and ``2n``
references, timing ``leakscope.probe.walk.walk`` (CPU seconds, the fastest of
:data:`REPEATS` walks). Structures (``n`` references to one attached tensor):

- ``list``: ``[t] * n``;
- ``dict``: ``dict.fromkeys(range(n), t)`` (a step-keyed history);
- ``chain``: ``[t, [t, [t, ...]]]``, ``n`` deep (``n`` distinct containers).

The walk names each tensor once per slot, at most ``MAX_NAMED`` times (NOTE [Each
reference once] in leakscope/probe/walk.py), so the hits stay few and the time
grows with ``n``, not ``n`` squared: the ratio row compares ``2n`` with ``n``
(2.0 is linear, 4.0 quadratic).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from benchmarks._common import Row, child_env, python, run_timed

REPEATS = 3
#: time at 2n over time at n: linear is 2.0, quadratic 4.0
RATIO_TARGET = 3.0
#: references per CPU second at the largest size
TARGET_RATE = 0.2e6


def build(shape: str, n: int) -> Any:
    import torch

    t = torch.ones(3, requires_grad=True) * 2
    if shape == "list":
        return [t] * n
    if shape == "dict":
        return dict.fromkeys(range(n), t)
    chain: Any = t
    for _ in range(n):
        chain = [t, chain]
    return chain


def _child(shape: str, n: int) -> None:
    """Walk ``n`` and ``2n`` references, each :data:`REPEATS` times; print the fastest of each as JSON."""
    import gc
    import os
    import time

    from leakscope.probe.walk import Root, WalkStats, walk

    gc.disable()  # as during a check (gc_paused)
    list(walk([Root("engine", [1], "engine")]))  # type facts and torch's getters, resolved once
    out = {}
    keep = []
    for size in (n, 2 * n):
        obj = build(shape, size)
        keep.append(obj)
        runs = []
        for _ in range(REPEATS):
            stats = WalkStats()
            started = time.process_time()
            hits = sum(1 for _ in walk([Root("engine", obj, "engine")], stats=stats))
            runs.append(
                {"seconds": time.process_time() - started, "hits": hits, "repeated": stats.repeated}
            )
        out[str(size)] = min(runs, key=lambda r: r["seconds"])
    print("WALK=" + json.dumps(out), flush=True)
    os._exit(0)  # a 10^6-deep chain is freed with the process, not by recursion


def _measure(shape: str, n: int) -> dict[str, Any]:
    done = run_timed([python(), "-m", "benchmarks.walk_scale", shape, str(n)], env=child_env())
    if "WALK=" not in done.stdout:
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}"}
    result: dict[str, Any] = json.loads(done.stdout.rsplit("WALK=", 1)[1])
    return result


def run(short: bool) -> list[Row]:
    n = 100_000 if short else 500_000
    rows: list[Row] = []
    for shape in ("list", "dict", "chain"):
        measured = _measure(shape, n)
        if "error" in measured:
            rows.append(Row("walk", f"{shape}: walk", measured["error"], "runs", False))
            continue
        small, large = measured[str(n)], measured[str(2 * n)]
        rate = 2 * n / max(large["seconds"], 1e-9)
        rows.append(
            Row(
                "walk",
                f"{shape} of {2 * n:>9,} references to one tensor",
                f"{large['seconds']:.2f} s CPU, {rate / 1e6:.2f} M references/s, {large['hits']} named,"
                f" {large['repeated']:,} repeated",
                f">= {TARGET_RATE / 1e6:.1f} M/s",
                rate >= TARGET_RATE,
            )
        )
        ratio = large["seconds"] / max(small["seconds"], 1e-9)
        rows.append(
            Row(
                "walk",
                f"{shape}: time at {2 * n:,} vs {n:,}",
                f"{ratio:.2f}x",
                f"<= {RATIO_TARGET}x (linear 2.0x)",
                ratio <= RATIO_TARGET,
            )
        )
    return rows


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
