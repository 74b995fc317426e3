"""The HTML report: one self-contained page to look at a leak.

Everything is inline (CSS, SVG; no script, no font, no network), so the file
opens from a CI artifact as it is. The page shows the summary and each target's
verdict, the growth per micro-batch as a bar plot, and for each finding the
lines that created and stored the retaining tensor, the fix, and the retained
graph drawn as layered SVG boxes (``Finding.graph``, bounded when collected).

Source snippets come from the report (``Finding.snippets``, captured when the
check ran, from the checked project only: :mod:`leakscope.snippets`); rendering
reads no file. A line that was not captured is said, not fatal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib import resources

from leakscope.policy import FailOn, exit_code
from leakscope.render.escape import html as _e
from leakscope.render.graph_layout import Box, layout
from leakscope.render.summary import (
    edit_lines,
    growth_line,
    human_bytes,
    node_count,
    projection_line,
    report_line,
    result_line,
    shown_verdict,
)
from leakscope.results import (
    Finding,
    GraphView,
    LeakKind,
    Report,
    Source,
    TargetResult,
    Verdict,
    ViewNode,
)
from leakscope.snippets import snippet_for

#: the page's style sheet, a package data file (light and dark schemes)
_CSS = resources.files("leakscope.render").joinpath("report.css").read_text(encoding="utf-8")


def render(report: Report, *, fail_on: FailOn = FailOn.LEAK, **_: object) -> str:
    """The report as one self-contained HTML document (light and dark).

    Every value of the report is escaped (:func:`~leakscope.render.escape.html`), numbers
    included; verdicts and colours are what the ``fail_on`` gate made of each result
    (:func:`~leakscope.render.summary.shown_verdict`), as in every other format. Tracebacks
    are not shown (``--debug`` writes them to stderr).
    """
    code = exit_code(report, fail_on)
    shown = {shown_verdict(r, fail_on) for r in report.results}
    worst = next((v for v in ("error", "leak", "warning") if v in shown), "clean")
    summary = report_line(report, code, fail_on).removeprefix("leakscope: ")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="color-scheme" content="light dark">',
        f"<title>leakscope: {_e(summary)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<header>",
        "<h1>leakscope report</h1>",
        f'<p class="meta">leakscope {_e(report.leakscope_version)} · torch {_e(report.torch_version)} · '
        f"Python {_e(report.python_version)}</p>",
        f'<p class="banner {worst}" id="summary-line">{_e(summary)}</p>',
        "</header>",
        "<main>",
        _summary_table(report, fail_on),
    ]
    for i, result in enumerate(report.results):
        parts.append(_result_section(i, result, fail_on))
    parts += [
        "</main>",
        "<footer><p>Bytes are measured on leakscope's tiny model (storages counted once, Parameters excluded), "
        "per micro-batch of one step; <code>leakscope estimate --at ...</code> projects them to your model's "
        "scale. A leak grows with every micro-batch; a clean engine is flat.</p></footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- summary


def _badge(verdict: str) -> str:
    return f'<span class="badge {_e(verdict)}">{_e(verdict.upper())}</span>'


def _summary_table(report: Report, fail_on: FailOn) -> str:
    rows = []
    for i, r in enumerate(report.results):
        shown = shown_verdict(r, fail_on)
        retained = human_bytes(r.retained_bytes) if r.verdict is Verdict.LEAK else "—"
        spark = _sparkline(r, shown) if r.growth is not None and r.growth.retained_bytes else ""
        rank = f" [rank {r.rank}]" if r.rank is not None else ""
        rows.append(
            f'<tr class="{_e(shown)}"><td><a href="#result-{i}"><code>{_e(r.target)}</code></a></td>'
            f"<td>{_e(r.mode.value)}{_e(rank)}</td><td>{_badge(shown)}</td>"
            f'<td class="num">{_e(retained)}</td><td>{spark}</td><td class="num">{len(r.findings)}</td></tr>'
        )
    return (
        '<section class="summary"><table id="summary">'
        "<thead><tr><th>target</th><th>mode</th><th>verdict</th><th>retained per micro-batch</th>"
        "<th>growth</th><th>findings</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _tone(shown: str) -> str:
    """The colour of a result's plots: its verdict's as the gate made it (a bounded leak is a leak,
    flat or not), never the slope's alone."""
    return shown if shown in ("leak", "warning") else "clean"


def _sparkline(result: TargetResult, shown: str) -> str:
    assert result.growth is not None
    values = result.growth.retained_bytes
    w, h, pad = 96, 22, 2
    top = max(values) or 1
    step = (w - 2 * pad) / max(len(values) - 1, 1)
    points = " ".join(
        f"{pad + i * step:.1f},{h - pad - (v / top) * (h - 2 * pad):.1f}"
        for i, v in enumerate(values)
    )
    kind = _tone(shown)
    title = "retained after each micro-batch: " + ", ".join(human_bytes(v) for v in values)
    return (
        f'<svg class="spark {kind}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">'
        f'<title>{_e(title)}</title><polyline points="{points}"/></svg>'
    )


# ---------------------------------------------------------------- one result


def _result_section(index: int, result: TargetResult, fail_on: FailOn) -> str:
    shown = shown_verdict(result, fail_on)
    head = (
        f'<h2><code>{_e(result.target)}</code> <span class="mode">[{_e(result.mode.value)}]</span>'
        + (
            f' <span class="mode">[rank {_e(result.rank)}]</span>'
            if result.rank is not None
            else ""
        )
        + f" {_badge(shown)}"
        + (
            f' <span class="retained">{_e(human_bytes(result.retained_bytes))} retained per micro-batch</span>'
            if result.verdict is Verdict.LEAK
            else ""
        )
        + "</h2>"
    )
    parts = [f'<section class="result {_e(shown)}" id="result-{index}">', head]
    parts.append(f'<p class="line">{_e(result_line(result, fail_on))}</p>')
    if result.error:
        parts.append(f'<div class="error-box"><strong>error</strong> {_e(result.error)}</div>')
    if result.growth is not None and result.growth.retained_bytes:
        parts.append(_growth_figure(result, shown))
    if result.projection is not None:
        parts.append(f'<p class="projection">{_e(projection_line(result.projection).strip())}</p>')
    for warning in result.warnings:
        parts.append(f'<p class="warning-line">warning: {_e(warning)}</p>')
    if result.findings:
        parts.append(f"<h3>Findings ({len(result.findings)})</h3>")
        for j, finding in enumerate(result.findings):
            parts.append(_finding_card(f"{index}-{j}", result, finding))
    parts.append("</section>")
    return "\n".join(parts)


# ---------------------------------------------------------------- growth plot


def _nice_ceiling(value: float) -> float:
    """The smallest round number of B, KiB, MiB, ... at or above ``value`` (the plot's top gridline)."""
    if value <= 0:
        return 1.0
    unit = 1024.0 ** max(0, int(math.log(value, 1024)))
    scaled = value / unit
    for nice in (
        1,
        2,
        4,
        5,
        8,
        10,
        16,
        20,
        25,
        32,
        40,
        50,
        64,
        80,
        100,
        128,
        200,
        256,
        400,
        500,
        512,
        800,
        1024,
    ):
        if scaled <= nice:
            return nice * unit
    return math.ceil(scaled) * unit


def _growth_figure(result: TargetResult, shown: str) -> str:
    g = result.growth
    assert g is not None
    values = list(g.retained_bytes)
    storage = list(g.storage_bytes) if any(g.storage_bytes) else []
    width, height = 560, 240
    left, right, top, bottom = 78, 16, 18, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    ymax = _nice_ceiling(max(values + storage + [0]))
    n = len(values)
    slot = plot_w / n
    bar_w = min(56.0, slot * 0.6)
    kind = _tone(shown)

    def y(v: float) -> float:
        return top + plot_h - (v / ymax) * plot_h

    out = [
        f'<svg class="plot growth {kind}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="retained bytes after each micro-batch">',
        f"<title>{_e(growth_line(result).strip())}</title>",
    ]
    for k in range(
        5 if max(values + storage + [0]) > 0 else 1
    ):  # flat at zero: one gridline, "0 B"
        v = ymax * k / 4
        yy = y(v)
        out.append(
            f'<line class="grid" x1="{left}" y1="{yy:.1f}" x2="{width - right}" y2="{yy:.1f}"/>'
        )
        out.append(
            f'<text class="tick" x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{_e(human_bytes(int(v)))}</text>'
        )
    out.append(
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}"/>'
    )
    for i, v in enumerate(values):
        cx = left + slot * (i + 0.5)
        yy = y(v)
        h = max(top + plot_h - yy, 0.0)
        label = f"after micro-batch #{i}: {human_bytes(v)} retained"
        if g.graph_nodes and i < len(g.graph_nodes):
            label += f", {g.graph_nodes[i]} live graph nodes"
        out.append(
            f'<rect class="bar" data-bytes="{_e(v)}" x="{cx - bar_w / 2:.1f}" y="{yy:.1f}" width="{bar_w:.1f}" '
            f'height="{h:.1f}"><title>{_e(label)}</title></rect>'
        )
        out.append(
            f'<text class="value" x="{cx:.1f}" y="{yy - 5:.1f}" text-anchor="middle">{_e(human_bytes(v))}</text>'
        )
        out.append(
            f'<text class="tick" x="{cx:.1f}" y="{top + plot_h + 16}" text-anchor="middle">#{i}</text>'
        )
    if storage:
        points = " ".join(
            f"{left + slot * (i + 0.5):.1f},{y(v):.1f}" for i, v in enumerate(storage)
        )
        out.append(
            f'<polyline class="storage" points="{points}"><title>graph-free storage held</title></polyline>'
        )
    out.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">'
        "retained after micro-batch</text>"
    )
    out.append("</svg>")
    slope = human_bytes(int(max(g.slope_bytes, 0)))
    caption = f"<strong>{_e(slope)} per micro-batch</strong> ({_e(_shape(result))}) over {n} micro-batches"
    if storage:
        caption += f"; dashed: graph-free storage held ({_e(human_bytes(int(max(g.storage_slope_bytes, 0))))} per micro-batch)"
    if g.nodes_by_micro_batch:
        caption += "; live graph nodes by micro-batch " + ", ".join(
            f"#{i}: {_e(c)}" for i, c in enumerate(g.nodes_by_micro_batch)
        )
    return (
        f'<figure class="growth-figure">{"".join(out)}<figcaption>{caption}</figcaption></figure>'
    )


def _shape(result: TargetResult) -> str:
    """What the plot shows, in the words of the verdict and the leak's kind."""
    g = result.growth
    assert g is not None
    if result.verdict is Verdict.LEAK:
        if result.kind is LeakKind.BOUNDED:
            return "bounded: a leak that holds the latest step's graph until the next step"
        return (
            "growing: a leak" if result.kind is LeakKind.GROWING or g.slope_bytes > 0 else "a leak"
        )
    return "flat" if g.slope_bytes <= 0 else "rising, not judged a leak"


# ---------------------------------------------------------------- findings


def _finding_card(key: str, result: TargetResult, finding: Finding) -> str:
    severity = finding.severity
    facts = [
        ("holder", finding.holder),
        ("grad_fn", finding.grad_fn),
        ("cause", finding.cause),
        ("retained", human_bytes(finding.retained_bytes)),
        ("graph nodes", str(finding.graph_nodes)),
        ("confirmed", "yes" if finding.confirmed else "no"),
    ]
    if len(finding.bytes_by_cause) > 1:
        facts.append(
            (
                "by cause",
                ", ".join(f"{c} {human_bytes(n)}" for c, n in finding.bytes_by_cause.items()),
            )
        )
    kind = getattr(finding, "kind", None)
    if kind:
        facts.append(("kind", str(kind)))
    dl = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in facts)
    parts = [
        f'<article class="finding {_e(severity)}" id="finding-{key}">',
        f'<h4><code class="path">{_e(finding.path)}</code> <span class="badge {_e(severity)}">{_e(severity)}</span></h4>',
        f'<dl class="facts">{dl}</dl>',
    ]
    if finding.allowed_reason:
        parts.append(f'<p class="allowed">allowed: {_e(finding.allowed_reason)}</p>')
    parts.append(f'<p class="fix"><strong>Fix</strong> {_e(finding.hint)}</p>')
    if finding.source is not None:
        parts.append(_snippet("created at", finding, finding.source))
    if finding.stored_at is not None:
        op = finding.store_op
        stored = _snippet(f"stored at{f' ({op})' if op else ''}", finding, finding.stored_at)
        edit = _edit_figure(finding)
        parts.append(f'<div class="fix-pair">{stored}{edit}</div>' if edit else stored)
    called_from: Sequence[Source] = getattr(finding, "called_from", ()) or ()
    if called_from:
        items = "".join(f"<li><code>{_e(s)}</code></li>" for s in called_from)
        parts.append(f'<div class="called-from">called from<ul>{items}</ul></div>')
    if finding.graph is not None and finding.graph.nodes:
        parts.append(_graph_figure(key, result, finding, finding.graph))
    parts.append("</article>")
    return "\n".join(parts)


def _edit_figure(finding: Finding) -> str:
    """The finding's one-line edit as a diff, shown beside the stored-at snippet; titled by what
    ``leakscope fix`` proved of it (verified, not verified and why, or not proven yet)."""
    edit = finding.edit
    if edit is None:
        return ""
    if edit.verified:
        title, cls = "verified fix", "verified"
    elif edit.proof:
        title, cls = "suggested edit, not verified", "unverified"
    else:
        title, cls = "suggested edit, not proven (leakscope fix proves it)", "unproven"
    head = f'<figcaption><span class="snippet-title">{_e(title)}</span> <code>{_e(f"{edit.file}:{edit.line}")}</code></figcaption>'
    before, after = edit_lines(edit)
    rows = (
        f'<span class="del"><span class="ln">-{_e(edit.line)}</span>{_e(before)}</span>'
        f'<span class="ins"><span class="ln">+{_e(edit.line)}</span>{_e(after)}</span>'
    )
    proof = f'<p class="muted proof">{_e(edit.proof)}</p>' if edit.proof else ""
    return (
        f'<figure class="snippet edit {cls}">{head}<pre><code>{rows}</code></pre>{proof}</figure>'
    )


def _snippet(title: str, finding: Finding, source: Source) -> str:
    where = f"{source.file}:{source.line} in {source.function}"
    head = f'<figcaption><span class="snippet-title">{_e(title)}</span> <code>{_e(where)}</code></figcaption>'
    snippet = snippet_for(finding, source)
    if snippet is None:
        why = "not captured when the check ran (a file outside the project, or not found)"
        return f'<figure class="snippet missing">{head}<p class="muted">source not shown: {_e(why)} ({_e(source.file)})</p></figure>'
    rows = []
    for number, text in enumerate(snippet.lines, start=snippet.first_line):
        cls = ' class="hl"' if number == snippet.line else ""
        rows.append(f'<span{cls}><span class="ln">{_e(number)}</span>{_e(text) or " "}</span>')
    code = "".join(rows)
    return f'<figure class="snippet">{head}<pre><code>{code}</code></pre></figure>'


# ---------------------------------------------------------------- retained graph


def _graph_figure(key: str, result: TargetResult, finding: Finding, view: GraphView) -> str:
    svg = graph_svg(view, key)
    shown = len(view.nodes)
    count = node_count(finding.graph_nodes, view.total_nodes)
    caption = f"retained graph below <code>{_e(finding.path)}</code>: {_e(count)}"
    if view.truncated:
        left = view.total_nodes - shown
        caption += (
            f", the first {shown} (breadth first) drawn, <strong>{_e(left)} left out</strong>; all of them: "
            f"<code>leakscope explain {_e(result.target)} --mode {_e(result.mode.value)} --path {_e(finding.path)}</code>"
        )
    caption += ". Red: saves tensors for backward (their bytes stay alive); amber: a leaf that is not a Parameter, or its grad."
    return (
        f'<details class="graph" open><summary>Retained graph ({_e(count)})</summary>'
        f'<figure class="graph-figure"><div class="scroll">{svg}</div><figcaption>{caption}</figcaption></figure></details>'
    )


def _node_kind(node: ViewNode) -> str:
    names = [s.name for s in node.slots]
    if any(n.startswith("parameter") for n in names):
        return "param"
    if any(n.startswith("leaf") for n in names):
        return "leaf"
    if any(s.nbytes for s in node.slots):
        return "saves"
    return "plain"


def _node_detail(node: ViewNode) -> str:
    kept = sum(s.nbytes for s in node.slots)
    if not node.slots:
        return ""
    kind = _node_kind(node)
    if kind == "param":
        return "parameter (not counted)"
    if kind == "leaf":
        grad = " + grad" if any(s.name.endswith(".grad") for s in node.slots) else ""
        return f"leaf{grad} {human_bytes(kept)}"
    return f"saves {human_bytes(kept)}" if kept else f"{len(node.slots)} saved"


#: a box's text: character width, line height, padding (the layout's boxes are sized from them)
_CHAR_W, _LINE_H, _PAD = 7.2, 15, 8


def _measure(node: ViewNode) -> tuple[float, float]:
    """A node's box: wide enough for its name and detail line, one or two lines tall."""
    detail = _node_detail(node)
    return max(len(node.name), len(detail)) * _CHAR_W + 2 * _PAD, (
        2 if detail else 1
    ) * _LINE_H + 2 * _PAD


def _edge_path(chain: list[Box]) -> str:
    """A smooth path from the parent's bottom through each bend to the child's top."""
    points = [(chain[0].x, chain[0].y + chain[0].height)]
    for bend in chain[1:-1]:
        points += [(bend.x, bend.y), (bend.x, bend.y + bend.height)]
    points.append((chain[-1].x, chain[-1].y - 1))
    d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 == x1:
            d += f" L{x1:.1f},{y1:.1f}"
        else:
            mid = (y0 + y1) / 2
            d += f" C{x0:.1f},{mid:.1f} {x1:.1f},{mid:.1f} {x1:.1f},{y1:.1f}"
    return d


def graph_svg(view: GraphView, key: str = "g") -> str:
    """The described nodes of ``view`` as an inline SVG: boxes layered by depth, edges parent to child."""
    layers, chains, width, height = layout(view, _measure)
    described = {n.id for n in view.nodes}
    marker = f"arrow-{_e(key)}"
    out = [
        f'<svg class="graph" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'role="img" aria-label="retained autograd graph" data-nodes="{len(view.nodes)}" data-total="{_e(view.total_nodes)}">',
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path class="arrowhead" d="M0,0 L10,5 L0,10 z"/></marker></defs>',
    ]
    out.extend(
        f'<path class="edge" d="{_edge_path(chain)}" marker-end="url(#{marker})"/>'
        for chain in chains
    )
    for row in layers:
        for box in row:
            if box.node is not None:
                out.append(_node_svg(box, view, described))
    out.append("</svg>")
    return "".join(out)


def _node_svg(box: Box, view: GraphView, described: set[int]) -> str:
    n = box.node
    assert n is not None
    x, y = box.x - box.width / 2, box.y
    hidden = sum(1 for c in n.children if c not in described)
    title = n.name + "".join(
        f"\n{s.name} {s.dtype}[{'x'.join(str(d) for d in s.shape) or '-'}] {human_bytes(s.nbytes)}"
        for s in n.slots
    )
    if hidden:
        title += f"\n{hidden} more input(s) not drawn"
    is_root = n.id == view.root
    parts = [
        f'<g class="node {_node_kind(n)}{" root" if is_root else ""}" data-id="{_e(n.id)}"><title>{_e(title)}</title>',
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{box.width:.1f}" height="{box.height:.1f}" rx="5"/>',
        f'<text class="name" x="{x + _PAD:.1f}" y="{y + _PAD + 11:.1f}">{_e(n.name)}</text>',
    ]
    detail = _node_detail(n)
    if detail:
        parts.append(
            f'<text class="detail" x="{x + _PAD:.1f}" y="{y + _PAD + 11 + _LINE_H:.1f}">{_e(detail)}</text>'
        )
    if hidden:
        parts.append(
            f'<text class="more" x="{box.x:.1f}" y="{y + box.height + 13:.1f}" text-anchor="middle">'
            f"+{hidden} not drawn</text>"
        )
    if is_root:
        parts.append(
            f'<text class="held" x="{box.x:.1f}" y="{y - 8:.1f}" text-anchor="middle">held</text>'
        )
    parts.append("</g>")
    return "".join(parts)


__all__ = ["render", "graph_svg"]
