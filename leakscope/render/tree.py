"""The retained graph as an indented tree of text lines (``leakscope explain``)."""

from __future__ import annotations

from leakscope.render.escape import terminal
from leakscope.render.summary import human_bytes, node_count
from leakscope.results import GraphView, ViewNode


def _label(node: ViewNode) -> str:
    parts = [node.name]
    for slot in node.slots:
        shape = "x".join(str(d) for d in slot.shape) or "-"
        size = f" {human_bytes(slot.nbytes)}" if slot.nbytes else ""
        parts.append(f"[{slot.name} {slot.dtype}[{shape}]{size}]")
    return " ".join(parts)


def render(view: GraphView, *, max_lines: int = 200, **_: object) -> str:
    """An iterative depth-first tree; shared sub-graphs are shown once, long plain chains folded."""
    if view.root is None:
        if view.path:
            return (
                terminal(
                    f"{view.target} [{view.mode}] {view.path}: a leaf tensor (no graph below it)"
                )
                + "\n"
            )
        return terminal(f"{view.target} [{view.mode}]: no retained graph") + "\n"
    nodes = {n.id: n for n in view.nodes}
    lines = [
        f"{view.target} [{view.mode}] {view.path}: {node_count(view.graph_nodes, view.total_nodes)}"
        + (f" (first {len(view.nodes)} described)" if view.truncated else "")
    ]
    shown: set[int] = set()
    stack: list[tuple[int, str, bool, bool]] = [(view.root, "", True, True)]
    while stack:
        if len(lines) >= max_lines:
            lines.append(
                f"... ({view.total_nodes - len(shown)} more nodes; use --dot for the whole graph)"
            )
            break
        node_id, prefix, last, is_root = stack.pop()
        branch = "" if is_root else ("└── " if last else "├── ")
        if node_id not in nodes:
            lines.append(f"{prefix}{branch}… (not described)")
            continue
        node = nodes[node_id]
        if node_id in shown:
            lines.append(f"{prefix}{branch}↑ {node.name} (shown above)")
            continue
        shown.add(node_id)
        # Fold chains of slot-free, single-child nodes: they pin nothing themselves.
        folded = [node.name]
        while not node.slots and len(node.children) == 1 and node.children[0] in nodes:
            nxt = nodes[node.children[0]]
            if nxt.id in shown or nxt.slots or len(nxt.children) != 1:
                break
            shown.add(nxt.id)
            folded.append(nxt.name)
            node = nxt
        if len(folded) == 1:
            label = _label(node)
        elif len(folded) <= 3:
            label = " → ".join(folded[:-1] + [_label(node)])
        else:
            label = f"{folded[0]} → … {len(folded) - 2} more … → {_label(node)}"
        lines.append(f"{prefix}{branch}{label}")
        child_prefix = "" if is_root else prefix + ("    " if last else "│   ")
        children = list(node.children)
        for i, child in reversed(list(enumerate(children))):
            stack.append((child, child_prefix, i == len(children) - 1, False))
    return "\n".join(terminal(line) for line in lines) + "\n"  # engine names may carry escape codes
