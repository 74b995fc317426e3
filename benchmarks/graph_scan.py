"""Graph scan: leakscope's walk over big retained graphs, against a bare DFS and torchviz.

Each measurement runs in its own process on a freshly built graph, so every
contender pays for creating the Python node wrappers (a graph nobody has walked
yet, as in a real scan) and no contender warms the next one's caches. Each
contender runs :data:`REPEATS` times and the fastest run counts.

Graphs (``--n`` nodes, every non-leaf node with one saved tensor):
- ``chain``: ``x.tanh().tanh()...`` : depth ``n``, the recursion-limit test;
- ``fan``: ``cat([leaf_i.tanh() for i in range(n // 2)])``: one node with
  ``n / 2`` inputs, ``n / 2`` non-Parameter leaves (AccumulateGrad).

Contenders:
- ``bare``: a plain Python DFS over ``next_functions`` (nodes only);
- ``leakscope``: ``leakscope.probe.autograd.graph_tensors`` (nodes, saved slots, leaves);
- ``torchviz``: ``torchviz.make_dot(y, show_saved=True)`` builds the Digraph
  source (needs the ``torchviz`` and ``graphviz`` Python packages, not the
  Graphviz binary); skipped when not installed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from benchmarks._common import Row, child_env, python, run_timed

TARGET_RATE = 0.5e6  # nodes per second, leakscope with saved slots
REPEATS = 3  # best of, per contender and size (not torchviz: minutes at 1M nodes)
LINEAR_SLACK = 2.0  # per-node time at the largest size within 2x of the smallest


def build(kind: str, n: int) -> tuple[Any, Any]:
    import torch

    if kind == "chain":
        x = torch.zeros(1, requires_grad=True)
        y = x
        for _ in range(n - 1):
            y = torch.tanh(y)
        return y, x
    leaves = [torch.zeros(1, requires_grad=True) for _ in range(n // 2)]
    return torch.cat([leaf.tanh() for leaf in leaves]), leaves


def bare_dfs(root: Any) -> int:
    seen = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return len(seen)


def _child(kind: str, n: int, contender: str) -> None:
    """Build, measure one contender, print JSON, and leave without freeing the graph.

    See NOTE [Deep graphs after a Python walk] in leakscope/probe/autograd.py: after any
    Python walk, freeing a deep chain overflows the C stack on torch 2.13, so
    the graph is freed in a thread with a 1 GiB stack (and timed).
    """
    import gc
    import os
    import threading
    import time

    from leakscope.probe.autograd import graph_tensors  # imported before the clock, like torch

    gc.disable()  # as during a check (gc_paused); collections would time the heap, not the walk
    y, keep = build(kind, n)
    root = y.grad_fn
    out: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        if contender == "bare":
            out["nodes"] = bare_dfs(root)
        elif contender == "leakscope":
            nodes, found = graph_tensors([root])
            out["nodes"], out["tensors"] = nodes, sum(len(g.tensors) for g in found)
            del found
        elif contender == "torchviz":
            import torchviz

            sys.setrecursionlimit(10_000)
            dot = torchviz.make_dot(y, show_saved=True)
            out["nodes"] = sum(1 for line in dot.body if "->" not in line)
            del dot
        out["seconds"] = time.perf_counter() - started
    except RecursionError:
        out["error"] = "RecursionError"
    except ImportError as exc:
        out["error"] = f"not installed ({exc.name})"
    if contender == "leakscope":
        del root
        holder = [y, keep]
        del y, keep
        threading.stack_size(1 << 30)
        started = time.perf_counter()
        worker = threading.Thread(target=holder.clear)
        worker.start()
        worker.join()
        out["free_seconds"] = time.perf_counter() - started
    print("SCAN=" + json.dumps(out), flush=True)
    os._exit(0)


def _best(kind: str, n: int, contender: str) -> dict[str, Any]:
    """The fastest of :data:`REPEATS` fresh processes, as ``timeit`` reports the
    minimum: on a shared machine the slower runs measure the neighbours."""
    runs = [_measure(kind, n, contender) for _ in range(1 if contender == "torchviz" else REPEATS)]
    timed = [r for r in runs if "seconds" in r]
    return min(timed, key=lambda r: r["seconds"]) if timed else runs[0]


def _measure(kind: str, n: int, contender: str) -> dict[str, Any]:
    done = run_timed(
        [python(), "-m", "benchmarks.graph_scan", kind, str(n), contender], env=child_env()
    )
    if "SCAN=" not in done.stdout:
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}"}
    result: dict[str, Any] = json.loads(done.stdout.rsplit("SCAN=", 1)[1])
    return result


def run(short: bool) -> list[Row]:
    sizes = [10_000, 100_000] if short else [10_000, 100_000, 1_000_000]
    rows: list[Row] = []
    for kind in ("chain", "fan"):
        per_node: dict[int, float] = {}
        for n in sizes:
            res = {c: _best(kind, n, c) for c in ("bare", "leakscope", "torchviz")}
            ls, bare = res["leakscope"], res["bare"]
            if "seconds" not in ls:
                rows.append(
                    Row("graph", f"{kind} {n:>9,}: leakscope", ls.get("error", "?"), "runs", False)
                )
                continue
            rate = ls["nodes"] / ls["seconds"]
            per_node[n] = ls["seconds"] / ls["nodes"]
            cells = [
                f"{rate / 1e6:.2f} M nodes/s ({ls['tensors']:,} tensors, {ls['seconds']:.2f} s)"
            ]
            if "seconds" in bare:
                bare_rate = bare["nodes"] / bare["seconds"]
                cells.append(f"bare DFS {bare_rate / 1e6:.2f} M/s ({rate / bare_rate:.2f}x)")
            tv = res["torchviz"]
            cells.append(
                f"torchviz {tv['nodes'] / tv['seconds'] / 1e6:.2f} M/s"
                if "seconds" in tv
                else f"torchviz: {tv.get('error')}"
            )
            rows.append(
                Row(
                    "graph",
                    f"{kind} {n:>9,} nodes",
                    "; ".join(cells),
                    f">= {TARGET_RATE / 1e6:.1f} M/s",
                    rate >= TARGET_RATE,
                )
            )
        if len(per_node) >= 2:
            small, large = min(per_node), max(per_node)
            growth = per_node[large] / per_node[small]
            rows.append(
                Row(
                    "graph",
                    f"{kind}: per-node time {large:,} vs {small:,}",
                    f"{growth:.2f}x",
                    f"<= {LINEAR_SLACK}x (linear)",
                    growth <= LINEAR_SLACK,
                )
            )
    return rows


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), sys.argv[3])
