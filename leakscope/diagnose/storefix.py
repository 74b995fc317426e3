"""Fixes derived from the holder and the line that stored the tensor (pure strings; no torch).

The stored-at line (NOTE [Stored at]) says *how* the tensor was kept; the fix
rewrites that line: ``self.history.append(x)`` -> ``self.history.append(x.detach())``,
``self.x = value`` -> ``self.x = value.detach()``, a running sum accumulates the
detached term, a return is detached at the return naming the keys, a metric
is fed a detached value, a hook detaches inside itself. verl's own fix is
named only for verl's engines.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Iterator

from leakscope.holders import HolderPath, Segment, SegmentKind, shorten
from leakscope.results import Cause, Holder, Source

#: the adapter whose engines get verl's own fix named
VERL_ADAPTER = "verl-fsdp"


@dataclasses.dataclass(frozen=True)
class StoreSite:
    """Where and how the retaining tensor was put into its holder."""

    #: "append", "attribute", "item", "accumulate", "buffer", "metric", "return", "hook", "assignment"
    op: str
    #: the stored-at line's source text, stripped
    code: str
    where: Source
    #: the names in the line that held a tensor with a graph when it ran (NOTE [The names a fix detaches])
    graph_names: tuple[str, ...] = ()


def _structure(code: str) -> Iterator[tuple[int, str, int]]:
    """``(index, character, depth)`` of each character outside string literals; ``depth`` counts
    the brackets open around it (an opening bracket and its closing one read the same depth)."""
    depth, quote = 0, None
    for i, ch in enumerate(code):
        if quote is not None:
            quote = None if ch == quote else quote
            continue
        if ch in "'\"":
            quote = ch
            continue
        if ch in ")]}":
            depth -= 1
        yield i, ch, depth
        if ch in "([{":
            depth += 1


def _without_comment(code: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` inside a string literal is kept)."""
    for i, ch, _ in _structure(code):
        if ch == "#":
            return code[:i].rstrip()
    return code


def _top_level_split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and string literals."""
    parts, start = [], 0
    for i, _, depth in _structure(text):
        if i >= start and depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
    parts.append(text[start:])
    return parts


def _detached(expr: str) -> str:
    expr = expr.strip()
    if expr.endswith((".item()", ".tolist()")) or expr.startswith(("float(", "int(")):
        return expr  # already a Python number
    branches = _top_level_split(expr, " else ")
    if len(branches) == 2 and len(_top_level_split(branches[0], " if ")) == 2:
        value, condition = _top_level_split(branches[0], " if ")
        return f"{_detached(value)} if {condition.strip()} else {_detached(branches[1])}"
    if re.fullmatch(r"[\w.\[\]'\"]+", expr):
        return f"{expr}.detach()"
    return f"({expr}).detach()"


def _call_detached(code: str) -> str | None:
    """``obj.append(x)`` -> ``obj.append(x.detach())``: the last argument of the call whose closing
    parenthesis ends the line (``type(self).seen.append(x)``, ``f(a)(b, x)``)."""
    code = code.rstrip()
    if not code.endswith(")"):
        return None
    opening = max((i for i, ch, depth in _structure(code) if ch == "(" and depth == 0), default=-1)
    if opening <= 0 or not re.search(r"[\w)\]]$", code[:opening]):
        return None  # a parenthesised expression, not a call
    *head, last = _top_level_split(code[opening + 1 : -1], ",")
    if not last.strip():
        return None
    return f"{code[: opening + 1]}{','.join(head)}{', ' if head else ''}{_detached(last)})"


def _assignment_detached(code: str, accumulate: bool) -> str | None:
    m = re.fullmatch(r"(?P<lhs>[^=]+?)\s*(?P<op>\+=|-=|=)\s*(?P<rhs>.+)", code)
    if not m:
        return None
    lhs, op, rhs = m.group("lhs").strip(), m.group("op"), m.group("rhs").strip()
    if accumulate and op == "=" and len(_top_level_split(rhs, " if ")) == 1:
        terms = _top_level_split(rhs, " + ")
        if len(terms) > 1 and terms[0].strip() == lhs:  # total = total + x: the new term
            return f"{lhs} = {terms[0].strip()} + {_detached(' + '.join(t.strip() for t in terms[1:]))}"
    return f"{lhs} {op} {_detached(rhs)}"


_ASSIGNMENT = re.compile(r"(?P<lhs>[^=]+?)\s*(?P<op>\+=|-=|\*=|/=|=)(?!=)\s*(?P<rhs>.+)")


def _names_detached(code: str, names: tuple[str, ...]) -> str | None:
    """The line with each of ``names`` read as ``name.detach()`` where it is read (the right of an
    assignment, or a call's arguments), not where it is assigned; None when none is read there.
    A name already followed by ``.detach(``, ``.item(`` or ``.tolist(`` is left as it is."""
    if re.search(r"\blambda\b", code):
        return None  # a name a lambda closes over stays in its closure, attached, whatever its body does
    head, body = "", code
    m = _ASSIGNMENT.fullmatch(code)
    if m is not None and "(" not in m.group("lhs"):
        head, body = code[: m.start("rhs")], m.group("rhs")
    changed = False
    for name in names:
        pattern = re.compile(
            rf"(?<![\w.]){re.escape(name)}(?![\w])(?!\s*\.(?:detach|item|tolist)\()(?!\s*=[^=])"
        )
        code_at = {i for i, _, _ in _structure(body)}  # positions outside string literals
        out, last = [], 0
        for m in pattern.finditer(body):
            if m.start() in code_at:
                out.append(body[last : m.end()] + ".detach()")
                last = m.end()
                changed = True
        body = "".join(out) + body[last:]
    return head + body if changed else None


def _complete(code: str) -> bool:
    """Whether ``code`` is a whole statement on its own: every bracket it opens it closes."""
    depth = 0
    for _, ch, d in _structure(code):
        depth = d + (1 if ch in "([{" else 0)
    return depth == 0 and not code.rstrip().endswith(("\\", ",", "(", "[", "{"))


def _detaches_a_container(code: str) -> bool:
    """A rewrite that would call ``.detach()`` on a container literal or constructor: an error, not a fix."""
    return bool(
        re.search(r"(?:[\]}]\)?|\b(?:dict|list|tuple|set)\([^()]*\))\)?\.detach\(\)", code)
    ) or bool(re.search(r"\((?:\{|\[)[^()]*(?:\}|\])\)\.detach\(\)", code))


def returned_keys(path: HolderPath) -> str:
    """A returned holder as the code indexes it: ``output.model_output.log_probs`` ->
    ``output["model_output"]["log_probs"]``."""
    return shorten(path.root + "".join(segment.code() for segment in path.segments))


def _stored_expr(code: str, op: str) -> tuple[str, str] | None:
    """``(holder name, stored expression)`` of a storing line: ``output_lst.append(output)`` ->
    ``("output_lst", "output")``, ``self.last = out`` -> ``("last", "out")``."""
    if op == "append":
        m = re.fullmatch(
            r"(?:[\w.]+\.)?(?P<name>\w+)\.\w+\((?:.*,\s*)?(?P<expr>[^,()]+?)\s*\)", code
        )
    elif op in ("attribute", "item", "assignment"):
        m = re.fullmatch(r"(?:[\w.]+\.)?(?P<name>\w+)(?:\[[^\]]*\])?\s*=\s*(?P<expr>.+)", code)
    else:
        return None
    if m is None or not re.fullmatch(r"[\w.]+", m.group("expr")):
        return None
    return m.group("name"), m.group("expr")


def _inner_tensor(path: HolderPath, name: str, op: str) -> str | None:
    """The segments of ``path`` below the stored object, as code: the stored value is a container
    and the tensor with the graph is inside it (``output_lst[0].model_output.log_probs`` stored by
    ``output_lst.append(output)`` -> ``["model_output"]["log_probs"]``). None when the path ends at
    the stored object or does not go through ``name``."""
    segments = path.segments
    for i, segment in enumerate(segments):
        if segment.name == name and segment.kind in (SegmentKind.ATTR, SegmentKind.KEY):
            rest = segments[i + 1 :]
            if (
                rest
                and op in ("append", "item")
                and rest[0].kind in (SegmentKind.INDEX, SegmentKind.KEY)
            ):
                rest = rest[1:]
            if not rest or any(
                s.kind not in (SegmentKind.ATTR, SegmentKind.KEY, SegmentKind.INDEX) for s in rest
            ):
                return None
            return "".join(s.code() for s in rest)
    return None


def fix_for(
    store: StoreSite | None, path: HolderPath, holder: Holder, cause: Cause, adapter: str | None
) -> str | None:
    """One sentence: the change at the stored-at line that stops the caller holding this step's graph.

    None when nothing specific can be derived (the caller keeps its generic hint).
    """
    graph_note = (
        "; if it is only logged, compute it under torch.no_grad()"
        if cause is Cause.ACTIVATIONS
        else ""
    )
    if holder is Holder.RETURNED:
        where = f" at {store.where}" if store is not None else ""
        text = f"detach {returned_keys(path)} before it is returned{where}, after the loss is computed{graph_note}"
        if adapter == VERL_ADAPTER:
            text += " (verl's fix, verl#6698: detach every model_output tensor that has a grad_fn in forward_step)"
        return text
    if store is None:
        return None
    code, at = _without_comment(store.code), store.where
    rewritten = rewrite(store, path)
    if rewritten is None and store.op == "hook":
        return None  # the hook's own wording stands (fixes._special_hint, fixes._hook_hint)
    if rewritten is None:
        stored = _stored_expr(code, store.op)
        inner = _inner_tensor(path, stored[0], store.op) if stored is not None else None
        if (
            stored is not None and inner is not None
        ):  # a container is stored; the graph is inside it
            tensor = f"{stored[1]}{inner}"
            return (
                f"at {at}: {code} keeps {tensor} with its graph: detach it before it is stored"
                f" ({tensor} = {tensor}.detach()), or store only the detached values needed{graph_note}"
            )
        inside = f" (the tensor at {path.code()})" if path.segments else ""
        return f"store only detached tensors or numbers at {at} ({code}){inside}{graph_note}"
    if store.op == "metric":
        return f"feed the metric a detached value at {at}: {rewritten}"
    if store.op == "hook":
        return f"detach inside the hook {at.function} at {at}: {rewritten} (or run the hook under torch.no_grad())"
    if store.op == "accumulate":
        return f"accumulate detached values at {at}: {rewritten} (or .item() for a float)"
    return f"at {at}: {rewritten}{' (or .item() for a scalar)' if store.op == 'attribute' else ''}{graph_note}"


# NOTE [Detached at the return]
# A step that returns a container of attached tensors (verl's ``model_output``)
# is fixed where verl fixed it (verl#6699): at the return, after the loss is
# computed, the returned container's tensors are detached; the loss the caller
# runs backward on (the return's first element) is left as it is. The return is
# parsed (``ast``) and the holder path followed through the literals it builds
# (``{"model_output": model_output}``) to the expression that holds the graph;
# a tensor is detached there, and a container holding it (the path goes on past
# that expression) is rebuilt with every tensor in it detached
# (``{k: v.detach() if hasattr(v, "detach") else v for k, v in X.items()}``), so
# the findings of one container (``log_probs``, ``entropy``) share one edit. A
# container reached only through a name is rebuilt key by key down to it
# (``{**output, "model_output": {...}}``). Nothing else on the line changes.

_DETACHED_ITEMS = '{{k: v.detach() if hasattr(v, "detach") else v for k, v in {0}.items()}}'
_DETACHED_ENTRIES = '[v.detach() if hasattr(v, "detach") else v for v in {0}]'


def _source(code: str, node: ast.expr) -> str:
    """The text of ``node`` in the one-line ``code`` (``ast`` offsets count UTF-8 bytes)."""
    raw = code.encode("utf-8")
    return raw[node.col_offset : node.end_col_offset].decode("utf-8")


def _rebuilt(expr: str, rest: tuple[Segment, ...]) -> str | None:
    """``expr`` with the tensor at ``rest`` below it detached (NOTE [Detached at the return])."""
    if not rest:
        return _detached(expr)
    head = rest[0]
    if len(rest) == 1:  # the container the tensor is in: every tensor in it detached
        if head.kind is SegmentKind.KEY:
            return _DETACHED_ITEMS.format(_atom(expr))
        if head.kind is SegmentKind.INDEX:
            return _DETACHED_ENTRIES.format(_atom(expr))
        return None
    if head.kind is SegmentKind.KEY and isinstance(head.name, (str, int)):
        key = json.dumps(head.name)
        inner = _rebuilt(f"{_atom(expr)}[{key}]", rest[1:])
        return None if inner is None else f"{{**{_atom(expr)}, {key}: {inner}}}"
    return None


def _atom(expr: str) -> str:
    return expr if re.fullmatch(r"[\w.]+(?:\[[^\[\]]+\])*", expr) else f"({expr})"


def _return_detached(code: str, path: HolderPath) -> str | None:
    """The ``return loss, output`` line with the returned tensor at ``path`` detached (NOTE
    [Detached at the return]); None when the line is not such a return or the path cannot be followed."""
    if path.root != "output":
        return None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Return):
        return None
    value = tree.body[0].value
    if not isinstance(value, ast.Tuple) or len(value.elts) != 2:
        return None
    node: ast.expr = value.elts[1]
    segments = path.segments
    while segments:
        head, child = segments[0], None
        if isinstance(node, ast.Dict) and head.kind is SegmentKind.KEY:
            for key, item in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == head.name:
                    child = item
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and head.kind is SegmentKind.KEY
        ):
            child = next((k.value for k in node.keywords if k.arg == head.name), None)
        elif isinstance(node, (ast.Tuple, ast.List)) and head.kind is SegmentKind.INDEX:
            index = head.name
            if isinstance(index, int) and 0 <= index < len(node.elts):
                child = node.elts[index]
        if child is None:
            break
        node, segments = child, segments[1:]
    if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)) or any(
        isinstance(n, ast.Lambda) for n in ast.walk(node)
    ):
        return None  # a literal the path could not be followed into, or a closure
    rebuilt = _rebuilt(_source(code, node), segments)
    if rebuilt is None:
        return None
    raw = code.encode("utf-8")
    return (
        raw[: node.col_offset].decode("utf-8")
        + rebuilt
        + raw[node.end_col_offset :].decode("utf-8")
    )


def rewrite(store: StoreSite, path: HolderPath) -> str | None:
    """The stored-at line rewritten so that it stores a detached value (the line's text, stripped),
    or None when no one-line rewrite can be derived: the names that held the graph when the line ran
    are detached where they are read (NOTE [The names a fix detaches]), else the value the line
    stores; never a container literal or constructor."""
    code = _without_comment(store.code)
    if not _complete(code) or path.grad_slot():
        return (
            None  # one line of a statement that goes on (``x = torch.cat([``); a backward's .grad
        )
    if store.op == "return":
        return _return_detached(code, path)
    if store.graph_names:
        by_names = _names_detached(code, store.graph_names)
        if by_names is not None:
            return by_names
    stored = _stored_expr(code, store.op)
    if stored is not None and _inner_tensor(path, stored[0], store.op) is not None:
        return None  # a container is stored; the graph is inside it
    rewritten: str | None = None
    if store.op in ("append", "buffer", "metric", "hook"):
        rewritten = _call_detached(code) if "(" in code else _assignment_detached(code, False)
    elif store.op in ("attribute", "item", "assignment"):
        kept_in_call = any(  # kept inside a partial's arguments or a closure
            (s.kind is SegmentKind.ATTR and s.name in ("args", "keywords"))
            or s.kind is SegmentKind.CELL
            for s in path.segments
        )
        if kept_in_call:
            m = re.fullmatch(r"(?P<lhs>[^=]+?)\s*=\s*(?P<rhs>.+\))", code)
            call = _call_detached(m.group("rhs")) if m else None
            rewritten = f"{m.group('lhs').strip()} = {call}" if m and call else None
        else:
            rewritten = _assignment_detached(code, False)
    elif store.op == "accumulate":
        rewritten = _assignment_detached(code, True)
    if (
        rewritten is None
        or _detaches_a_container(rewritten)
        or re.search(r"\blambda\b[^)]*\)\.detach\(\)", rewritten)
    ):
        return None  # never .detach() a container, or a lambda
    return rewritten


def shown(code: str) -> str:
    """The stored-at line as a fix quotes it: without its comment, ``…`` where the statement goes on."""
    code = _without_comment(code).strip()
    return code if _complete(code) else f"{code} …"


def with_comment(before: str, after: str) -> str:
    """``after`` with the trailing comment ``before`` had, so an edit keeps it."""
    code = _without_comment(before)
    comment = before[len(code) :]
    return after + comment if comment.strip().startswith("#") else after


def _spelled(path: HolderPath) -> bool:
    """Whether the path reads as code the user can write (no ``<Type>`` key, no ``__self__`` of a
    bound method, no frame local)."""
    code = path.code()
    return "<" not in code and "__self__" not in code and ".f_locals" not in code


def release_fix(path: HolderPath, store: StoreSite | None) -> str:
    """The fix for a holder backward runs through while it is held (NOTE [Fixes that never break
    training]): release it once backward has run, never detach it before."""
    container = path.container()
    if not _spelled(container):
        release = f"the object at {path} must drop it (set it to None) once backward has run"
    elif container != path:
        release = f"{container.code()}.clear() once the update's backward has run"
    else:
        release = f"{path.code()} = None once backward has run"
    where = (
        f" (stored at {store.where}: {_without_comment(store.code)})" if store is not None else ""
    )
    return (
        f"backward runs through the graph {path.code()} keeps{where}: release it after use, {release};"
        " for logging keep .item() or a detached copy taken after backward. Detaching it before backward"
        " would stop its gradients"
    )


def node_fix(path: HolderPath, grad_fn: str, store: StoreSite | None) -> str:
    """The fix for a holder of a graph node itself (``self.nodes.append(t.grad_fn)``, a
    ``GradientEdge``): no detach on its line removes it, the node is what keeps the graph."""
    where = (
        f" (stored at {store.where}: {_without_comment(store.code)})" if store is not None else ""
    )
    return (
        f"{path.code()} keeps a graph node of this step ({grad_fn}){where}, and a node keeps its whole graph:"
        " keep what you need from it instead (its name(), a detached tensor), or drop it once the step is done"
    )


def after_loss_fix(path: HolderPath, store: StoreSite | None, graph_note: str = "") -> str:
    """The fix for a holder the step's loss is computed from: detach only once the loss is computed."""
    where = f" at {store.where} ({_without_comment(store.code)})" if store is not None else ""
    return (
        f"the step's loss is computed from {path.code()}: store a detached copy{where} only after the loss"
        f" is computed ({path.code()} = {path.code()}.detach() after the loss line); detaching it"
        f" before the loss would cut the gradient through it{graph_note}"
    )


__all__ = [
    "StoreSite",
    "VERL_ADAPTER",
    "after_loss_fix",
    "fix_for",
    "node_fix",
    "release_fix",
    "rewrite",
    "shown",
    "with_comment",
]
