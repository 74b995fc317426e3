"""What a retained graph node costs in memory, measured on the running torch.

# NOTE [What a node costs]
# Once backward has run, a held graph keeps no saved tensors, only its nodes:
# each is a C++ object with its edges, the shells of its saved variables, its
# metadata and (once Python has looked at it) its Python wrapper. A few hundred
# bytes each, but a job that keeps every step's graph keeps thousands of them
# per step (upstream reports of such leaks read 12 GB after 20,000 steps), so a
# nodes-only leak is never "0 B". The cost depends on the torch build and the
# allocator, so it is measured, once per process: leakscope's own tiny model
# (embedding output made to require grad, checkpointed linear/tanh blocks, the
# LM head, log_softmax, gather, an entropy side branch) runs many steps, backward
# runs, the outputs are kept, and the heap the C allocator
# reports (glibc's ``mallinfo2``) is read before and after, less the tensor data
# the graphs keep. Where that count is not available the figure is an
# assumption, and the report says so. Real graphs vary by op: the figure is an
# average, stated with every number that uses it.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import platform
import subprocess
import sys
from typing import Any

from leakscope.options import ModelKind, ModelSize
from leakscope.probe.autograd import (
    UINT64_MAX,
    graph_tensors,
    iter_nodes,
    sequence_nr,
    storage_key,
    storage_nbytes,
)

#: bytes per node when the heap cannot be measured (torch 2.13, CPU, glibc: about 500 to 900)
ASSUMED_NODE_BYTES = 600
#: steps of the tiny model kept per measurement
_GRAPHS = 24


@dataclasses.dataclass(frozen=True)
class NodeCost:
    """Bytes one retained graph node costs, and how the figure was obtained."""

    bytes_per_node: int
    #: "measured" (heap count on this torch), "assumed" (no heap count here) or "fixed"
    #: (``LEAKSCOPE_NODE_BYTES``: comparable reports across machines)
    how: str

    def describe(self) -> str:
        word = {
            "measured": "measured",
            "fixed": "fixed by LEAKSCOPE_NODE_BYTES",
        }.get(self.how, "assumed; the heap could not be measured here")
        return f"{self.bytes_per_node} B per graph node ({word})"


_CACHE: list[NodeCost] = []


def node_cost() -> NodeCost:
    """The cost of one retained graph node on this torch (NOTE [What a node costs]); cached.

    # NOTE [One measurement per machine]
    # The figure is measured in a fresh interpreter (``python -m leakscope.probe.cost``), never in
    # the process being checked: the allocator's state there (what the job or an earlier check
    # freed) would shift it by a few bytes, and ``check`` and ``watch`` must count the same holder
    # the same. It is kept per torch build, Python and platform in leakscope's cache directory
    # (``$LEAKSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/leakscope``, else ``~/.cache/leakscope``),
    # so a machine measures it once (about a second). ``LEAKSCOPE_NODE_BYTES=N`` fixes the figure
    # instead (reports compared across machines; the examples in docs/ are made with it).
    """

    fixed = os.environ.get("LEAKSCOPE_NODE_BYTES", "")
    if fixed.isdigit() and 0 < int(fixed) <= 1_000_000:
        return NodeCost(int(fixed), "fixed")
    if not _CACHE:
        _CACHE.append(_cached_or_measured() or _measure())
    return _CACHE[0]


def prepare() -> None:
    """Find the node cost before forking check processes (the zygote): from the cache, else measured
    in a fresh interpreter; never by running an op in this process (NOTE [Zygote])."""

    if _CACHE or os.environ.get("LEAKSCOPE_NODE_BYTES", "").isdigit():
        return
    cost = _cached_or_measured(in_process=False)
    if cost is not None:
        _CACHE.append(cost)


def _cache_key() -> str:

    import torch

    return f"torch {torch.__version__} | python {platform.python_version()} | {sys.platform} {platform.machine()}"


def cache_dir() -> str:
    """Where leakscope keeps what it measures once per machine."""

    explicit = os.environ.get("LEAKSCOPE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "leakscope")


def _cached_or_measured(*, in_process: bool = True) -> NodeCost | None:

    key = _cache_key()
    path = os.path.join(cache_dir(), "node-cost.json")
    try:
        with open(path, encoding="utf-8") as f:
            known = json.load(f)
        entry = known.get(key) if isinstance(known, dict) else None
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("bytes"), int)
            and entry.get("how") in ("measured", "assumed")
        ):
            if 16 <= entry["bytes"] <= 1_000_000:
                return NodeCost(entry["bytes"], entry["how"])
    except (OSError, ValueError):
        known = {}
    cost = _in_fresh_interpreter() or (_measure() if in_process else None)
    if cost is None:
        return None
    try:
        known = known if isinstance(known, dict) else {}
        known[key] = {"bytes": cost.bytes_per_node, "how": cost.how}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(known, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: measured again next time
    return cost


def _in_fresh_interpreter() -> NodeCost | None:
    """The measurement, run in a new interpreter (NOTE [One measurement per machine]); None if it failed."""

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKSCOPE_WATCH")}
    env["OMP_NUM_THREADS"] = "1"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "leakscope.probe.cost"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        data = json.loads(done.stdout.strip().splitlines()[-1])
        return NodeCost(int(data["bytes"]), str(data["how"]))
    except Exception:
        return None


def heap_bytes() -> int | None:
    """Bytes the C allocator has handed out and not taken back (glibc), or None."""
    try:
        import ctypes

        class _MallInfo2(ctypes.Structure):
            _fields_ = [
                (name, ctypes.c_size_t)
                for name in (
                    "arena",
                    "ordblks",
                    "smblks",
                    "hblks",
                    "hblkhd",
                    "usmblks",
                    "fsmblks",
                    "uordblks",
                    "fordblks",
                    "keepcost",
                )
            ]

        libc = ctypes.CDLL("libc.so.6")
        mallinfo2 = libc.mallinfo2
        mallinfo2.restype = _MallInfo2
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)
    except Exception:
        return None


def _measure() -> NodeCost:
    import torch

    from leakscope.models.tiny import build_model

    if heap_bytes() is None:
        return NodeCost(ASSUMED_NODE_BYTES, "assumed")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: a thread pool only adds waiting (restored below)
    frozen = gc.get_freeze_count() == 0
    if frozen:  # collections below scan only what the measurement makes (NOTE [Frozen heap])
        gc.collect()
        gc.freeze()
    try:
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            size = ModelSize()
            model = build_model(ModelKind.PEFT_CHECKPOINT, size)
            model.record_probes = False
            gen = torch.Generator().manual_seed(0)
            batches = [
                torch.randint(0, size.vocab, (size.batch, size.seq), generator=gen)
                for _ in range(_GRAPHS)
            ]

            def graph(ids: Any) -> tuple[Any, Any]:
                logits = model(input_ids=ids).logits
                logp = torch.log_softmax(logits.float(), -1)
                log_probs = logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
                entropy = -(logp.exp() * logp).sum(-1)
                (-log_probs.mean()).backward()  # type: ignore[no-untyped-call]
                return log_probs, entropy

            samples = []
            for _ in range(2):
                warm = [graph(b) for b in batches[:3]]
                warm.clear()
                gc.collect()
                before = heap_bytes()
                kept = [graph(b) for b in batches]
                gc.collect()
                after = heap_bytes()
                roots = [t.grad_fn for pair in kept for t in pair]
                nodes = sum(1 for node in iter_nodes(roots) if sequence_nr(node) != UINT64_MAX)
                _, groups = graph_tensors(roots)
                storages = {storage_key(t): storage_nbytes(t) for g in groups for t in g.tensors}
                storages.update({storage_key(t): storage_nbytes(t) for pair in kept for t in pair})
                data = sum(storages.values())
                groups.clear()
                roots.clear()
                kept.clear()
                gc.collect()
                if before is None or after is None or nodes == 0:
                    return NodeCost(ASSUMED_NODE_BYTES, "assumed")
                samples.append((after - before - data) / nodes)
    finally:
        torch.set_num_threads(threads)
        if frozen:
            gc.unfreeze()
    measured = int(round(samples[-1]))  # the second: the first warms the allocator's free lists
    if measured <= 0:  # the allocator gave memory back meanwhile: no usable count
        return NodeCost(ASSUMED_NODE_BYTES, "assumed")
    return NodeCost(measured, "measured")


__all__ = ["ASSUMED_NODE_BYTES", "NodeCost", "cache_dir", "heap_bytes", "node_cost"]


if __name__ == "__main__":
    import json

    measured = _measure()
    print(json.dumps({"bytes": measured.bytes_per_node, "how": measured.how}))  # noqa: T201
