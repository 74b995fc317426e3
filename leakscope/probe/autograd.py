"""Read an autograd graph without side effects: nodes, saved tensors, leaves.

# NOTE [Reading saved tensors]
# ``node._saved_<name>`` unpacks: under non-reentrant checkpoint it re-runs the
# checkpointed block, and after backward it raises. ``node._raw_saved_<name>``
# returns the ``SavedTensor`` handle; its ``.data`` is the packed object (the
# tensor, a checkpoint ``_Holder``, or ``None`` once backward freed it). We only
# ever read ``.data`` and degrade to "nothing saved" on torch versions without it.

Everything here is iterative (no recursion limit for 1M-node graphs) and keeps
references only for the duration of one call.

# NOTE [Deep graphs after a Python walk]
# Since torch made ``Node`` an intrusive_ptr with PyObject preservation (2.13),
# a node keeps the Python wrapper that ``next_functions`` created for it for as
# long as the node lives, and freeing a *chain* of such nodes recurses once per
# node through the wrapper's dealloc. Any Python walk (ours, torchviz's, a bare
# DFS) over a chain deeper than about 50k nodes therefore makes the later
# ``del`` of that graph overflow an 8 MiB C stack (a segfault). A check only
# walks its tiny trial graphs, so it is not affected; code that scans a big
# retained graph should drop the graph in a thread with a large stack (see
# ``benchmarks/graph_scan.py``). Wide graphs are not affected.
"""

from __future__ import annotations

import dataclasses
import gc
import types
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from leakscope.probe.safe import (
    error_line,
    instance_dict,
    is_exactly,
    is_instance,
    is_node_type,
    is_plain_tensor,
    is_tensor,
    numel_bytes,
    storage,
)
from leakscope.probe.safe import grad as read_grad
from leakscope.results import Cause

if TYPE_CHECKING:
    from torch import Tensor
    from torch.autograd.graph import Node

    from leakscope.probe.walk import WalkStats

UINT64_MAX = 2**64 - 1

# The cause classes the probes sort tensors into (:class:`leakscope.results.Cause`), and the
# order a storage reached under several is attributed in.
LEAF_GRAD = Cause.LEAF_GRAD
CTX = Cause.CTX
ACTIVATIONS = Cause.ACTIVATIONS
NODES_ONLY = Cause.NODES_ONLY
UNTIL_GC = Cause.UNTIL_GC
CAUSE_ORDER = (LEAF_GRAD, CTX, ACTIVATIONS)

_raw_names_by_type: dict[type, tuple[str, ...]] = {}


def _raw_saved_names(node: Node) -> tuple[str, ...]:
    tp = type(node)
    names = _raw_names_by_type.get(tp)
    if names is None:
        names = tuple(n for n in dir(tp) if n.startswith("_raw_saved_"))
        _raw_names_by_type[tp] = names
    return names


@dataclasses.dataclass(frozen=True)
class _NodeType:
    """What every node of one autograd node type offers, read once per type.

    # NOTE [Per-type node facts]
    # A graph of 1M nodes has a few dozen node types. Everything that depends
    # only on the type (its name, whether it is an AccumulateGrad holding a
    # leaf, its ``_raw_saved_`` slots, whether instances carry a ctx
    # ``__dict__``) is computed once here instead of per node: per-node
    # ``try: node.variable`` and ``object.__getattribute__(node, "__dict__")``
    # raised and caught an AttributeError on almost every node, which made the
    # scan ten times slower than the walk itself.
    """

    name: str
    leaf: bool
    raw_saved: tuple[tuple[str, str], ...]
    has_dict: bool


_node_types: dict[type, _NodeType] = {}


def _node_type(node: Node) -> _NodeType:
    tp = type(node)
    info = _node_types.get(tp)
    if info is None:
        names = dir(tp)
        info = _NodeType(
            name=node_name(node),
            leaf="variable" in names,
            raw_saved=tuple((n, n[len("_raw_saved_") :]) for n in _raw_saved_names(node)),
            # C++ nodes have no instance dict; custom Function nodes do (their ctx).
            has_dict=getattr(tp, "__dictoffset__", 0) != 0,
        )
        _node_types[tp] = info
    return info


class Inspection:
    """Objects the probes could not read, counted (never silently skipped) and reported as one
    warning line on the result: "3 objects could not be inspected; first: TypeError ... at engine.x"."""

    def __init__(self) -> None:
        self.errors = 0
        self.first: str | None = None

    def reset(self) -> None:
        self.errors = 0
        self.first = None

    def note(self, exc: BaseException, where: str) -> None:
        self.errors += 1
        if self.first is None:
            self.first = error_line(exc, where, short=True)

    def add(self, stats: WalkStats) -> None:
        """Fold in a walk's counts (:class:`leakscope.probe.walk.WalkStats`)."""
        if stats.errors:
            self.errors += stats.errors
            self.first = self.first or stats.first_error

    def warning(self) -> str | None:
        if not self.errors:
            return None
        noun = "object" if self.errors == 1 else "objects"
        return f"{self.errors} {noun} could not be inspected; first: {self.first}"


#: the running check's tally (a check judges one target and mode at a time per process)
INSPECTION = Inspection()


def sequence_nr(node: Node) -> int:
    """The node's creation number (per thread); ``UINT64_MAX`` for AccumulateGrad.

    A node whose number cannot be read is counted in :data:`INSPECTION` and
    treated as not this step's.
    """
    try:
        return int(node._sequence_nr())
    except Exception as exc:
        INSPECTION.note(exc, f"{node_name(node)}._sequence_nr()")
        return UINT64_MAX


def node_name(node: Node) -> str:
    """The node's name (``AddBackward0``), read once per node type: a type's nodes share it
    (NOTE [Per-type node facts]; a 10^6-node chain asks it of every node)."""
    tp = type(node)
    name = _names.get(tp)
    if name is None:
        try:
            name = str(node.name())
        except Exception:
            name = tp.__name__
        name = name.replace("torch::autograd::", "")
        _names[tp] = name
    return name


_names: dict[type, str] = {}


def heap_nodes() -> list[Node]:
    """Every graph node's Python wrapper the collector tracks (NOTE [Nodes as evidence] in
    leakscope/harness/observe.py), each object's type tested once per type: a look over a
    heap of 10^6 walked nodes costs one pass."""

    verdicts: dict[int, bool] = {}  # id(type) -> a node type; the objects listed pin their types
    objects = gc.get_objects()
    for tp in {id(tp): tp for tp in map(type, objects)}.values():
        verdicts[id(tp)] = is_node_type(tp)
    get = verdicts.__getitem__
    out = [obj for obj, key in zip(objects, map(id, map(type, objects))) if get(key)]
    objects.clear()
    return out


def next_nodes(node: Node) -> list[Node]:
    try:
        return [n for n, _ in node.next_functions if n is not None]
    except Exception:
        return []


def iter_nodes(
    roots: Iterable[Node | None], stop: Callable[[Node], bool] | None = None
) -> Iterator[Node]:
    """Every node reachable from ``roots``, each once, without recursion.

    ``stop(node)`` True: the node is neither yielded nor entered (a graph built
    before the steps that are judged; NOTE [A step's graph] in leakscope/probe/steps.py).
    """
    seen: dict[int, Node] = {}  # holds the Python wrappers so ids stay unique
    stack = [r for r in roots if r is not None]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        key = id(node)
        if key in seen:
            continue
        seen[key] = node
        if stop is not None and stop(node):
            continue
        yield node
        try:
            edges = node.next_functions
        except Exception:
            continue
        for nxt, _ in edges:
            if nxt is not None and id(nxt) not in seen:
                push(nxt)
    seen.clear()


def wrappers_preserved() -> bool:
    """Whether torch keeps one Python wrapper per graph node for the node's life (2.13 does)."""
    if _PRESERVED:
        return _PRESERVED[0]
    import torch

    with torch.enable_grad():
        leaf = torch.zeros(1, requires_grad=True)
        out = (leaf * 2).neg()
    node = out.grad_fn
    assert node is not None
    first = id(node.next_functions[0][0])
    churn = [object() for _ in range(64)]  # let a freed wrapper's address be reused
    same = first == id(node.next_functions[0][0])
    churn.clear()
    _PRESERVED.append(same)
    return same


_PRESERVED: list[bool] = []


def node_key(node: Node) -> int:
    """An identity of ``node`` that lasts as long as the node does.

    # NOTE [Node identity]
    # Graph nodes take no weak references. Since torch 2.13 the Python wrapper
    # of a node lives as long as the node (PyObject preservation), so ``id`` of
    # the wrapper is the node's identity; on older torch every
    # ``next_functions`` read makes a new wrapper, and the identity is the
    # node's own ``metadata`` dict, which the C++ node keeps.
    """
    if wrappers_preserved():
        return id(node)
    try:
        return id(node.metadata)
    except Exception:
        return id(node)


def accumulated_leaf(node: Node) -> Tensor | None:
    """The leaf an ``AccumulateGrad`` node holds, else ``None``."""
    try:
        leaf: Tensor = node.variable  # type: ignore[attr-defined]  # AccumulateGrad's own
        return leaf
    except Exception:
        return None


def saved_values(node: Node) -> Iterator[tuple[str, Any]]:
    """``(slot, packed object)`` for each still-saved slot of ``node``; see NOTE above."""
    for name in _raw_saved_names(node):
        try:
            raw = getattr(node, name)
        except Exception:
            continue
        handles = raw if isinstance(raw, (tuple, list)) else (raw,)
        for i, handle in enumerate(handles):
            try:
                data = handle.data
            except Exception:
                continue
            if data is not None:
                slot = name[len("_raw_saved_") :]
                yield (slot if len(handles) == 1 else f"{slot}[{i}]"), data


def ctx_values(node: Node) -> Iterator[tuple[str, Any]]:
    """Attributes a custom ``autograd.Function`` stored on its ctx (``ctx.x = t``)."""
    d = instance_dict(node)
    if d is not None:
        yield from list(d.items())


@dataclasses.dataclass
class ScanStats:
    """What one :func:`graph_tensors` scan counted.

    # NOTE [Freed by backward]
    # ``backward()`` (without ``retain_graph``) frees every saved tensor of the
    # nodes it runs through, and reading a freed slot's raw handle gives
    # ``None``. An optional input the op did not get (``layer_norm`` without a
    # weight) reads ``None`` too, so one ``None`` proves nothing; a node whose
    # saved slots are *all* ``None`` is one backward ran through. A held graph
    # whose nodes are all freed is one the step's (or the framework's) backward
    # already ran on; one with intact nodes still waits for a backward, or is a
    # side branch backward never reached.
    """

    #: graph nodes scanned, AccumulateGrad nodes and nodes of older graphs not included
    nodes: int = 0
    #: AccumulateGrad nodes (leaves)
    leaves: int = 0
    #: nodes with saved slots that still hold something
    intact: int = 0
    #: nodes with saved slots that backward has freed (NOTE above)
    freed: int = 0


class SavedGroup(NamedTuple):
    """The tensors one kind of slot keeps alive across a graph, and why.

    # NOTE [Grouped scan results]
    # A 1M-node graph keeps about a million tensors alive through a few dozen
    # distinct ``(node type, slot)`` pairs. Building a record per tensor (a
    # NamedTuple, or even a plain 4-tuple) was a fifth of the scan; appending
    # each tensor to its group's list, with the bound ``append`` cached per
    # node type for the duration of one scan, costs one C call.
    """

    cause: str
    node: str
    slot: str
    tensors: list[Tensor]


# Node kinds of the scan, decided once per node type (NOTE [Per-type node facts]).
_ONE_SLOT, _SLOTS, _LEAF = 0, 1, 2


def graph_tensors(
    roots: Iterable[Node | None],
    *,
    with_leaves: bool = True,
    stop: Callable[[Node], bool] | None = None,
    stats: ScanStats | None = None,
    count: Callable[[Node], bool] | None = None,
) -> tuple[int, list[SavedGroup]]:
    """Count the nodes reachable from ``roots`` and group the tensors they keep alive.

    One iterative pass (no recursion limit) at close to the speed of a bare
    DFS over ``next_functions``; see NOTE [Per-type node facts], NOTE [Grouped
    scan results] and docs/performance.md. ``stop(node)`` True: a node of a
    graph built before the judged steps, neither counted nor entered (NOTE [A step's graph]).
    ``stats`` receives the counts a judge needs (:class:`ScanStats`). ``count(node)`` False: the
    node is walked through but its tensors are not grouped nor the node counted (another step's
    node between a held reference and the step it is sized for).
    """
    import torch

    tensor_type = torch.Tensor

    def is_plain(obj: object) -> bool:
        """A tensor that is not a Parameter, decided by type (NOTE [Reads that run no user code]):
        exact ``torch.Tensor`` (almost every saved tensor) at once."""
        return type(obj) is tensor_type or is_plain_tensor(obj)

    groups: dict[tuple[str, str, str], list[Tensor]] = {}

    def group(cause: str, name: str, slot: str) -> Callable[[Tensor], None]:
        return groups.setdefault((cause, name, slot), []).append

    # Per node type, for this scan: (kind, attribute, append) for a node with
    # one saved slot, (kind, ((attribute, slot, append), ...), info) otherwise.
    kinds: dict[type, tuple[int, Any, Any]] = {}
    general: dict[type, tuple[Any, _NodeType]] = {}

    def kind_of(node: Node) -> tuple[int, Any, Any]:
        info = _node_types.get(type(node)) or _node_type(node)
        slots = tuple(
            (attr, slot, group(ACTIVATIONS, info.name, slot)) for attr, slot in info.raw_saved
        )
        if info.leaf:
            kind: tuple[int, object, object] = (_LEAF, None, None)
        elif len(slots) == 1 and not info.has_dict:
            kind = (_ONE_SLOT, slots[0][0], slots[0][2])
        else:
            kind = (_SLOTS, slots, info)
        kinds[type(node)] = kind
        general[type(node)] = (slots, info)
        return kind

    def read_slots(node: Node, slots: tuple[tuple[str, str, Any], ...], info: _NodeType) -> bool:
        """Group the node's saved tensors; True when any saved slot still holds something."""
        held = False
        for attr, slot, put in slots:
            try:
                raw = getattr(node, attr)
            except Exception as exc:
                # A custom Function's saved tensors raise once backward freed them: nothing held.
                # Anything else is counted: a slot we cannot read may hide retained bytes.
                if not (isinstance(exc, RuntimeError) and "already been freed" in str(exc)):
                    INSPECTION.note(exc, f"{info.name}.{attr}")
                continue
            try:
                data = raw.data  # a tuple of handles has no .data
            except AttributeError:
                if type(raw) is tuple or type(raw) is list:
                    for i, handle in enumerate(raw):
                        data = _packed(handle)
                        held = held or data is not None
                        if data is not None and is_plain(data):
                            group(
                                ACTIVATIONS, info.name, slot if len(raw) == 1 else f"{slot}[{i}]"
                            )(data)
                        elif data is not None:
                            packed.append(data)
                continue
            except Exception as exc:
                INSPECTION.note(exc, f"{info.name}.{attr}.data")
                continue
            held = held or data is not None
            if data is not None and is_plain(data):
                put(data)
            elif data is not None:
                packed.append(data)
        if info.has_dict:
            for slot, value in ctx_values(node):
                if is_plain(value):
                    group(CTX, info.name, f"ctx.{slot}")(value)
        return held

    put_leaf = group(LEAF_GRAD, "AccumulateGrad", "variable")
    put_grad = group(LEAF_GRAD, "AccumulateGrad", "variable.grad")
    packed: list[
        object
    ] = []  # saved objects that are not tensors: checkpoint holders (NOTE [Checkpoint frames])
    intact = gone = stopped = leaves = 0
    check_count = count is not None
    check_stop = stop is not None
    seen: set[Node] = set()  # holds the Python wrappers, so identity stays unique
    mark = seen.add
    stack = [r for r in roots if r is not None]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if node in seen:
            continue
        mark(node)
        kind, a, b = kinds.get(type(node)) or kind_of(node)
        if kind == _LEAF:
            leaves += 1
            if with_leaves and (not check_count or count(node)):  # type: ignore[misc]
                leaf = accumulated_leaf(node)
                if leaf is not None and is_plain(leaf):
                    put_leaf(leaf)
                    grad = read_grad(leaf)
                    if grad is not None:
                        put_grad(grad)
            continue
        if check_stop and stop(node):  # type: ignore[misc]
            stopped += 1
            continue  # a graph built before the judged steps (NOTE [A step's graph])
        if check_count and not count(node):  # type: ignore[misc]
            stopped += 1
        elif kind == _ONE_SLOT:
            try:
                data = getattr(node, a).data  # the hot path
            except Exception:
                read_slots(node, *general[type(node)])  # a tuple of handles, or an odd torch
            else:
                if data is not None:
                    intact += 1
                    if type(data) is tensor_type or is_plain(data):
                        b(data)
                    else:
                        packed.append(data)
                else:
                    gone += 1
        else:
            if read_slots(node, a, b):
                intact += 1
            elif a:
                gone += 1
        try:
            edges = node.next_functions
        except Exception:
            continue
        for nxt, _ in edges:
            if nxt is not None and nxt not in seen:
                push(nxt)
    total = len(seen)
    seen.clear()
    if stats is not None:
        stats.nodes, stats.leaves, stats.intact, stats.freed = (
            total - stopped - leaves,
            leaves,
            intact,
            gone,
        )
    if packed:
        for slot, t in checkpoint_tensors(packed):
            if is_plain(t):
                group(ACTIVATIONS, "checkpoint", slot)(t)
        packed.clear()
    return total, [
        SavedGroup(cause, name, slot, tensors)
        for (cause, name, slot), tensors in groups.items()
        if tensors
    ]


def checkpoint_tensors(packed: list[object]) -> list[tuple[str, Tensor]]:
    """The tensors non-reentrant checkpoint keeps for the holders in ``packed``.

    # NOTE [Checkpoint frames]
    # Under non-reentrant ``torch.utils.checkpoint`` a node saves a ``_Holder``
    # instead of a tensor, and the checkpoint's frame keeps what recomputation
    # needs: the block's inputs (``saved_args``), the RNG state it ran with
    # (``fwd_cpu_state``, 5 KiB on CPU, and one state per device) and anything
    # already recomputed. The frame is reachable from the holders only through
    # the saved variables' unpack hooks (C++), so it is found the other way
    # round: each frame lists its holders by weakref. Nothing is unpacked and no
    # block is re-run; the frames are listed from the collector's young
    # generations, which during a check (and after a watch's first call) hold
    # only what was made since (NOTE [Frozen heap]).
    """

    try:
        from torch.utils.checkpoint import _CheckpointFrame
    except ImportError:
        return []
    wanted = {id(obj) for obj in packed}
    out: list[tuple[str, Tensor]] = []
    seen: set[int] = set()
    for obj in gc.get_objects():
        if type(obj) is not _CheckpointFrame or id(obj) in seen:
            continue
        try:
            holders = [ref() for ref in getattr(obj, "weak_holders", ())]
        except Exception:
            continue
        if not any(h is not None and id(h) in wanted for h in holders):
            continue
        seen.add(id(obj))
        out.extend(_frame_tensors(obj))
    return out


def _frame_tensors(frame: object) -> list[tuple[str, Tensor]]:
    """Inputs, RNG states and recomputed tensors a checkpoint frame keeps (never unpacking; what the
    checkpointed block was given can be any object, so each is tested by type alone)."""
    out: list[tuple[str, Tensor]] = []
    d = instance_dict(frame) or {}
    saved: Any = d.get("saved_args")
    for arg in saved if is_exactly(saved, (tuple, list)) else ():
        if is_tensor(arg):
            out.append(("checkpoint input", arg))
    fn = d.get("recompute_fn")
    for cell in (fn.__closure__ or ()) if type(fn) is types.FunctionType else ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        values = value if is_exactly(value, (list, tuple)) else (value,)
        for v in values:
            if is_tensor(v):
                out.append(("checkpoint rng state", v))
    recomputed_all: Any = d.get("recomputed")
    for recomputed in recomputed_all if is_exactly(recomputed_all, (list, tuple)) else ():
        if is_instance(recomputed, dict):
            for v in list(dict.values(recomputed)):
                if is_tensor(v):
                    out.append(("checkpoint recomputed", v))
    return out


def _packed(handle: Any) -> Any:
    """The packed object of a ``SavedTensor`` handle, or None; see NOTE [Reading saved tensors]."""
    try:
        return handle.data
    except Exception:
        return None


def storage_key(t: Tensor) -> tuple[str, int] | None:
    """Identity of the storage behind ``t`` (views share it), or None if unknown."""
    found = storage(t)
    return (found[0], found[1]) if found is not None else None


def storage_nbytes(t: Tensor) -> int:
    """Bytes of the whole storage (a view keeps its whole base alive)."""
    found = storage(t)
    return found[2] if found is not None else numel_bytes(t)


StorageMap = dict[tuple[str, int], tuple[str, int]]


def storage_map(items: Iterable[tuple[str, Tensor]], exclude: set[tuple[str, int]]) -> StorageMap:
    """``{storage: (cause, nbytes)}`` over ``(cause, tensor)`` pairs, each storage once.

    Storages in ``exclude`` (Parameters, what the caller holds directly, what
    existed before the step) are not counted. A storage reached under several
    causes is attributed to the first in :data:`CAUSE_ORDER`.
    """
    out: StorageMap = {}
    for cause, t in items:
        found = storage(t)
        if found is None:
            continue
        key = (found[0], found[1])
        if key in exclude:
            continue
        current = out.get(key)
        if current is None or _rank(cause) < _rank(current[0]):
            out[key] = (cause, found[2])
    return out


def _rank(cause: str) -> int:
    return CAUSE_ORDER.index(cause) if cause in CAUSE_ORDER else len(CAUSE_ORDER)


def bytes_by_cause(storages: StorageMap) -> dict[str, int]:
    """Sum a storage map per cause."""
    totals: dict[str, int] = {}
    for cause, nbytes in storages.values():
        totals[cause] = totals.get(cause, 0) + nbytes
    return dict(sorted(totals.items()))


def account(items: Iterable[tuple[str, Tensor]], exclude: set[tuple[str, int]]) -> dict[str, int]:
    """Bytes per cause over ``(cause, tensor)`` pairs; see :func:`storage_map`."""
    return bytes_by_cause(storage_map(items, exclude))
