"""The one place a :class:`~leakscope.results.Finding` is built, from the harness's descriptions.

Every finding (a named holder of a check's step or of a watched call, a holder
found after the last micro-batch, an unnamed holder, a reference cycle, storage
growth) comes from a function here, so its holder kind, cause, bytes and fix are
decided by one rule. Tensor-free: the harness describes what it observed
(:class:`~leakscope.harness.observe.Held`), this module only reads descriptions.

# NOTE [One accounting]
# A reference's bytes are the storages its graph keeps (saved tensors,
# checkpoint frames, non-Parameter leaves and their gradients; each storage
# once; the caller's own tensors and the parameters never) plus its graph's
# nodes at the cost one node was measured to have here (NOTE [What a node
# costs]). ``check`` and ``watch`` count through this one function, so the same
# holder reads the same bytes in both, and a graph backward has already run
# through (nodes only) is never "0 B".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from leakscope.diagnose.fixes import hint_for
from leakscope.holders import CYCLE, UNKNOWN, HolderPath, RootKind
from leakscope.results import Cause, Finding, Holder, LeakKind, Severity

if TYPE_CHECKING:
    from leakscope.harness.observe import Held

#: the order a storage reached under several causes is attributed in (as the probes attribute it)
CAUSE_ORDER = (Cause.LEAF_GRAD, Cause.CTX, Cause.ACTIVATIONS)

_HOLDER_OF_ROOT = {
    RootKind.OUTPUT: Holder.RETURNED,
    RootKind.ENGINE: Holder.ENGINE,
    RootKind.MICRO_BATCH: Holder.MICRO_BATCH,
    RootKind.MODULE: Holder.MODEL,
    RootKind.GLOBAL: Holder.GLOBAL,
    RootKind.CALLER: Holder.CALLER,
    RootKind.ARGUMENT: Holder.ARGUMENT,
    RootKind.CYCLE: Holder.CYCLE,
}


def holder_of(path: HolderPath) -> Holder:
    """The holder kind of a reference at ``path``: its root, or a hook on the model."""
    if path.root_kind is RootKind.MODULE and path.in_hook():
        return Holder.MODEL_HOOK
    kind = path.root_kind
    return _HOLDER_OF_ROOT.get(kind, Holder.NOT_FOUND) if kind is not None else Holder.NOT_FOUND


def dominant(by_cause: Mapping[str, int]) -> Cause:
    """The cause with the most bytes (ties: the order storages are attributed in); nodes-only when
    no tensor is kept."""
    tensors = {c: n for c, n in by_cause.items() if c != Cause.NODES_ONLY.value}
    if not tensors or sum(tensors.values()) == 0:
        return Cause.NODES_ONLY
    best = max(
        tensors, key=lambda c: (tensors[c], -CAUSE_ORDER.index(c) if c in CAUSE_ORDER else 0)
    )
    return Cause(best)


def bytes_by_cause(
    storages: Mapping[tuple[str, int], tuple[str, int]], nodes: int, node_bytes: int
) -> dict[str, int]:
    """Bytes per cause (NOTE [One accounting]): the storages' bytes, plus the nodes' as ``nodes-only``."""
    totals: dict[str, int] = {}
    for cause, nbytes in storages.values():
        totals[cause] = totals.get(cause, 0) + nbytes
    return dict(sorted(with_nodes(totals, nodes, node_bytes).items()))


def with_nodes(by_cause: Mapping[str, int], nodes: int, node_bytes: int) -> dict[str, int]:
    """``by_cause`` with ``nodes`` graph nodes added as ``nodes-only`` bytes, at ``node_bytes`` each
    (NOTE [What a node costs]): the one rule for what a held node costs."""
    out = dict(by_cause)
    if nodes and node_bytes:
        out[Cause.NODES_ONLY.value] = out.get(Cause.NODES_ONLY.value, 0) + nodes * node_bytes
    return out


def union_bytes(held: Iterable[Held], node_bytes: int, *, one_step: bool = False) -> dict[str, int]:
    """Bytes by cause of several references together, each storage and each node once: everything
    their graphs keep, or with ``one_step`` what one step's graph behind each keeps (per micro-batch)."""
    storages: dict[tuple[str, int], tuple[str, int]] = {}
    nodes: set[int] = set()
    for h in held:
        for key, value in (h.step_storages if one_step else h.storages).items():
            current = storages.get(key)
            if current is None or _rank(value[0]) < _rank(current[0]):
                storages[key] = value
        nodes |= h.step_node_keys if one_step else h.node_keys
    return bytes_by_cause(storages, len(nodes), node_bytes)


def retained_total(
    findings: Iterable[Finding], held: Mapping[HolderPath, Held], node_bytes: int
) -> int:
    """A result's headline bytes (NOTE [One accounting]): what one step's graph behind each leaking
    holder (its reference in ``held``, by path) keeps, each storage and node once, plus the bytes
    no holder was found for. ``check`` and ``watch`` both count their headline here, so it is the
    sum of what their rows say."""
    findings = list(findings)
    leaking = [held[f.path] for f in findings if f.severity is Severity.LEAK and f.path in held]
    return sum(union_bytes(leaking, node_bytes, one_step=True).values()) + sum(
        f.retained_bytes for f in findings if f.path == UNKNOWN
    )


def _rank(cause: str) -> int:
    return CAUSE_ORDER.index(cause) if cause in CAUSE_ORDER else len(CAUSE_ORDER)


def held_finding(
    held: Held,
    node_bytes: int,
    *,
    confirmed: bool = False,
    adapter: str | None = None,
    kind: LeakKind | None = None,
    node_cost: str | None = None,
) -> Finding:
    """A reference the harness described, holding a judged step's graph; ``node_cost`` says what
    ``node_bytes`` is (NOTE [What a node costs])."""
    by_cause = bytes_by_cause(held.step_storages, len(held.step_node_keys), node_bytes)
    cause = dominant(by_cause)
    holder = holder_of(held.path)
    return Finding(
        path=held.path,
        holder=holder,
        grad_fn=held.grad_fn,
        graph_nodes=held.graph_nodes,
        retained_bytes=sum(by_cause.values()),
        confirmed=confirmed,
        hint=hint_for(holder, cause, held.path, adapter=adapter),
        cause=cause,
        bytes_by_cause=by_cause,
        source=held.source,
        called_from=held.called_from,
        # NOTE [One node count]: the drawing says the count the bytes were computed from
        graph=dataclasses.replace(held.graph, graph_nodes=held.graph_nodes)
        if held.graph is not None
        else None,
        kind=kind,
        node_cost=node_cost if held.graph_nodes and node_bytes else None,
    )


def unknown_finding(by_cause: Mapping[str, int], owner: str | None = None) -> Finding:
    """Retention proven, but nothing reachable from what the caller keeps holds it; ``owner``: the
    object that does, in words, when it was found (NOTE [Held from C++])."""
    cause = dominant(by_cause)
    hint = (
        f"held by {owner}; nothing the job's variables reach holds this graph: keep a detached "
        "value (t.detach()) where that object is given the tensor, or remove it after backward"
        if owner
        else hint_for(Holder.NOT_FOUND, cause, UNKNOWN)
    )
    return _unheld_finding(UNKNOWN, Holder.NOT_FOUND, by_cause, hint, cause)


#: the fix when the engine turned the collector off (NOTE [An engine that turns the collector off])
GC_OFF_HINT = (
    "the engine turned the cyclic garbage collector off (gc.disable()), so this reference cycle, "
    "and the step's graph it reaches, is never freed: keep the collector on, or store only "
    ".detach()ed tensors or numbers in objects that refer to themselves"
)


def cycle_finding(by_cause: Mapping[str, int], *, gc_off: bool = False) -> Finding:
    """A graph that only the cyclic garbage collector frees: a warning, or a leak when the engine
    turned the collector off (``gc_off``: nothing will ever free it)."""
    return _unheld_finding(
        CYCLE,
        Holder.CYCLE,
        by_cause,
        GC_OFF_HINT if gc_off else hint_for(Holder.CYCLE, Cause.UNTIL_GC, CYCLE),
        Cause.UNTIL_GC,
        Severity.LEAK if gc_off else Severity.WARNING,
    )


def _unheld_finding(
    path: HolderPath,
    holder: Holder,
    by_cause: Mapping[str, int],
    hint: str,
    cause: Cause,
    severity: Severity = Severity.LEAK,
) -> Finding:
    """A finding no named reference stands for (``<unknown holder>``, ``<reference cycle>``)."""
    return Finding(
        path=path,
        holder=holder,
        grad_fn="-",
        graph_nodes=0,
        retained_bytes=sum(by_cause.values()),
        confirmed=True,
        hint=hint,
        cause=cause,
        bytes_by_cause=dict(sorted(by_cause.items())),
        severity=severity,
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
        severity=Severity.WARNING,
    )


__all__ = [
    "CAUSE_ORDER",
    "bytes_by_cause",
    "cycle_finding",
    "dominant",
    "held_finding",
    "holder_of",
    "storage_growth_finding",
    "retained_total",
    "union_bytes",
    "with_nodes",
    "unknown_finding",
]
