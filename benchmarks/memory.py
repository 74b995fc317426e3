"""Memory: what leakscope itself adds on top of the engine during a check.

Two views. Peak RSS of the whole ``leakscope check`` process against the bare
engine process (from the check-cost runs). And, in one process after the
imports, the peak of Python allocations (tracemalloc) during the engine's bare
step against during ``leakscope.check`` of the same engine: the part that is
leakscope's walks, evidence and findings rather than torch's tensors.
"""

from __future__ import annotations

import json
import sys

from benchmarks._common import Row, child_env, python, run_timed

_CHILD = r"""
import gc, json, tracemalloc
import torch, tensordict
import torch.distributed as dist
import leakscope
from leakscope.options import CheckOptions
from leakscope.models.engines import FSDPEngine, LeakyFSDPEngine
from leakscope.models.tiny import build_micro_batch, build_model, loss_function

def bare():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    engine = FSDPEngine(build_model())
    loss, _ = engine.forward_step(build_micro_batch(), loss_function, False)
    loss.backward()
    engine.forward_step(build_micro_batch(), loss_function, True)
    dist.destroy_process_group()

def peak(fn):
    gc.collect()
    tracemalloc.start()
    fn()
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return top

bare()  # warm: lazy imports and first-call costs are not memory of either side
leakscope.check("leakscope.models.engines:LeakyFSDPEngine")
out = {
    "bare": peak(bare),
    "clean": peak(lambda: leakscope.check("leakscope.models.engines:FSDPEngine", CheckOptions())),
    "leaky": peak(lambda: leakscope.check("leakscope.models.engines:LeakyFSDPEngine", CheckOptions())),
}
print("MEM=" + json.dumps(out))
"""


def run(short: bool, rss: dict[str, float]) -> list[Row]:
    rows = []
    if rss:
        extra = rss["check_rss_mib"] - rss["bare_rss_mib"]
        rows.append(
            Row("memory", "peak RSS, bare engine process", f"{rss['bare_rss_mib']:.0f} MiB")
        )
        rows.append(
            Row("memory", "peak RSS, leakscope check process", f"{rss['check_rss_mib']:.0f} MiB")
        )
        rows.append(
            Row("memory", "leakscope's own peak RSS beyond the engine's", f"{extra:+.0f} MiB")
        )
    done = run_timed([python(), "-c", _CHILD], env=child_env())
    if done.returncode != 0 or "MEM=" not in done.stdout:
        print(done.stderr[-3000:], file=sys.stderr)
        rows.append(Row("memory", "tracemalloc peaks", "failed (see stderr)", "runs", False))
        return rows
    mem = json.loads(done.stdout.rsplit("MEM=", 1)[1])
    kib = {k: v / 1024 for k, v in mem.items()}
    rows.append(
        Row(
            "memory",
            "Python allocation peak, bare step (train + forward-only)",
            f"{kib['bare']:.0f} KiB",
        )
    )
    rows.append(
        Row(
            "memory",
            "Python allocation peak, check of FSDPEngine (clean)",
            f"{kib['clean']:.0f} KiB",
        )
    )
    rows.append(
        Row("memory", "Python allocation peak, check of LeakyFSDPEngine", f"{kib['leaky']:.0f} KiB")
    )
    return rows
