"""One-line summaries shared by the CI formats and the pytest plugin (pure strings).

Every format says the same thing in the same words: a reader who saw the
pytest failure recognises the JUnit message, the SARIF result and the
pull-request annotation.
"""

from __future__ import annotations

from typing import Any

from leakscope.policy import FailOn, fails
from leakscope.results import (
    Edit,
    Finding,
    Holder,
    LeakKind,
    Report,
    Severity,
    TargetResult,
    Verdict,
)


def human_bytes(n: int) -> str:
    """``12288`` -> ``12.0 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def node_count(graph_nodes: int, drawn: int) -> str:
    """``26 graph nodes (35 drawn, 9 not counted: AccumulateGrad and earlier steps' nodes)``.

    NOTE [One node count]: a finding's ``graph_nodes`` is the number of autograd nodes of the
    judged step that its holder keeps alive, the count its bytes are computed from (each node at
    ``node_cost``). A leaf's or parameter's AccumulateGrad node is not counted (it lives as long as
    its tensor, whoever holds the graph), nor is a node an earlier step created. The drawing
    (``graph.total_nodes``, ``explain``, the HTML figure) shows every node below the reference, so
    it can have more; every format says the counted number first, in these words.
    """
    text = f"{graph_nodes} graph node{'s' if graph_nodes != 1 else ''}"
    if drawn > graph_nodes:
        text += f" ({drawn} drawn, {drawn - graph_nodes} not counted: AccumulateGrad and earlier steps' nodes)"
    return text


def leak_size(result: TargetResult) -> str:
    """``12.0 KiB per micro-batch, growing`` / ``23.0 MiB held until the next step, bounded``."""
    size = human_bytes(result.retained_bytes)
    if result.kind is LeakKind.GROWING:
        return f"{size} per micro-batch, growing"
    if result.kind is LeakKind.BOUNDED:
        return f"{size} held until the next step, bounded"
    return f"{size} per micro-batch"


def source_lines(f: Finding) -> list[str]:
    """``created at`` (with the engine-side calls when it is a shared helper) and ``stored at``."""
    lines = []
    if f.source:
        lines.append(f"    created at {f.source}")
        lines.extend(f"      called from {site}" for site in f.called_from)
    if f.stored_at:
        op = f" ({f.store_op})" if f.store_op else ""
        lines.append(f"    stored at {f.stored_at}{op}")
    return lines


def growth_line(result: TargetResult) -> str:
    """``retained after micro-batch 1..N: ...`` with slope and per-micro-batch node origin."""
    g = result.growth
    assert g is not None
    per = ", ".join(human_bytes(b) for b in g.retained_bytes)
    line = f"  growth over {len(g.retained_bytes)} micro-batches: {per} (slope {human_bytes(int(max(g.slope_bytes, 0)))}/micro-batch)"
    if g.nodes_by_micro_batch:
        origin = ", ".join(f"#{i}: {n}" for i, n in enumerate(g.nodes_by_micro_batch))
        line += f"; live graph nodes by micro-batch {origin}"
    if result.kind is LeakKind.GROWING and g.slope_bytes > 0:
        # A growing leak at scale: the slope over a long run (it frees its graphs only when its holder does).
        line += (
            f"; at this slope {human_bytes(int(g.slope_bytes * 1_000))} per 1,000 micro-batches,"
            f" {human_bytes(int(g.slope_bytes * 20_000))} per 20,000 (an epoch of that many) until the holder lets go"
        )
    if g.storage_slope_bytes > 0:
        line += f"; graph-free storage grows {human_bytes(int(g.storage_slope_bytes))}/micro-batch"
    if g.cuda_allocated:
        line += "; cuda allocated " + ", ".join(human_bytes(b) for b in g.cuda_allocated)
    return line


def projection_line(p: Any) -> str:
    """What the leak costs at the user's scale, the fitted terms and every assumption (one block)."""
    s = p.scale
    dims = [f"hidden={s.hidden}", f"tokens={s.tokens}"]
    dims += [
        f"{k}={v}" for k, v in (("vocab", s.vocab), ("layers", s.layers), ("batch", s.batch)) if v
    ]
    dims.append(s.dtype)
    lines = []
    head = f"  at {', '.join(dims)}:"
    if p.bytes_per_micro_batch or not p.bounded_bytes:
        head += (
            f" {human_bytes(p.bytes_per_micro_batch)} per micro-batch (growing), "
            f"{human_bytes(p.bytes_per_update)} per update of {s.micro_batches}"
        )
        if s.gpu_memory is not None:
            head += (
                f"; {human_bytes(s.gpu_memory)} runs out at micro-batch {p.oom_micro_batch}"
                if p.oom_micro_batch is not None
                else f"; fits in {human_bytes(s.gpu_memory)}"
            )
    if p.bounded_bytes:
        head += ";" if head.endswith(")") or "update" in head else ""
        head += f" {human_bytes(p.bounded_bytes)} held at the peak (bounded: one step's graph)"
        if p.bounded_fits is not None:
            head += (
                f", {'fits' if p.bounded_fits else 'does not fit'} in {human_bytes(s.gpu_memory)}"
            )
    lines.append(head)
    for term in getattr(p, "terms", ()):
        part = "per micro-batch" if term.part == "growing" else "held once"
        lines.append(f"    {term} = {human_bytes(term.bytes)} {part}")
    for assumption in getattr(p, "assumptions", ()):
        lines.append(f"    assumes {assumption}")
    return "\n".join(lines)


def label(result: TargetResult) -> str:
    """``pkg.mod:Engine [train]``."""
    settings = f" [{', '.join(result.settings)}]" if result.settings else ""
    return f"{result.target} [{result.mode.value}]{settings}"


def finding_line(finding: Finding) -> str:
    """What one finding retains, in one line (no fix hint)."""
    size = human_bytes(finding.retained_bytes)
    if finding.holder is Holder.STORAGE_GROWTH:
        return (
            f"{finding.path} (storage growth) grows by about {size} per micro-batch of tensors "
            "without a graph (not a graph leak, but unbounded)"
        )
    what = {
        "leak": "keeps this step's autograd graph alive",
        "warning": "keeps this step's autograd graph alive until the cyclic garbage collector runs",
        "allowed": "keeps this step's autograd graph alive (allowed)",
    }.get(finding.severity, "keeps this step's autograd graph alive")
    kind = f", {finding.kind}" if finding.kind else ""
    return f"{finding.path} ({finding.holder}, {finding.grad_fn}) {what}: {size}, cause {finding.cause}{kind}"


def finding_block(finding: Finding) -> str:
    """A finding in a few indented lines: what, where it was created, the fix."""
    lines = [f"  {finding_line(finding)}"]
    lines.extend(source_lines(finding))
    if finding.allowed_reason:
        lines.append(f"    allowed: {finding.allowed_reason}")
    lines.append(f"    fix: {finding.hint}")
    return "\n".join(lines)


def result_detail(result: TargetResult, fail_on: FailOn = FailOn.LEAK) -> str:
    """:func:`result_line` followed by every finding and warning of the result."""
    lines = [result_line(result, fail_on)]
    lines.extend(finding_block(f) for f in result.findings)
    lines.extend(f"  warning: {w}" for w in result.warnings)
    return "\n".join(lines)


def finding_message(result: TargetResult, finding: Finding) -> str:
    """A finding as an annotation message: where, what, and the fix."""
    text = f"{label(result)}: {finding_line(finding)}. Fix: {finding.hint}"
    if finding.allowed_reason:
        text += f". Allowed: {finding.allowed_reason}"
    return text


def shown_verdict(result: TargetResult, fail_on: FailOn = FailOn.LEAK) -> str:
    """What the gate made of ``result``: ``leak``, ``error``, ``clean``, or ``warning`` for a clean
    result whose warnings fail ``--fail-on warning``. Every format's verdict word, colour and count."""
    if result.verdict is Verdict.CLEAN and fails(result, fail_on):
        return "warning"
    return result.verdict.value


def warning_count(result: TargetResult) -> str:
    """``2 warnings``: warning findings and warning lines of ``result``."""
    warned = sum(1 for f in result.findings if f.severity is Severity.WARNING) + len(
        result.warnings
    )
    return f"{warned} warning{'s' if warned != 1 else ''}"


def result_line(result: TargetResult, fail_on: FailOn = FailOn.LEAK) -> str:
    """The verdict of one target and mode in one line, as the ``fail_on`` gate judged it."""
    if result.verdict is Verdict.ERROR:
        return f"{label(result)}: error: {result.error}"
    leaks = [f for f in result.findings if f.severity is Severity.LEAK]
    extras = []
    allowed = sum(1 for f in result.findings if f.severity is Severity.ALLOWED)
    warned = sum(1 for f in result.findings if f.severity is Severity.WARNING) + len(
        result.warnings
    )
    if allowed:
        extras.append(f"{allowed} allowed")
    if warned:
        extras.append(warning_count(result))
    tail = f" ({', '.join(extras)})" if extras else ""
    if shown_verdict(result, fail_on) == "warning":
        return f"{label(result)}: {warning_count(result)}, failing --fail-on warning{f' ({allowed} allowed)' if allowed else ''}"
    if result.verdict is Verdict.CLEAN:
        return f"{label(result)}: clean{tail}"
    paths = ", ".join(str(f.path) for f in leaks) or "no named holder"
    count = f"{len(leaks)} reference{'s' if len(leaks) != 1 else ''}"
    return f"{label(result)}: graph retained by {count}, {leak_size(result)}: {paths}{tail}"


def report_line(report: Report, exit_code: int, fail_on: FailOn = FailOn.LEAK) -> str:
    """``leakscope: 1 leak, 1 clean, 0 error (exit 1)``; under ``fail_on="warning"`` the results
    whose warnings fail the gate are counted apart (``0 leak, 1 warning, 0 clean, 0 error (exit 1)``),
    so that the counts and the exit code tell one story."""
    shown = [shown_verdict(r, fail_on) for r in report.results]
    warned = shown.count("warning")
    warning = f"{warned} warning, " if warned else ""
    return (
        f"leakscope: {shown.count('leak')} leak, {warning}{shown.count('clean')} clean, "
        f"{shown.count('error')} error (exit {exit_code})"
    )


def edit_lines(edit: Edit) -> tuple[str, str]:
    """The edited line before and after, indented as at ``edit.column`` (with spaces: a report carries
    no file text, so a tab-indented line shows as spaces)."""
    indent = " " * (edit.column - 1)
    return f"{indent}{edit.before}", indent + edit.after.replace("\n", "\n" + indent)


__all__ = [
    "edit_lines",
    "finding_block",
    "finding_line",
    "finding_message",
    "growth_line",
    "human_bytes",
    "label",
    "leak_size",
    "node_count",
    "projection_line",
    "report_line",
    "result_detail",
    "result_line",
    "shown_verdict",
    "source_lines",
    "warning_count",
]
