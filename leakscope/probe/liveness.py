"""Evidence that a step's graph is alive: weakrefs only, never the tensors.

# NOTE [Observer effect]
# Everything leakscope records about a step it records by weakref: the probes
# (checkpoint inputs), the non-Parameter leaves of the step's graph and their
# ``.grad``, the saved tensors and ctx tensors of its nodes. A strong reference
# anywhere in leakscope would itself be the leak it reports, so containers of
# hits and nodes are local to one function call and emptied before judging,
# and :func:`settle` runs the cyclic GC before any verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from leakscope.probe.autograd import (
    LEAF_GRAD,
    UNTIL_GC,
    account,
    graph_tensors,
    storage_key,
    storage_nbytes,
)
from leakscope.probe.safe import grad, grad_fn, is_leaf, requires_grad

if TYPE_CHECKING:
    from torch import Tensor
    from torch.autograd.graph import Node


def settle() -> None:
    """Run the cyclic GC until nothing more is freed, so only real holders keep objects alive.

    A graph that only a reference cycle keeps is freed here: it is not a leak
    (though it spikes memory until a collection runs; see ``until-gc``).
    """
    for _ in range(3):
        if gc.collect() == 0:
            break


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the cyclic GC from running mid-step, so ``until-gc`` retention is observable.

    Also freezes every object that exists on entry (see NOTE [Frozen heap]), so
    the collections :func:`settle` runs scan only what the check created.

    # NOTE [An engine that turns the collector off]
    # The pause sets the collector's first threshold to 0 (no automatic
    # collection) instead of calling ``gc.disable()``, so ``gc.isenabled()``
    # stays the engine's to change: an engine that calls ``gc.disable()`` is seen
    # (:func:`gc_turned_off`), and a graph held only by a reference cycle is then a
    # leak, not a warning: in the real job no collection ever frees it. On the way
    # out the collector's state, thresholds and debug flags are what they were
    # on entry (an engine that set ``gc.DEBUG_SAVEALL`` leaves it set in its
    # own process only).
    """
    was_enabled = gc.isenabled()
    thresholds = gc.get_threshold()
    debug = gc.get_debug()
    gc.set_threshold(0, *thresholds[1:])
    # NOTE [Frozen heap]
    # After ``import torch`` (and FSDP, which pulls in torch._dynamo and sympy)
    # the heap holds millions of GC-tracked objects, and one full
    # ``gc.collect()`` costs about 0.4 s on a small CPU: settling twice per
    # mode was most of a check's own cost. Nothing that existed before the
    # check can belong to the step's graph, so ``gc.freeze()`` moves it to the
    # permanent generation, which collections skip. A frozen object that refers
    # to a new one keeps it alive, exactly as it would in a full collection,
    # because it is alive. We freeze only when nothing is frozen yet, so
    # ``gc.unfreeze()`` afterwards leaves a caller's own frozen objects
    # (a pre-fork server's, say) as they were.
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        gc.set_threshold(*thresholds)
        gc.set_debug(debug)
        if was_enabled:
            gc.enable()  # the engine may have turned it off: the caller's state comes back
        else:
            gc.disable()


def gc_turned_off() -> bool:
    """Whether the cyclic collector is off now: inside :func:`gc_paused`, the engine turned it off
    (NOTE [An engine that turns the collector off])."""
    return not gc.isenabled()


@dataclasses.dataclass(frozen=True)
class Item:
    """One weakly referenced tensor of the step's graph."""

    ref: weakref.ref[Tensor]
    cause: str
    what: str


@dataclasses.dataclass
class Evidence:
    """Weakrefs to what the step's graph kept, plus the probes."""

    items: list[Item] = dataclasses.field(default_factory=list)
    leaf_ids: set[int] = dataclasses.field(default_factory=set)

    def alive(self, exclude_ids: set[int] = frozenset()) -> list[tuple[Item, Tensor]]:  # type: ignore[assignment]
        """Items still alive, minus those a root holds directly as plain tensors."""
        out = []
        for item in self.items:
            obj = item.ref()
            if obj is not None and id(obj) not in exclude_ids:
                out.append((item, obj))
        return out


def collect_evidence(
    graph_roots: Iterable[Node | None],
    probes: Iterable[weakref.ref[Tensor]],
    *,
    is_preexisting: Callable[[Tensor], bool],
    stop: Callable[[Node], bool] | None = None,
) -> Evidence:
    """Weakref everything the step's graph keeps alive (see NOTE [Observer effect])."""
    evidence = Evidence()
    seen: set[int] = set()

    def add(t: Tensor, cause: str, what: str) -> None:
        if id(t) in seen or is_preexisting(t):
            return
        seen.add(id(t))
        try:
            evidence.items.append(Item(weakref.ref(t), cause, what))
        except TypeError:
            return
        # This step's leaves: reached as an AccumulateGrad's variable, or a probe
        # (a checkpoint input) that is itself a leaf requiring grad. A reference
        # to one is a holder (``self.block_input = args[0]``).
        if what == "leaf" or (what == "probe" and grad_fn(t) is None and requires_grad(t)):
            evidence.leaf_ids.add(id(t))

    for ref in probes:
        t = ref()
        if t is not None:
            add(t, LEAF_GRAD if grad_fn(t) is None else "activations", "probe")
            # Only leaves have a .grad (reading it on a non-leaf warns).
            leaf_grad = grad(t) if is_leaf(t) else None
            if leaf_grad is not None:
                add(leaf_grad, LEAF_GRAD, "probe.grad")
    _, found = graph_tensors(graph_roots, stop=stop)
    # A learnable leaf the engine owned before the step (SAC's ``log_alpha``, a
    # temperature) keeps its ``.grad`` by design, as a Parameter does.
    owned_grads = {
        id(grad(leaf))
        for g in found
        if g.slot == "variable"
        for leaf in g.tensors
        if is_preexisting(leaf) and grad(leaf) is not None
    }
    for g in found:
        what = "leaf" if g.slot == "variable" else f"{g.node}.{g.slot}"
        for t in g.tensors:
            if id(t) in owned_grads:
                continue
            add(t, g.cause, what)
    return evidence


def freed_by_gc(evidence: Evidence, excluded: set[tuple[str, int]]) -> dict[str, int]:
    """Bytes of ``evidence`` alive before :func:`settle` that the cyclic GC then freed (see
    ``until-gc``), storages in ``excluded`` not counted."""
    before = {}
    for item, obj in evidence.alive():
        key = storage_key(obj)
        if key is not None and key not in excluded:
            before[id(item)] = (item.cause, key, storage_nbytes(obj))
        del obj
    if not before:
        return {}
    settle()
    still = {id(item) for item, _ in evidence.alive()}
    seen: set[tuple[str, int]] = set()
    out: dict[str, int] = {}
    for item_id, (_cause, key, nbytes) in before.items():
        if item_id in still or key in seen:
            continue
        seen.add(key)
        out[UNTIL_GC] = out.get(UNTIL_GC, 0) + nbytes
    return out


def alive_bytes(
    alive: Iterable[tuple[Item, Tensor]], exclude: set[tuple[str, int]]
) -> dict[str, int]:
    """Bytes per cause of the alive evidence, storage-deduplicated."""
    return account(((item.cause, obj) for item, obj in alive), exclude)


__all__ = [
    "Evidence",
    "Item",
    "alive_bytes",
    "collect_evidence",
    "freed_by_gc",
    "gc_paused",
    "gc_turned_off",
    "settle",
]
