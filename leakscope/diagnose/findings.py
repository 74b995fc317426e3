"""The one place a :class:`~leakscope.results.Finding` is built.

Every finding (a named holder of the single step, a holder found after the last
micro-batch, an unnamed holder, a reference cycle, storage growth) comes from a
function here, so its holder kind, cause, bytes and fix are decided by one rule.
"""

from __future__ import annotations

from typing import Any

from leakscope.diagnose.explain import FINDING_GRAPH_NODES, view_of
from leakscope.diagnose.fixes import hint_for
from leakscope.holders import CYCLE, UNKNOWN, HolderPath
from leakscope.probe.autograd import (
    CAUSE_ORDER,
    LEAF_GRAD,
    StorageMap,
    bytes_by_cause,
    graph_tensors,
    node_name,
    storage_key,
    storage_map,
)
from leakscope.results import Cause, Finding, Holder, Source

_HOLDER_OF_ROOT = {
    "output": Holder.RETURNED,
    "engine": Holder.ENGINE,
    "micro_batch": Holder.MICRO_BATCH,
    "module": Holder.MODEL,
    "global": Holder.GLOBAL,
    "caller": Holder.CALLER,
    "argument": Holder.ARGUMENT,
}


def holder_of(path: HolderPath) -> Holder:
    """The holder kind of a reference at ``path``: its root, or a hook on the model."""
    if path.root_kind == "module" and path.in_hook():
        return Holder.MODEL_HOOK
    return _HOLDER_OF_ROOT.get(path.root_kind, Holder.NOT_FOUND)


def dominant(by_cause: dict[str, int]) -> Cause:
    """The cause with the most bytes (ties: the order storages are attributed in); nodes-only when none."""
    if not by_cause or sum(by_cause.values()) == 0:
        return Cause.NODES_ONLY
    best = max(by_cause, key=lambda c: (by_cause[c], -CAUSE_ORDER.index(c) if c in CAUSE_ORDER else 0))
    return Cause(best)


def graph_of(obj: Any) -> tuple[list[Any], list[tuple[str, Any]], str]:
    """Graph roots, extra leaf tensors, and the grad_fn label for one held object
    (a tensor with a graph, a held leaf, or a graph node)."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.grad_fn is not None:
            return [obj.grad_fn], [], node_name(obj.grad_fn)
        extra = [(LEAF_GRAD, obj)]
        if obj.grad is not None:
            extra.append((LEAF_GRAD, obj.grad))
        return [], extra, "AccumulateGrad (leaf)"
    return [obj], [], node_name(obj)


def own_storage(obj: Any) -> set[tuple[str, int]]:
    """A held leaf's own storage is what it retains; a held graph tensor's is not."""
    import torch

    if isinstance(obj, torch.Tensor) and obj.grad_fn is None:
        key = storage_key(obj)
        return {key} if key is not None else set()
    return set()


def held_bytes(obj: Any, *, excluded: set[tuple[str, int]], after_seq: int, union: StorageMap) -> None:
    """Add the storages of the graph below ``obj`` (after ``after_seq``) to ``union``: its bytes only."""
    roots, extra, _ = graph_of(obj)
    _, found = graph_tensors(roots, after_seq=after_seq)
    union.update(storage_map([(g.cause, t) for g in found for t in g.tensors] + extra, excluded - own_storage(obj)))
    found.clear()


def holder_finding(
    path: HolderPath,
    obj: Any,
    *,
    excluded: set[tuple[str, int]],
    after_seq: int,
    union: StorageMap,
    confirmed: bool = False,
    source: Source | None = None,
    called_from: tuple[Source, ...] = (),
    adapter: str | None = None,
) -> Finding:
    """A reference at ``path`` holding ``obj`` (a tensor, a held leaf or a graph node) of this run.

    Bytes are the storages of the graph below it that the caller does not hold
    directly (``excluded``), each counted once; they are also added to ``union``,
    the storages of every finding of the result.
    """
    roots, extra, grad_fn = graph_of(obj)
    nodes, found = graph_tensors(roots, after_seq=after_seq)
    items = [(g.cause, t) for g in found for t in g.tensors] + extra
    storages = storage_map(items, excluded - own_storage(obj))
    found.clear()
    items.clear()
    union.update(storages)
    by_cause = bytes_by_cause(storages)
    cause = dominant(by_cause)
    holder = holder_of(path)
    return Finding(
        path=path,
        holder=holder,
        grad_fn=grad_fn,
        graph_nodes=nodes,
        retained_bytes=sum(by_cause.values()),
        confirmed=confirmed,
        hint=hint_for(holder, cause, path, adapter=adapter),
        cause=cause,
        bytes_by_cause=dict(sorted(by_cause.items())),
        source=source,
        called_from=called_from,
        graph=view_of(obj, path=str(path), max_nodes=FINDING_GRAPH_NODES),
    )


def unknown_finding(by_cause: dict[str, int]) -> Finding:
    """Retention proven, but nothing reachable from what the caller keeps holds it."""
    cause = dominant(by_cause)
    return Finding(
        path=UNKNOWN,
        holder=Holder.NOT_FOUND,
        grad_fn="-",
        graph_nodes=0,
        retained_bytes=sum(by_cause.values()),
        confirmed=True,
        hint=hint_for(Holder.NOT_FOUND, cause, UNKNOWN),
        cause=cause,
        bytes_by_cause=dict(sorted(by_cause.items())),
    )


def cycle_finding(by_cause: dict[str, int]) -> Finding:
    """A graph that only the cyclic garbage collector frees (a warning)."""
    return Finding(
        path=CYCLE,
        holder=Holder.CYCLE,
        grad_fn="-",
        graph_nodes=0,
        retained_bytes=sum(by_cause.values()),
        confirmed=True,
        hint=hint_for(Holder.CYCLE, Cause.UNTIL_GC, CYCLE),
        cause=Cause.UNTIL_GC,
        bytes_by_cause=dict(sorted(by_cause.items())),
        severity="warning",
    )


def storage_growth_finding(container: HolderPath, rate: int) -> Finding:
    """Graph-free storage at ``container`` growing by ``rate`` bytes every micro-batch (a warning)."""
    return Finding(
        path=container,
        holder=Holder.STORAGE_GROWTH,
        grad_fn="-",
        graph_nodes=0,
        retained_bytes=rate,
        confirmed=True,
        hint=hint_for(Holder.STORAGE_GROWTH, Cause.STORAGE_GROWTH, container, rate=rate),
        cause=Cause.STORAGE_GROWTH,
        bytes_by_cause={Cause.STORAGE_GROWTH.value: rate},
        severity="warning",
    )


__all__ = [
    "cycle_finding",
    "held_bytes",
    "dominant",
    "graph_of",
    "holder_finding",
    "holder_of",
    "own_storage",
    "storage_growth_finding",
    "unknown_finding",
]
