"""Observe what a caller keeps: which references hold a judged step's graph, as plain data.

# NOTE [One look]
# ``check`` (after a trial's step, after each micro-batch, around a release) and
# ``watch`` (before a watched micro-batch, at the job's end) look the same way,
# in :func:`look`: settle the collector, collect what the roots reach into the
# judged steps' graphs, describe each reference, fall back to the generic walk
# through every loaded module when the caller says the typed walk explained too
# little (NOTE [Generic fallback]), and hand the :class:`Sight` to the caller,
# which observes (:meth:`Sight.observe`) and may read the evidence alive
# (:meth:`Sight.alive`) before the look's strong references are dropped. What
# differs between a trial and a running job is only the :class:`Scene`: its
# roots, its steps, what it never counts, and whose lines name a holder.

The one walk of ``check`` (a trial's roots: the output, the engine, the
micro-batch, the model, module globals) and of ``watch`` (a running job's
roots: the loop's frames, the engine, the call's arguments, module globals).
:func:`collect` finds every reference into the judged steps' graphs (NOTE [A
step's graph] in :mod:`leakscope.probe.steps`); :func:`describe` turns each
into a :class:`Held`, a tensor-free description a judge can reason about
(:mod:`leakscope.diagnose.judge`): which steps' graphs it reaches, what those
graphs keep, whether backward already ran through them, where it was created.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from leakscope.harness.source import called_from, created_at
from leakscope.holders import HolderPath, RootKind
from leakscope.probe import safe
from leakscope.probe.autograd import (
    LEAF_GRAD,
    UINT64_MAX,
    ScanStats,
    accumulated_leaf,
    ctx_values,
    graph_tensors,
    heap_nodes,
    iter_nodes,
    node_key,
    node_name,
    saved_values,
    sequence_nr,
    storage_key,
    storage_map,
)
from leakscope.probe.cost import node_cost
from leakscope.probe.library import is_state_module
from leakscope.probe.liveness import Evidence, alive_bytes, settle
from leakscope.probe.steps import StepGraphs
from leakscope.probe.view import FINDING_GRAPH_COUNT, FINDING_GRAPH_NODES, view_of
from leakscope.probe.walk import Hit, Link, LinkKind, Root, WalkStats, kinds, walk
from leakscope.results import GraphView, Source


@dataclasses.dataclass(frozen=True)
class Held:
    """One reference that keeps (part of) a judged step's graph: a description, no tensors."""

    path: HolderPath
    #: the judged steps (micro-batches, watched calls) whose graphs it reaches
    steps: frozenset[int]
    #: the held node's name (``AccumulateGrad (leaf)`` for a held leaf)
    grad_fn: str
    #: graph nodes of the judged steps (and of what was derived from them) below it
    graph_nodes: int
    #: what that graph keeps: ``{storage: (cause, bytes)}``, each storage once
    storages: Mapping[tuple[str, int], tuple[str, int]]
    #: identities of those nodes, to count shared ones once across references
    node_keys: frozenset[int]
    #: what one step's graph behind it keeps (its earliest step's; NOTE [One accounting]): a finding's bytes
    step_storages: Mapping[tuple[str, int], tuple[str, int]] = dataclasses.field(
        default_factory=dict
    )
    step_node_keys: frozenset[int] = frozenset()
    #: the ``maxlen`` of the deque it sits in (a bounded holder), if it does
    maxlen: int | None = None
    #: held by a loop's own variable (a caller frame's local, or a running module-level loop's
    #: global), not through a container that accumulates (NOTE [The loop's latest result])
    loop_local: bool = False
    source: Source | None = None
    called_from: tuple[Source, ...] = ()
    graph: GraphView | None = None
    #: backward has run through every node of its graph that saved tensors (NOTE [Freed by backward])
    backward_ran: bool = False
    #: backward ran through part of it; another part (a side branch) still keeps its tensors
    partly_freed: bool = False
    #: the step's loss was computed from it (the loss's graph reaches its node)
    feeds_loss: bool = False
    #: a held leaf of a step (a checkpoint input forced to require grad), not a graph node
    leaf: bool = False
    #: held through a container that accumulates (a list, deque or set entry, a step-keyed mapping)
    accumulating: bool = False
    #: the reference is to a graph node (``loss.grad_fn``, a ``GradientEdge``'s node), not a tensor:
    #: no ``.detach()`` of anything on its line removes it
    node: bool = False


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one look saw (after a check's step, or at the start of a watched call)."""

    held: tuple[Held, ...]
    #: the latest judged step when it looked (its graph is the one a loop may still hold)
    latest: int
    #: bytes by cause the steps' graphs keep that no reference found here explains
    unexplained: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: bytes by cause of the steps' graphs still alive (the growth curve), caller-held tensors excluded
    alive: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: live nodes below every reference held, by the step that created them
    nodes_by_step: tuple[int, ...] = ()
    #: live nodes below every reference held (and the latest loss, when the caller holds one)
    graph_nodes: int = 0
    #: live nodes of the judged steps below the references held (what the growth curve counts)
    held_nodes: int = 0
    #: what one graph node costs here, and how that was found (NOTE [What a node costs])
    node_bytes: int = 0
    node_cost_note: str = ""
    walk_errors: int = 0
    first_walk_error: str | None = None
    truncated: bool = False
    #: the walk's time budget, when that is what stopped it (NOTE [A bounded walk])
    walk_stopped_after: float | None = None
    cuda_allocated: int | None = None


@dataclasses.dataclass
class Collection:
    """References into the judged steps' graphs, with strong refs: describe and clear it soon.

    ``holders``: ``(hit, node, steps)`` for a tensor (or a graph node) whose graph
    reaches a judged step's, and ``(hit, None, {step})`` for a held leaf of a step.
    ``plain``: the other tensors the roots hold.
    """

    holders: list[tuple[Hit, Any, frozenset[int]]]
    plain: list[Hit]
    stats: WalkStats

    def nodes(self) -> list[Any]:
        return [node for _, node, _ in self.holders if node is not None]

    def clear(self) -> None:
        self.holders.clear()
        self.plain.clear()


def collect(
    roots: Sequence[Root],
    steps: StepGraphs,
    *,
    skip_ids: Iterable[int] = (),
    max_objects: int = 2_000_000,
    generic: bool = False,
) -> Collection:
    """Walk ``roots`` and sort what they reach: references into the judged steps' graphs, and
    plain tensors."""
    stats = WalkStats()
    holders: list[tuple[Hit, object, frozenset[int]]] = []
    plain: list[Hit] = []
    reached: dict[int, frozenset[int]] = {}
    for hit in walk(
        roots, skip_ids=skip_ids, max_objects=max_objects, stats=stats, generic=generic
    ):
        obj = hit.obj
        if safe.is_tensor(obj):
            node = safe.grad_fn(obj)
            if node is None:
                step = steps.leaf_step(obj)
                if step is not None and safe.requires_grad(obj):
                    holders.append((hit, None, frozenset({step})))
                else:
                    plain.append(hit)
                continue
        else:
            node = obj
        key = node_key(node)
        found = reached.get(key)
        if found is None:
            found = reached[key] = steps.reached(node)
        if found and not _only_extends_older(node, steps):
            holders.append((hit, node, found))
        elif safe.is_tensor(obj):
            plain.append(hit)
    return Collection(holders, plain, stats)


def _only_extends_older(node: Any, steps: StepGraphs) -> bool:
    """True when the judged steps only added graph-free nodes on top of a graph built before them.

    NOTE [Older graphs]: an accumulator that outlives checks and modes
    (``Engine.total = Engine.total + x``, with ``x`` computed under ``no_grad``)
    gets one new node per step on top of an older graph. That older graph is the
    leak of the step that built it, not of these; counting it here would make a
    forward-only verdict depend on what ran before it in the same process. What
    the graph reaches without entering the older graph decides: a node that still
    saves tensors, or a leaf (a parameter's gradient accumulator), is a step's own
    graph (a running sum ``total += loss`` after backward freed the loss's saved
    tensors still reaches the loss's whole graph down to the parameters).
    """
    older = False

    def stop(current: Any) -> bool:
        nonlocal older
        if steps.is_before(current):
            older = True
            return True
        return False

    for i, current in enumerate(iter_nodes([node], stop=stop)):
        if i >= 10_000:
            return False
        if sequence_nr(current) == UINT64_MAX:
            return False  # reaches a leaf outside the older graph
        if (
            next(saved_values(current), None) is not None
            or next(ctx_values(current), None) is not None
        ):
            return False  # a step's own nodes keep tensors
    return older


def caller_storages(found: Collection) -> set[tuple[str, int]]:
    """Storages the caller's roots hold directly (plain tensors, and the held tensors themselves):
    not retained by a graph, whatever a graph also keeps on them."""
    out = set()
    for hit in found.plain:
        key = storage_key(hit.obj)
        if key is not None:
            out.add(key)
    for hit, node, _ in found.holders:
        if node is not None and not kinds().is_node(hit.obj):
            key = storage_key(hit.obj)
            if key is not None:
                out.add(key)
    return out


def describe(
    hit: Hit,
    node: Any,
    reached: frozenset[int],
    steps: StepGraphs,
    *,
    excluded: set[tuple[str, int]],
    modules: Sequence[Any] = (),
    target_modules: Sequence[Any] = (),
    loop_roots: frozenset[str] = frozenset(),
    loss_nodes: frozenset[int] = frozenset(),
    graph: bool = True,
) -> Held:
    """The description of one reference (:class:`Held`); ``node`` is None for a held leaf.

    ``excluded``: storages not counted as retained (the model's parameters, what existed
    before, what the caller holds directly). ``modules``: whose lines are preferred as the
    created-at line; ``target_modules``: the target's own (for ``called_from``).
    ``loss_nodes``: identities of the nodes of the step's loss graph.
    """
    obj = hit.obj
    stats = ScanStats()
    sized = min(reached) if reached else None

    def one_step(n: Any) -> bool:  # a node (or leaf) of the step the reference is sized for
        if sequence_nr(n) == UINT64_MAX:
            leaf = accumulated_leaf(n)
            step_of_leaf = steps.leaf_step(leaf) if leaf is not None else None
            return step_of_leaf is None or step_of_leaf == sized
        step = steps.step_of(n)
        return step is None or step == sized

    if node is None:  # a held leaf: the leaf and its gradient
        items: list[tuple[str, Any]] = [(LEAF_GRAD, obj)]
        if safe.grad(obj) is not None:
            items.append((LEAF_GRAD, safe.grad(obj)))
        storages = step_storages = storage_map(items, excluded)
        keys: frozenset[int] = frozenset()
        step_keys: frozenset[int] = frozenset()
        grad_fn = "AccumulateGrad (leaf)"
    else:
        own = set()
        if safe.is_tensor(obj):  # a held graph tensor's own storage is its value, not its graph's
            key = storage_key(obj)
            if key is not None:
                own.add(key)
        _, found = graph_tensors([node], stop=steps.is_before, stats=stats)
        storages = storage_map([(g.cause, t) for g in found for t in g.tensors], excluded | own)
        found.clear()
        _, found = graph_tensors([node], stop=steps.is_before, count=one_step)
        step_storages = storage_map(
            [(g.cause, t) for g in found for t in g.tensors], excluded | own
        )
        found.clear()
        below = [
            n for n in iter_nodes([node], stop=steps.is_before) if sequence_nr(n) != UINT64_MAX
        ]
        keys = frozenset(node_key(n) for n in below)
        step_keys = frozenset(node_key(n) for n in below if one_step(n))
        below.clear()
        grad_fn = node_name(node)
    source = created_at(obj, modules) if node is not None else None
    return Held(
        path=hit.path,
        steps=reached,
        grad_fn=grad_fn,
        graph_nodes=len(step_keys),
        storages=storages,
        node_keys=keys,
        step_storages=step_storages,
        step_node_keys=step_keys,
        maxlen=_maxlen(hit.link),
        loop_local=_loop_local(hit, loop_roots),
        source=source,
        called_from=called_from(obj, source, target_modules) if source is not None else (),
        graph=view_of(
            obj,
            path=str(hit.path),
            max_nodes=FINDING_GRAPH_NODES,
            stop=steps.is_before,
            count_limit=FINDING_GRAPH_COUNT,
        )
        if graph and node is not None
        else None,
        backward_ran=stats.freed > 0 and stats.intact == 0,
        partly_freed=stats.freed > 0 and stats.intact > 0,
        feeds_loss=node is not None and node_key(node) in loss_nodes,
        leaf=node is None,
        accumulating=_through_accumulator(hit.link),
        node=kinds().is_node(obj),
    )


@dataclasses.dataclass
class Scene:
    """Where a look looks (NOTE [One look]): a check's trial or a watched job, as the look needs it.

    ``roots`` and ``modules`` are read when the look has settled the collector (a root made
    earlier could bring back an object only a cycle kept); ``loop_globals``: the names of
    global roots that are a running loop's own variables (NOTE [The loop's latest result]).
    """

    steps: StepGraphs
    roots: Callable[[], list[Root]]
    #: storages never counted as retained (the model's parameters, what existed before)
    excluded: Callable[[], set[tuple[str, int]]] = set
    skip_ids: Callable[[], set[int]] = set
    max_objects: int = 2_000_000
    #: whose lines are preferred as a holder's created-at line
    modules: Callable[[], Sequence[Any]] = tuple
    #: the target's own modules (for ``called_from``)
    target_modules: Sequence[Any] = ()
    loop_globals: Callable[[], Iterable[str]] = tuple
    #: identities of the nodes of the step's loss graph
    loss_nodes: frozenset[int] = frozenset()
    #: the generic walk also walks the tensors in a cycle through autograd (NOTE [Cycles through
    #: autograd])
    cycles: bool = False

    def collect(self, roots: list[Root], *, generic: bool = False) -> Collection:
        """References into the steps' graphs from ``roots``; ``generic``: with the walk's generic
        fallback, through every loaded module too (NOTE [Every loaded module])."""
        self.steps.forget_dead()
        walked = list(roots)
        if generic:
            walked.extend(
                module_roots(
                    skip=[r.name.partition(":")[2] for r in roots if r.kind is RootKind.GLOBAL]
                )
            )
            if self.cycles:
                walked.extend(cycle_roots(self.steps))
        try:
            return collect(
                walked,
                self.steps,
                skip_ids=self.skip_ids(),
                max_objects=self.max_objects,
                generic=generic,
            )
        finally:
            walked.clear()

    def sight(self, roots: list[Root], *, generic: bool, describe_all: bool) -> Sight:
        """Collect from ``roots`` and describe every reference found (when ``describe_all``)."""
        found = self.collect(roots, generic=generic)
        excluded = self.excluded() | caller_storages(found)
        held: list[Held] = []
        if describe_all:
            loops = set(self.loop_globals())
            loop_roots = frozenset(
                r.name for r in roots if r.kind is RootKind.GLOBAL and r.name in loops
            )
            modules = self.modules()
            held = [
                describe(
                    hit,
                    node,
                    reached,
                    self.steps,
                    excluded=excluded,
                    modules=modules,
                    target_modules=self.target_modules,
                    loop_roots=loop_roots,
                    loss_nodes=self.loss_nodes,
                )
                for hit, node, reached in found.holders
            ]
        return Sight(found, held, excluded, self.steps, generic)


@dataclasses.dataclass
class Sight:
    """What one look found, with strong references into the job: read it inside the look only."""

    found: Collection
    held: list[Held]
    #: storages not counted as retained: the scene's, and what the roots hold directly
    excluded: set[tuple[str, int]]
    steps: StepGraphs
    #: the generic walk found it (NOTE [Generic fallback])
    generic: bool = False

    def plain_ids(self) -> set[int]:
        return {id(hit.obj) for hit in self.found.plain}

    def alive(self, evidence: Iterable[Evidence]) -> dict[str, int]:
        """Bytes by cause of ``evidence`` still alive, what the roots hold directly not counted."""
        return evidence_alive(evidence, self.plain_ids(), self.excluded)

    def observe(
        self,
        latest: int,
        *,
        also: Iterable[object] = (),
        unexplained: Mapping[str, int] | None = None,
        alive: Mapping[str, int] | None = None,
        held_nodes: int | None = None,
        cuda: bool = False,
    ) -> Observation:
        """The :class:`Observation`: what was held, the live nodes below it (and below ``also``, the
        caller's latest loss) by step, the node cost when a graph is held, and the CUDA figure."""
        roots = self.found.nodes()
        roots.extend(also)
        nodes_by_step, total = self.steps.nodes_by_step(roots)
        roots.clear()
        held = self.held
        if held_nodes is None:
            held_nodes = len(frozenset().union(*(h.node_keys for h in held))) if held else 0
        cost = node_cost() if held or held_nodes else None
        stats = self.found.stats
        return Observation(
            tuple(held),
            latest,
            dict(unexplained or {}),
            dict(alive or {}),
            nodes_by_step,
            total,
            held_nodes,
            cost.bytes_per_node if cost else 0,
            cost.describe() if cost else "",
            stats.errors,
            stats.first_error,
            stats.truncated,
            stats.stopped_after,
            _cuda_allocated() if cuda else None,
        )

    def clear(self) -> None:
        self.found.clear()
        self.held = []


@contextlib.contextmanager
def look(
    scene: Scene,
    *,
    generic: bool = False,
    describe_all: bool = True,
    fallback: Callable[[Sight], bool] | None = None,
) -> Iterator[Sight]:
    """The one look (NOTE [One look]): settle, collect, describe, and walk generically when
    ``fallback`` says the typed walk explained too little (NOTE [Generic fallback]). What it
    holds is dropped when the ``with`` block ends."""
    settle()
    roots = scene.roots()
    sight = scene.sight(roots, generic=generic, describe_all=describe_all)
    try:
        if not generic and fallback is not None and fallback(sight):
            sight.clear()
            sight = scene.sight(roots, generic=True, describe_all=describe_all)
        roots.clear()
        yield sight
    finally:
        sight.clear()
        roots.clear()


def module_root(module: object) -> Root:
    """A module's globals as a root: the script's own (``__main__``) named by its file, as the user
    wrote them (``train.py:total_loss``); any other module's as ``global:pkg.mod``."""
    name = safe.module_name(module)
    if name in ("__main__", "__mp_main__"):
        file = safe.module_file(module)
        if file is not None:
            return Root(os.path.basename(file), module, RootKind.GLOBAL)
    return Root(f"global:{name}", module, RootKind.GLOBAL)


def live_step_nodes(steps: StepGraphs) -> dict[int, set[int]]:
    """Identities of the judged steps' graph nodes still alive, by step.

    # NOTE [Nodes as evidence]
    # Once backward has run, a held graph keeps no tensor a weakref could watch:
    # only its nodes, which take no weakrefs. But a node keeps the Python wrapper
    # a walk made for it for as long as it lives (NOTE [Node identity]), and the
    # steps' graphs were walked when each step ended, so the collector's young
    # generations list a wrapper for every node of theirs still alive. A step
    # node alive that no reference found explains is held by something the walk
    # did not reach (a library's module state: NOTE [Every loaded module]). On a
    # torch that does not preserve wrappers this finds nothing, and the tensor
    # evidence alone speaks.
    """
    out: dict[int, set[int]] = {}
    nodes = heap_nodes()
    for obj in nodes:
        step = steps.step_of(obj)
        if step is not None and step >= 0:
            out.setdefault(step, set()).add(node_key(obj))
    nodes.clear()
    return out


def unexplained_nodes(steps: StepGraphs, held: Iterable[Held]) -> dict[int, int]:
    """Per step, how many of its live nodes no described reference reaches (NOTE [Nodes as evidence])."""
    reached: set[int] = set()
    for h in held:
        reached |= h.node_keys
    return {
        step: len(keys - reached) for step, keys in live_step_nodes(steps).items() if keys - reached
    }


#: the root a reference cycle through autograd is named from (its owner tensor's attributes)
AUTOGRAD_CYCLE = "<autograd cycle>"


def cycle_roots(steps: StepGraphs, *, max_nodes: int = 100_000) -> list[Root]:
    """The attributes of tensors that sit in a reference cycle through autograd, as roots.

    # NOTE [Cycles through autograd]
    # ``out.derived = out * out``: the tensor's attribute holds a tensor computed from it, and
    # that tensor's graph saved ``out`` itself. The way back runs through autograd's C++ graph
    # (a saved variable keeps the tensor, and the tensor its Python object), which the cyclic
    # collector cannot traverse: once the loop drops ``out``, nothing reachable names it, and
    # the collector never frees it. A look settles the collector first, so a cycle still alive
    # then is uncollectable. Such an owner is found from the heap (tensors with public
    # attributes, made since the heap was frozen), and named by the attribute that closes the
    # cycle (``<autograd cycle>.derived``): the walk then describes what it keeps as it
    # describes any holder.
    """
    out: list[Root] = []
    objects = gc.get_objects()
    try:
        for obj in objects:
            if not safe.is_tensor(obj):
                continue
            attrs = kinds().tensor_attrs(obj)
            if attrs is None or not _closes_cycle(obj, attrs, steps, max_nodes):
                continue
            public = {
                key: value
                for key, value in list(attrs.items())
                if type(key) is str and not key.startswith("_")
            }
            out.append(Root(AUTOGRAD_CYCLE, public, RootKind.CYCLE))
    finally:
        objects.clear()
    return out


def _closes_cycle(
    owner: object, attrs: Mapping[str, object], steps: StepGraphs, max_nodes: int
) -> bool:
    """Whether a graph held under ``owner``'s public attributes saved ``owner`` itself."""
    starts = []
    for hit in walk([Root("attrs", dict(attrs), RootKind.CYCLE)], max_objects=10_000):
        node = safe.grad_fn(hit.obj) if safe.is_tensor(hit.obj) else hit.obj
        if node is not None and not safe.is_tensor(node):
            starts.append(node)
    try:
        for i, node in enumerate(iter_nodes(starts, stop=steps.is_before)):
            if i >= max_nodes:
                return False
            for _, value in (*saved_values(node), *ctx_values(node)):
                if value is owner:
                    return True
        return False
    finally:
        starts.clear()


def unnamed_owners(steps: StepGraphs, wanted: Iterable[int], *, depth: int = 6) -> dict[int, str]:
    """For each step in ``wanted`` whose graph no walked reference reaches, the object that keeps it,
    in words: the outermost Python object on the way back from a tensor of that graph, which no
    object the collector tracks refers to (so C++ or an extension holds it).

    # NOTE [Held from C++]
    # A hook registered on a graph node (``node.register_hook(lambda *g, kept=t: None)``) or an
    # extension's state keeps a tensor where no Python reference leads: the hook's dict is owned
    # by the C++ node. From the tensor back, through ``gc.get_referrers`` (the tensors, tuples,
    # functions and dicts made since the heap was frozen), the chain ends at an object nothing
    # tracked refers to; it is named (a function by its qualified name and line, a container by
    # what it holds) so the report says which object owns the graph, not only that one does.
    """
    out: dict[int, str] = {}
    todo = set(wanted)
    if not todo:
        return out
    tensors = [obj for obj in gc.get_objects() if safe.is_tensor(obj)]
    try:
        for t in tensors:
            node = safe.grad_fn(t)
            found = steps.reached(node, limit=10_000) & todo if node is not None else set()
            if not found:
                continue
            owner = _outermost(t, depth, ignore={id(tensors)})
            if owner is not None:
                for step in found:
                    out[step] = owner
                todo -= found
            if not todo:
                break
    finally:
        tensors.clear()
    return out


def _outermost(obj: object, depth: int, ignore: set[int]) -> str | None:
    """The description of the first object on ``obj``'s referrer chain that nothing tracked refers
    to (frames, and this search's own lists, left out); None when the chain is longer than ``depth``."""
    chain = [obj]
    ignore = ignore | {id(chain)}
    current = obj
    for _ in range(depth):
        refs = [
            r
            for r in gc.get_referrers(current)
            if id(r) not in ignore and not safe.is_instance(r, types.FrameType) and r is not chain
        ]
        ignore.add(id(refs))
        if not refs:
            return _describe_owner(current, chain) if current is not obj else None
        current = refs[0]
        refs.clear()
        chain.append(current)
    chain.clear()
    return None


def _describe_owner(owner: object, chain: list[object]) -> str:
    """``a dict that only C++ holds, with the function <lambda> (train.py:12) that keeps it``."""
    functions = [f for f in chain if type(f) is types.FunctionType]
    name = safe.type_name(type(owner))
    what = f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"
    if functions:
        fn = functions[-1]
        code = fn.__code__
        where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
        qualname = fn.__qualname__ if type(fn.__qualname__) is str else code.co_name
        text = (
            f"{what} that no Python object refers to (C++ holds it: a hook registered on a graph "
            f"node, or an extension's state), with the function {qualname} ({where}) that keeps "
            "the graph"
        )
    else:
        text = (
            f"{what} that no Python object refers to (C++ holds it: a hook registered on a graph "
            "node, or an extension's state)"
        )
    chain.clear()
    return text


def module_roots(skip: Iterable[str] = ()) -> list[Root]:
    """Every loaded module whose state can hold a graph, as ``global:`` roots.

    # NOTE [Every loaded module]
    # A holder can sit in a library's module state the job never names: a
    # logging library's current run and the history rows it appends each step's
    # loss to (``global:library.run.history[3]``). When a step's graph is alive
    # and nothing the caller reaches explains it, the generic walk looks through
    # the globals of every loaded module but the standard library's, torch's and
    # leakscope's own (:func:`leakscope.probe.library.is_state_module`), bounded by
    # the walk's object limit, each object once.
    """
    # NOTE [The collector's own lists]
    # Two lists of the gc module keep objects alive that no other module names:
    # ``gc.garbage`` (every object a collection found unreachable while the job
    # set ``gc.DEBUG_SAVEALL``, or one it could not free) and ``gc.callbacks``
    # (closures run around each collection). A step's graph in either is named
    # ``global:gc.garbage[0].value``, not "<unknown holder>"; the walk reaches them
    # only when one is not empty (the standard library is otherwise not walked).

    seen = set(skip)
    out = []
    if (gc.garbage or gc.callbacks) and "gc" not in seen:
        seen.add("gc")
        out.append(Root("global:gc", gc, RootKind.GLOBAL))
    for (
        name,
        module,
    ) in safe.loaded_modules():  # real modules only (NOTE [Reads that run no user code])
        if name in seen or not is_state_module(name):
            continue
        seen.add(name)
        out.append(module_root(module))
    return out


def _maxlen(link: Link) -> int | None:
    """The ``maxlen`` of the deque the reference sits in, if it does."""
    return safe.maxlen(link.container)


def _accumulates(link: Link) -> bool:
    """A step of the path into a container that grows: a list, a deque or a set entry, or a
    mapping value under a key that is not a name (``history[step]``)."""
    container = link.container
    if link.kind is LinkKind.SET:
        return True
    if link.kind is not LinkKind.ITEM:
        return False
    if safe.is_instance(container, (list, deque)):
        return True
    if safe.is_instance(container, dict):
        return not (type(link.key) is str and link.key.isidentifier())
    return False


def _through_accumulator(link: Link | None) -> bool:
    while link is not None and link.parent is not None:
        if _accumulates(link):
            return True
        link = link.parent
    return False


def _loop_local(hit: Hit, loop_roots: frozenset[str]) -> bool:
    """NOTE [The loop's latest result]: held by a loop's own variable, not through a container
    that accumulates nor an object's state (``out = step(...)`` and ``out["loss"]``, not
    ``outputs[0]`` nor ``self._results.minimize``)."""
    if not (hit.root.kind is RootKind.CALLER or hit.root.name in loop_roots):
        return False
    return not _through_accumulator(hit.link) and not _through_state(hit.link)


def _through_state(link: Link | None) -> bool:
    """A step of the path through an object's attribute: state the loop does not rebind."""
    while link is not None and link.parent is not None:
        if link.kind in (LinkKind.ATTR, LinkKind.SLOT, LinkKind.CLASSATTR):
            return True
        link = link.parent
    return False


def _cuda_allocated() -> int | None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return int(torch.cuda.memory_allocated())
    return None


def evidence_alive(
    evidence: Iterable[Evidence], plain_ids: set[int], excluded: set[tuple[str, int]]
) -> dict[str, int]:
    """Bytes by cause of the evidence still alive (weakrefs to what the steps' graphs kept)."""
    alive = []
    for ev in evidence:
        alive.extend(ev.alive(plain_ids))
    out = alive_bytes(alive, excluded)
    alive.clear()
    return out


__all__ = [
    "AUTOGRAD_CYCLE",
    "Collection",
    "Held",
    "Observation",
    "collect",
    "cycle_roots",
    "describe",
    "evidence_alive",
    "live_step_nodes",
    "Scene",
    "Sight",
    "look",
    "module_root",
    "module_roots",
    "caller_storages",
    "unexplained_nodes",
    "unnamed_owners",
]
