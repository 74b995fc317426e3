"""The retained graph below one held reference, as plain data (a :class:`~leakscope.results.GraphView`).

Node names, saved slots with shapes and bytes, leaves and their gradients; built
iteratively (graphs of a million nodes need no recursion) from descriptions only.
``leakscope explain`` and the report's per-finding drawing both use it; the
renderers in ``leakscope.render.tree``, ``render.dot`` and ``render.html`` draw it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from leakscope.probe import safe
from leakscope.probe.autograd import (
    UINT64_MAX,
    accumulated_leaf,
    ctx_values,
    next_nodes,
    node_name,
    saved_values,
    sequence_nr,
    storage_nbytes,
)
from leakscope.results import GraphView, Slot, ViewNode


def _slot(name: str, t: Any) -> Slot:
    return Slot(name, safe.shape(t), safe.dtype(t), storage_nbytes(t))


def _slots(node: Any) -> tuple[Slot, ...]:
    out = []
    leaf = accumulated_leaf(node)
    if leaf is not None:
        label = "parameter" if safe.is_parameter(leaf) else "leaf"
        out.append(_slot(label, leaf))
        grad = safe.grad(leaf)
        if grad is not None:
            out.append(_slot(f"{label}.grad", grad))
        return tuple(out)
    for name, data in saved_values(node):
        if safe.is_tensor(data):
            out.append(_slot(f"saved {name}", data))
        else:
            out.append(Slot(f"saved {name}", (), safe.type_name(type(data)), 0))
    for name, value in ctx_values(node):
        if safe.is_tensor(value):
            out.append(_slot(f"ctx.{name}", value))
    return tuple(out)


def build_view(
    root: Any,
    *,
    target: str,
    mode: str,
    path: str,
    max_nodes: int = 10_000,
    stop: Callable[[Any], bool] | None = None,
    count_limit: int | None = None,
) -> GraphView:
    """Describe the graph below ``root`` (a node), breadth first, at most ``max_nodes`` described.

    ``stop(node)`` True: the node is left out with what is below it (an older graph). The nodes are
    counted up to ``count_limit`` (then the total is that many, and the view truncated): a finding's
    drawing of a 10^6-node chain needs its first nodes, not a second walk of all of them."""
    ids: dict[int, int] = {}  # id(python node) -> view id
    keep: list[Any] = []  # hold wrappers so ids stay unique while walking
    described: list[ViewNode] = []
    counted = 0  # NOTE [One node count]: AccumulateGrad nodes are drawn, not counted
    queue = [root]
    head = 0
    cut = False  # the count limit was reached: there are more nodes than counted
    while head < len(queue):
        node = queue[head]
        head += 1
        if id(node) in ids or (stop is not None and node is not root and stop(node)):
            continue
        if count_limit is not None and len(keep) >= count_limit:
            cut = True
            break
        ids[id(node)] = len(keep)
        keep.append(node)
        if sequence_nr(node) != UINT64_MAX:
            counted += 1
        children = next_nodes(node)
        queue.extend(c for c in children if id(c) not in ids)
        if len(described) < max_nodes:
            described.append(ViewNode(ids[id(node)], node_name(node), _slots(node), ()))
        # `children` ids are assigned lazily below, once every node has one.
    total = len(keep)
    # Second pass: child links of described nodes (ids now exist for all nodes).
    linked = []
    for view in described:
        node = keep[view.id]
        child_ids = tuple(ids[id(c)] for c in next_nodes(node) if id(c) in ids)
        linked.append(dataclasses.replace(view, children=child_ids))
    keep.clear()
    ids.clear()
    queue.clear()
    return GraphView(
        target,
        mode,
        path,
        0,
        tuple(linked),
        total,
        cut or total > len(linked),
        graph_nodes=counted,
    )


#: nodes a finding's own graph description keeps (the report's HTML drawing; ``explain`` draws more)
FINDING_GRAPH_NODES = 40
#: nodes a finding's own graph description counts at most (its size is the finding's node count)
FINDING_GRAPH_COUNT = 10_000


def view_of(
    obj: object,
    *,
    path: str,
    target: str = "",
    mode: str = "",
    max_nodes: int = 10_000,
    stop: Callable[[Any], bool] | None = None,
    count_limit: int | None = None,
) -> GraphView | None:
    """The graph a held object keeps (a tensor's ``grad_fn`` or a node); None for a held leaf.

    A finding's own graph (``Finding.graph``) leaves ``target`` and ``mode`` empty:
    its result names them.
    """
    node = safe.grad_fn(obj) if safe.is_tensor(obj) else obj
    if node is None:
        return None
    return build_view(
        node,
        target=target,
        mode=mode,
        path=path,
        max_nodes=max_nodes,
        stop=stop,
        count_limit=count_limit,
    )


__all__ = ["FINDING_GRAPH_COUNT", "FINDING_GRAPH_NODES", "build_view", "view_of"]
