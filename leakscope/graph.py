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
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

UINT64_MAX = 2**64 - 1

# Cause classes, in the order a shared storage is attributed.
LEAF_GRAD = "leaf+grad"
CTX = "ctx"
ACTIVATIONS = "activations"
NODES_ONLY = "nodes-only"
UNTIL_GC = "until-gc"
CAUSE_ORDER = (LEAF_GRAD, CTX, ACTIVATIONS)

_raw_names_by_type: dict[type, tuple[str, ...]] = {}


def _raw_saved_names(node: Any) -> tuple[str, ...]:
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


def _node_type(node: Any) -> _NodeType:
    tp = type(node)
    info = _node_types.get(tp)
    if info is None:
        names = dir(tp)
        info = _NodeType(
            name=node_name(node),
            leaf="variable" in names,
            raw_saved=tuple((n, n[len("_raw_saved_"):]) for n in _raw_saved_names(node)),
            # C++ nodes have no instance dict; custom Function nodes do (their ctx).
            has_dict=getattr(tp, "__dictoffset__", 0) != 0,
        )
        _node_types[tp] = info
    return info


def sequence_nr(node: Any) -> int:
    """The node's creation number (per thread); ``UINT64_MAX`` for AccumulateGrad."""
    try:
        return int(node._sequence_nr())
    except Exception:
        return UINT64_MAX


def node_name(node: Any) -> str:
    try:
        name = str(node.name())
    except Exception:
        name = type(node).__name__
    return name.replace("torch::autograd::", "")


def next_nodes(node: Any) -> list[Any]:
    try:
        return [n for n, _ in node.next_functions if n is not None]
    except Exception:
        return []


def iter_nodes(roots: Iterable[Any]) -> Iterator[Any]:
    """Every node reachable from ``roots``, each once, without recursion."""
    seen: dict[int, Any] = {}  # holds the Python wrappers so ids stay unique
    stack = [r for r in roots if r is not None]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        key = id(node)
        if key in seen:
            continue
        seen[key] = node
        yield node
        try:
            edges = node.next_functions
        except Exception:
            continue
        for nxt, _ in edges:
            if nxt is not None and id(nxt) not in seen:
                push(nxt)
    seen.clear()


def accumulated_leaf(node: Any) -> Any:
    """The leaf an ``AccumulateGrad`` node holds, else ``None``."""
    try:
        return node.variable
    except Exception:
        return None


def saved_values(node: Any) -> Iterator[tuple[str, Any]]:
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
                slot = name[len("_raw_saved_"):]
                yield (slot if len(handles) == 1 else f"{slot}[{i}]"), data


def ctx_values(node: Any) -> Iterator[tuple[str, Any]]:
    """Attributes a custom ``autograd.Function`` stored on its ctx (``ctx.x = t``)."""
    try:
        d = object.__getattribute__(node, "__dict__")
    except Exception:
        return
    if type(d) is dict:
        yield from list(d.items())


class GraphTensor(NamedTuple):
    """A tensor the graph keeps alive, and why.

    A NamedTuple built with ``tuple.__new__`` in the hot loop: a dataclass
    ``__init__`` per saved tensor was a measurable share of a 1M-node scan.
    """

    cause: str
    tensor: Any
    node: str
    slot: str


def graph_tensors(
    roots: Iterable[Any], *, with_leaves: bool = True, after_seq: int | None = None
) -> tuple[int, list[GraphTensor]]:
    """Count the nodes reachable from ``roots`` and list the tensors they keep alive.

    One iterative pass (no recursion limit) at about a million nodes per second;
    see NOTE [Per-type node facts] and docs/performance.md.
    """
    import torch

    tensor_type = torch.Tensor
    param_type = torch.nn.Parameter

    def is_plain(obj: Any) -> bool:
        """A tensor that is not a Parameter. ``isinstance(x, Parameter)`` runs
        ``_ParameterMeta.__instancecheck__`` in Python (0.4 us), so exact
        ``torch.Tensor`` (almost every saved tensor) is decided by type alone."""
        return type(obj) is tensor_type or (isinstance(obj, tensor_type) and not isinstance(obj, param_type))

    types = _node_types
    found: list[GraphTensor] = []
    add = found.append
    make = tuple.__new__
    gt = GraphTensor
    seen: dict[int, Any] = {}  # holds the Python wrappers so ids stay unique
    stack = [r for r in roots if r is not None]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        key = id(node)
        if key in seen:
            continue
        seen[key] = node
        info = types.get(type(node)) or _node_type(node)
        if after_seq is not None and not info.leaf and sequence_nr(node) <= after_seq:
            continue  # a graph built before this step: not this step's (NOTE [Older graphs])
        if info.leaf:
            if with_leaves:
                leaf = accumulated_leaf(node)
                if leaf is not None and is_plain(leaf):
                    add(make(gt, (LEAF_GRAD, leaf, "AccumulateGrad", "variable")))
                    grad = leaf.grad
                    if grad is not None:
                        add(make(gt, (LEAF_GRAD, grad, "AccumulateGrad", "variable.grad")))
            continue
        for attr, slot in info.raw_saved:
            try:
                raw = getattr(node, attr)
                data = raw.data  # the hot path; a tuple of handles has no .data
            except AttributeError:
                if type(raw) is tuple or type(raw) is list:
                    for i, handle in enumerate(raw):
                        data = _packed(handle)
                        if data is not None and (type(data) is tensor_type or is_plain(data)):
                            add(make(gt, (ACTIVATIONS, data, info.name, slot if len(raw) == 1 else f"{slot}[{i}]")))
                continue
            except Exception:
                continue
            if data is not None and (type(data) is tensor_type or is_plain(data)):
                add(make(gt, (ACTIVATIONS, data, info.name, slot)))
        if info.has_dict:
            for slot, value in ctx_values(node):
                if is_plain(value):
                    add(make(gt, (CTX, value, info.name, f"ctx.{slot}")))
        try:
            edges = node.next_functions
        except Exception:
            continue
        for nxt, _ in edges:
            if nxt is not None and id(nxt) not in seen:
                push(nxt)
    count = len(seen)
    seen.clear()
    return count, found


def _packed(handle: Any) -> Any:
    """The packed object of a ``SavedTensor`` handle, or None; see NOTE [Reading saved tensors]."""
    try:
        return handle.data
    except Exception:
        return None


def storage_key(t: Any) -> tuple[str, int] | None:
    """Identity of the storage behind ``t`` (views share it), or None if unknown."""
    try:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
    except Exception:
        return None
    if ptr == 0:
        return None
    return (str(t.device), int(ptr))


def storage_nbytes(t: Any) -> int:
    """Bytes of the whole storage (a view keeps its whole base alive)."""
    try:
        return int(t.untyped_storage().nbytes())
    except Exception:
        try:
            return int(t.numel() * t.element_size())
        except Exception:
            return 0


StorageMap = dict[tuple[str, int], tuple[str, int]]


def storage_map(items: Iterable[tuple[str, Any]], exclude: set[tuple[str, int]]) -> StorageMap:
    """``{storage: (cause, nbytes)}`` over ``(cause, tensor)`` pairs, each storage once.

    Storages in ``exclude`` (Parameters, what the caller holds directly, what
    existed before the step) are not counted. A storage reached under several
    causes is attributed to the first in :data:`CAUSE_ORDER`.
    """
    out: StorageMap = {}
    for cause, t in items:
        key = storage_key(t)
        if key is None or key in exclude:
            continue
        current = out.get(key)
        if current is None or _rank(cause) < _rank(current[0]):
            out[key] = (cause, storage_nbytes(t))
    return out


def _rank(cause: str) -> int:
    return CAUSE_ORDER.index(cause) if cause in CAUSE_ORDER else len(CAUSE_ORDER)


def bytes_by_cause(storages: StorageMap) -> dict[str, int]:
    """Sum a storage map per cause."""
    totals: dict[str, int] = {}
    for cause, nbytes in storages.values():
        totals[cause] = totals.get(cause, 0) + nbytes
    return dict(sorted(totals.items()))


def account(items: Iterable[tuple[str, Any]], exclude: set[tuple[str, int]]) -> dict[str, int]:
    """Bytes per cause over ``(cause, tensor)`` pairs; see :func:`storage_map`."""
    return bytes_by_cause(storage_map(items, exclude))
