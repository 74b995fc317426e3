"""Read an autograd graph without side effects: nodes, saved tensors, leaves.

# NOTE [Reading saved tensors]
# ``node._saved_<name>`` unpacks: under non-reentrant checkpoint it re-runs the
# checkpointed block, and after backward it raises. ``node._raw_saved_<name>``
# returns the ``SavedTensor`` handle; its ``.data`` is the packed object (the
# tensor, a checkpoint ``_Holder``, or ``None`` once backward freed it). We only
# ever read ``.data`` and degrade to "nothing saved" on torch versions without it.

Everything here is iterative (no recursion limit for 1M-node graphs) and keeps
references only for the duration of one call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

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
    while stack:
        node = stack.pop()
        key = id(node)
        if key in seen:
            continue
        seen[key] = node
        yield node
        stack.extend(next_nodes(node))
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


@dataclasses.dataclass
class GraphTensor:
    """A tensor the graph keeps alive, and why."""

    cause: str
    tensor: Any
    node: str
    slot: str


def graph_tensors(roots: Iterable[Any], *, with_leaves: bool = True) -> tuple[int, list[GraphTensor]]:
    """Count the nodes reachable from ``roots`` and list the tensors they keep alive."""
    import torch

    tensor_type = torch.Tensor
    param_type = torch.nn.Parameter
    count = 0
    found: list[GraphTensor] = []
    for node in iter_nodes(roots):
        count += 1
        leaf = accumulated_leaf(node)
        if leaf is not None:
            if with_leaves and not isinstance(leaf, param_type):
                found.append(GraphTensor(LEAF_GRAD, leaf, "AccumulateGrad", "variable"))
                grad = leaf.grad
                if grad is not None:
                    found.append(GraphTensor(LEAF_GRAD, grad, "AccumulateGrad", "variable.grad"))
            continue
        name = None
        for slot, data in saved_values(node):
            if isinstance(data, tensor_type) and not isinstance(data, param_type):
                name = name or node_name(node)
                found.append(GraphTensor(ACTIVATIONS, data, name, slot))
        for slot, value in ctx_values(node):
            if isinstance(value, tensor_type) and not isinstance(value, param_type):
                found.append(GraphTensor(CTX, value, node_name(node), f"ctx.{slot}"))
    return count, found


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
