"""Which step built each autograd graph node, in any thread.

# NOTE [A step's graph]
# A step's graph is every node the step created, in any thread, and a held
# object keeps the step's graph when its own graph *reaches* one of those nodes:
# a running sum ``total += loss``, a ``loss.clone()`` or ``loss * 2`` made after
# the step returned, a metric's ``self._value = a * self._value + (1 - a) * x``
# all hold nodes created outside the step whose graphs reach into it.
#
# Sequence numbers (``node._sequence_nr()``) cannot say which step made a node:
# they count per thread, and a node made in another thread (a worker thread or
# executor running the forward, ``nn.DataParallel``'s replicas) has a number from
# that thread's counter, which may fall inside another step's range (a new thread
# starts at 0). So when a step ends, every node of its graph is registered by
# identity (NOTE [Node identity]): found by walking down from what the step
# produced (its loss, what it returned, and every tensor with a graph on the
# heap), stopping at nodes an earlier step, or the graphs that existed before the
# first step (registered first, as older), already claimed. The step's own range
# of this thread's numbers places only what the walk could not reach.
#
# Everything here is keyed by identities and sequence numbers: the registry
# keeps no node alive. An identity freed and reused by a later node is
# recognised by its sequence number and type name, which are stored with it.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from leakscope.probe import safe
from leakscope.probe.autograd import (
    UINT64_MAX,
    heap_nodes,
    iter_nodes,
    node_key,
    node_name,
    sequence_nr,
    wrappers_preserved,
)

if TYPE_CHECKING:
    import weakref

    from torch import Tensor
    from torch.autograd.graph import Node

    from leakscope.probe.liveness import Evidence

#: the step index of a node that existed before the first judged step
BEFORE = -1


def next_sequence_nr() -> int:
    """The sequence number the next graph node created in this thread will exceed."""
    import torch

    with torch.enable_grad():
        probe = torch.empty(0, requires_grad=True) * 1
    assert probe.grad_fn is not None
    return sequence_nr(probe.grad_fn)


@dataclasses.dataclass
class StepGraphs:
    """The judged steps (or watched calls) of one run, and which one built each graph node."""

    #: per step: this thread's sequence numbers ``(start, end)``, exclusive
    ranges: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    #: node identity -> (step, sequence number, type name), for nodes the ranges cannot place
    known: dict[int, tuple[int, int, str]] = dataclasses.field(default_factory=dict)
    #: the steps' own leaves (a checkpoint input forced to require grad): ``id -> (weakref, step)``
    leaves: dict[int, tuple[weakref.ref[Tensor], int]] = dataclasses.field(default_factory=dict)
    _start: int | None = None

    # -- recording ------------------------------------------------------------------------
    def mark_before(self, nodes: Iterable[Node | None]) -> None:
        """Register the graphs below ``nodes`` as older than every step (what the caller
        already held when the run started)."""
        for node in iter_nodes(nodes, stop=self._is_known):
            if sequence_nr(node) != UINT64_MAX:
                self._register(node, BEFORE)

    def restart(self) -> None:
        """Forget every step (the older graphs stay older); a step begun stays begun."""
        self.ranges.clear()
        self.leaves.clear()
        self.known = {key: entry for key, entry in self.known.items() if entry[0] == BEFORE}

    def begin(self) -> None:
        """A step starts in this thread."""
        self._start = next_sequence_nr()

    def end(self, roots: Iterable[Node | None] = ()) -> int:
        """The step that began last ends: register, by identity, every node of its graph found below
        ``roots`` (the graph nodes of what it produced, and of every tensor with a graph on the heap)
        that no earlier step or older graph has claimed. Its index."""
        assert self._start is not None, "end() without begin()"
        self.forget_dead()
        start, end = self._start, next_sequence_nr()
        self._start = None
        index = len(self.ranges)
        self.ranges.append((start, end))
        for node in iter_nodes(roots, stop=self._is_known):
            if sequence_nr(node) != UINT64_MAX:  # AccumulateGrad: a leaf's, placed by the evidence
                self._register(node, index)
        return index

    def forget_dead(self) -> None:
        """Drop the registrations of nodes that have died, so a new node that takes a dead one's
        identity (a replica thread's node, made again every step with the same number and type)
        is not taken for it. A node's wrapper lives exactly as long as the node (NOTE [Node
        identity]), and every wrapper registered since the heap was frozen is on the collector's
        young generations; the older graphs' registrations are kept."""

        if not wrappers_preserved():
            return
        nodes = heap_nodes()
        alive = {id(obj) for obj in nodes}
        nodes.clear()
        self.known = {
            key: entry for key, entry in self.known.items() if entry[0] == BEFORE or key in alive
        }

    def add_leaves(self, evidence: Evidence, step: int) -> None:
        """The leaves of ``step``'s graph, from its evidence (:class:`leakscope.probe.liveness.Evidence`)."""
        for item in evidence.items:
            leaf = item.ref()
            if leaf is not None and id(leaf) in evidence.leaf_ids and self.leaf_step(leaf) is None:
                self.leaves[id(leaf)] = (item.ref, step)
            del leaf

    def leaf_step(self, leaf: object) -> int | None:
        """The step whose leaf ``leaf`` is (by identity, checked against the weakref), or None."""
        entry = self.leaves.get(id(leaf))
        if entry is None or entry[0]() is not leaf:
            return None
        return entry[1]

    def _register(self, node: Node, step: int) -> None:
        self.known[node_key(node)] = (step, sequence_nr(node), node_name(node))

    def _known_step(self, node: Node) -> int | None:
        entry = self.known.get(node_key(node))
        if entry is None:
            return None
        step, seq, name = entry
        try:
            same = seq == node._sequence_nr()
        except Exception:
            same = seq == sequence_nr(node)
        if not same or name != node_name(node):
            return None  # the identity of a freed node, reused
        return step

    def _is_known(self, node: Node) -> bool:
        return self._known_step(node) is not None

    # -- reading --------------------------------------------------------------------------
    def step_of(self, node: Node) -> int | None:
        """The step that created ``node``; :data:`BEFORE` for an older graph; None for a node
        made outside every step (a sum the loop made from a step's loss, an AccumulateGrad)."""
        known = self._known_step(node)
        if known is not None:
            return known
        seq = sequence_nr(node)
        if seq == UINT64_MAX:
            return None
        for i, (start, end) in enumerate(self.ranges):
            if start < seq < end:
                return i
        return None

    def is_before(self, node: Node) -> bool:
        """True for a node of a graph built before the first step: a walk stops there."""
        return self._known_step(node) == BEFORE

    def reached(self, node: Node, *, limit: int = 1_000_000) -> frozenset[int]:
        """The steps whose graphs ``node``'s graph reaches (its own node included)."""
        found: set[int] = set()
        for i, reached in enumerate(iter_nodes([node], stop=self.is_before)):
            if i >= limit:
                break
            step = self.step_of(reached)
            if step is not None and step != BEFORE:
                found.add(step)
        return frozenset(found)

    def nodes_by_step(self, roots: Iterable[Node | None]) -> tuple[tuple[int, ...], int]:
        """Live graph nodes below ``roots`` created by step 0, 1, ...; and all nodes below them."""
        counts = [0] * len(self.ranges)
        total = 0
        for node in iter_nodes(roots, stop=self.is_before):
            total += 1
            step = self.step_of(node)
            if step is not None and 0 <= step < len(counts):
                counts[step] += 1
        return tuple(counts), total

    def count_nodes(self, roots: Iterable[Node | None]) -> int:
        """Graph nodes below ``roots``, older graphs and AccumulateGrad nodes not counted."""
        return sum(
            1 for node in iter_nodes(roots, stop=self.is_before) if sequence_nr(node) != UINT64_MAX
        )

    def older_than(self, step: int) -> Callable[[Node], bool]:
        """A ``stop`` predicate for walks that count ``step``'s graph and what later steps added."""

        def stop(node: Node) -> bool:
            found = self.step_of(node)
            return found is not None and found < step

        return stop


def heap_graph_nodes(steps: StepGraphs | None = None) -> list[Node]:
    """The graph nodes of every tensor with a graph on the collector's heap; with ``steps``, only
    those of the judged steps (their own node, in any thread).

    NOTE [Heap evidence]: the evidence (weakrefs on what a graph keeps) is taken
    from graphs the caller's objects reach, and from these: a tensor held by
    something outside the caller's reach (a C++ hook, another library's state,
    another thread's locals) keeps its own branch of the graph (an entropy over
    the logits), which no reachable graph shares; without it, an unnamed holder's
    bytes would leave that branch out. Cheap: during a check the heap that existed
    before it is frozen (NOTE [Frozen heap]) and ``gc.get_objects()`` lists only
    what the check created.
    """
    out = []
    for obj in gc.get_objects():
        if safe.is_tensor(obj):
            node = safe.grad_fn(obj)
            if node is not None and (steps is None or not steps.is_before(node)):
                out.append(node)
    return out


def loss_graph(loss_node: Node | None, steps: StepGraphs) -> frozenset[int]:
    """Identities of the nodes the step's loss was computed from (its graph, the loss's own node not
    included: a reference to the loss itself does not feed the loss)."""
    if loss_node is None:
        return frozenset()
    root = node_key(loss_node)
    return frozenset(
        k for k in (node_key(n) for n in iter_nodes([loss_node], stop=steps.is_before)) if k != root
    )


__all__ = ["BEFORE", "StepGraphs", "heap_graph_nodes", "loss_graph", "next_sequence_nr"]
