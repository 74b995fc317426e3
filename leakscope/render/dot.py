"""The retained graph as Graphviz DOT text (no graphviz needed to write it)."""

from __future__ import annotations

from leakscope.render.escape import terminal
from leakscope.render.summary import human_bytes, node_count
from leakscope.results import GraphView


def _quote(text: str) -> str:
    """A DOT string: quotes and backslashes escaped, control characters shown (:func:`~leakscope.render.escape.terminal`)."""
    return '"' + terminal(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(view: GraphView, **_: object) -> str:
    """``digraph retained { ... }``: one node per graph node, saved slots in the label."""
    lines = ["digraph retained {", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
    lines.append(
        f"  label={_quote(f'{view.target} [{view.mode}] {view.path}: {node_count(view.graph_nodes, view.total_nodes)}')};"
    )
    if view.truncated:
        lines.append(f"  // truncated: {len(view.nodes)} of {view.total_nodes} nodes described")
    described = {n.id for n in view.nodes}
    for node in view.nodes:
        label = node.name
        for slot in node.slots:
            shape = "x".join(str(d) for d in slot.shape) or "-"
            label += f"\\n{slot.name} {slot.dtype}[{shape}] {human_bytes(slot.nbytes)}"
        style = ', style=filled, fillcolor="#ffd7d7"' if any(s.nbytes for s in node.slots) else ""
        lines.append(
            f"  n{node.id} [label={_quote(label).replace(chr(92) * 2 + 'n', chr(92) + 'n')}{style}];"
        )
        for child in node.children:
            if child in described:
                lines.append(f"  n{node.id} -> n{child};")
    lines.append("}")
    return "\n".join(lines) + "\n"
