"""A layered drawing of a retained graph: where each box and each edge goes (no SVG here).

Sugiyama's recipe, small enough for the at most few hundred nodes a report
describes: longest-path layers, a bend box wherever an edge crosses a layer,
barycentre sweeps to order each layer, then a few passes pulling each box
towards its neighbours without letting boxes overlap. The HTML page
(:mod:`leakscope.render.html`) measures the boxes and draws the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from leakscope.results import GraphView, ViewNode


@dataclasses.dataclass
class Box:
    """One box of the drawing: a described node, or a bend point of an edge that spans layers."""

    key: tuple[int, int]  # (node id, -1) for a node; (edge number, layer) for a bend point
    layer: int
    width: float
    height: float
    node: ViewNode | None = None
    x: float = 0.0  # centre
    y: float = 0.0  # top


#: horizontal and vertical space between boxes
GAP_X, GAP_Y = 16, 28


def depths(view: GraphView) -> dict[int, int]:
    """Longest-path layer of each described node, so every edge points down."""
    by_id = {n.id: n for n in view.nodes}
    parents: dict[int, int] = {n.id: 0 for n in view.nodes}
    for n in view.nodes:
        for c in set(n.children):
            if c in by_id and c != n.id:
                parents[c] += 1
    depth = {nid: 0 for nid, count in parents.items() if count == 0}
    ready = sorted(depth)
    while ready:
        nid = ready.pop(0)
        for c in set(by_id[nid].children):
            if c not in by_id or c == nid:
                continue
            depth[c] = max(depth.get(c, 0), depth[nid] + 1)
            parents[c] -= 1
            if parents[c] == 0:
                ready.append(c)
    for n in view.nodes:  # a cycle (autograd graphs have none): keep the rest visible
        depth.setdefault(n.id, 0)
    return depth


def layout(
    view: GraphView, measure: Callable[[ViewNode], tuple[float, float]]
) -> tuple[list[list[Box]], list[list[Box]], float, float]:
    """Boxes by layer, each edge as its chain of boxes, and the drawing's width and height.

    Sugiyama's recipe, small: longest-path layers, a bend box wherever an edge
    crosses a layer, barycentre sweeps to order each layer, then a few passes
    pulling each box towards its neighbours without letting boxes overlap.
    """
    by_id = {n.id: n for n in view.nodes}
    depth = depths(view)
    boxes: dict[tuple[int, int], Box] = {}
    for n in view.nodes:
        w, h = measure(n)
        boxes[(n.id, -1)] = Box((n.id, -1), depth[n.id], w, h, n)
    chains: list[list[Box]] = []
    for n in view.nodes:
        for c in dict.fromkeys(n.children):
            if c not in by_id or c == n.id:
                continue
            chain = [boxes[(n.id, -1)]]
            for layer in range(depth[n.id] + 1, depth[c]):
                bend = Box((len(chains), layer), layer, 0.0, 0.0)
                boxes[bend.key] = bend
                chain.append(bend)
            chain.append(boxes[(c, -1)])
            chains.append(chain)
    layers: list[list[Box]] = [[] for _ in range(max(depth.values()) + 1)]
    for box in boxes.values():
        layers[box.layer].append(box)
    up: dict[tuple[int, int], list[Box]] = {k: [] for k in boxes}
    down: dict[tuple[int, int], list[Box]] = {k: [] for k in boxes}
    for chain in chains:
        for a, b in zip(chain, chain[1:]):
            down[a.key].append(b)
            up[b.key].append(a)
    order = {b.key: float(i) for layer in layers for i, b in enumerate(layer)}

    def sweep(rows: list[list[Box]], neighbours: dict[tuple[int, int], list[Box]]) -> None:
        for row in rows:
            for b in row:
                near = neighbours[b.key]
                if near:
                    order[b.key] = sum(order[o.key] for o in near) / len(near)
            row.sort(key=lambda b: order[b.key])
            for i, b in enumerate(row):
                order[b.key] = float(i)

    for _ in range(4):
        sweep(layers[1:], up)
        sweep(layers[-2::-1], down)

    def pack(row: list[Box]) -> None:
        """Keep the order, push boxes apart where they would overlap, and centre the row where it wanted to be."""
        wanted = [b.x for b in row]
        for a, b in zip(row, row[1:]):
            least = a.x + a.width / 2 + GAP_X + b.width / 2
            if b.x < least:
                b.x = least
        shift = sum(w - b.x for w, b in zip(wanted, row)) / len(row)
        for b in row:
            b.x += shift

    for row in layers:  # start packed from the left
        x = 0.0
        for b in row:
            b.x = x + b.width / 2
            x += b.width + GAP_X
    for _ in range(6):
        for rows, neighbours in ((layers[1:], up), (layers[-2::-1], down)):
            for row in rows:
                for b in row:
                    near = neighbours[b.key]
                    if near:
                        b.x = sum(o.x for o in near) / len(near)
                pack(row)
    left = min(b.x - b.width / 2 for b in boxes.values())
    for b in boxes.values():
        b.x += GAP_X - left
    width = max(b.x + b.width / 2 for b in boxes.values()) + GAP_X
    y = 28.0
    for row in layers:
        row_h = max(b.height for b in row)
        for b in row:
            b.y = y + (row_h - b.height) / 2 if b.node is not None else y
            if b.node is None:
                b.height = row_h
        y += row_h + GAP_Y
    return layers, chains, width, y - GAP_Y + 24


__all__ = ["GAP_X", "GAP_Y", "Box", "depths", "layout"]
