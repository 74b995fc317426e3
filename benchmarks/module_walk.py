"""Holder walk through every loaded module (NOTE [Every loaded module]), the cost of a ``library_*``
check: the generic walk of the globals of the ~2,500 modules loaded after ``import transformers``.

In one fresh process (torch, transformers and a few of its model modules imported, GC paused as
during a check), the same walk runs alternately as it is and as it was before NOTE [Atoms left out
early] and NOTE [One link per entered object] (``_PLAIN_ATOMS`` emptied: every string and number
of every library table is pushed, popped and dropped by the walk; each link made by the
dataclass's ``__init__``), :data:`REPEATS` times each; the fastest CPU time of each counts. Both
must enter the same objects and name the same tensors (a speedup that misses one is a defect,
reported as a FAIL), and the ratio is the time now over the time before.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from benchmarks._common import Row, child_env, python, run_timed

REPEATS = 5
#: walk time now, over the walk as it was before
RATIO_TARGET = 0.8


def _child() -> None:
    import gc
    import os
    import time

    import torch

    try:
        import transformers  # noqa: F401
        from transformers import GPT2LMHeadModel, LlamaForCausalLM  # noqa: F401  (lazy modules)
    except ImportError:
        pass
    from leakscope.harness.observe import module_roots
    from leakscope.probe import walk as walk_module
    from leakscope.probe.walk import Link, WalkStats, walk

    # Something to find: a module global holding an attached tensor, as a logging library would.
    holder = type(sys)("bench_history")
    holder.rows = [{"loss": torch.ones(3, requires_grad=True) * 2, "step": 1}]
    sys.modules["bench_history"] = holder
    gc.disable()
    roots = module_roots()
    atoms, new_link = walk_module._PLAIN_ATOMS, walk_module._new_link
    runs: dict[str, list[dict[str, Any]]] = {"early": [], "late": []}
    for _ in range(REPEATS):
        for mode in ("early", "late"):
            walk_module._PLAIN_ATOMS = atoms if mode == "early" else frozenset()
            walk_module._new_link = new_link if mode == "early" else Link  # type: ignore[assignment]
            stats = WalkStats()
            started = time.process_time()
            hits = sorted(str(hit.path) for hit in walk(roots, stats=stats, generic=True))
            seconds = time.process_time() - started
            runs[mode].append(
                {"seconds": seconds, "visited": stats.visited, "hits": hits, "errors": stats.errors}
            )
    walk_module._PLAIN_ATOMS, walk_module._new_link = atoms, new_link
    out = {mode: min(r, key=lambda x: x["seconds"]) for mode, r in runs.items()}
    out["modules"] = len(roots)  # type: ignore[assignment]
    print("WALK=" + json.dumps(out), flush=True)
    os._exit(0)


def run(short: bool) -> list[Row]:
    done = run_timed([python(), "-m", "benchmarks.module_walk"], env=child_env())
    if "WALK=" not in done.stdout:
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        return [Row("module-walk", "walk", f"exit {done.returncode}: {tail[0]}", "runs", False)]
    got = json.loads(done.stdout.rsplit("WALK=", 1)[1])
    early, late = got["early"], got["late"]
    same = early["hits"] == late["hits"] and early["visited"] == late["visited"]
    ratio = early["seconds"] / max(late["seconds"], 1e-9)
    return [
        Row(
            "module-walk",
            f"generic walk of {got['modules']:,} modules' globals, now / as before",
            f"{early['seconds']:.3f} s / {late['seconds']:.3f} s CPU = {ratio:.2f}x"
            f" ({early['visited']:,} objects entered)",
            f"<= {RATIO_TARGET}x",
            ratio <= RATIO_TARGET,
        ),
        Row(
            "module-walk",
            "same objects entered and tensors named now and before",
            f"{len(early['hits'])} named ({', '.join(early['hits'][:3])}), {early['visited']:,} /"
            f" {late['visited']:,} entered",
            "identical, the planted holder named",
            same and "global:bench_history.rows[0].loss" in early["hits"],
        ),
    ]


if __name__ == "__main__":
    _child()
