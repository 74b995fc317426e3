"""The human report: per target and mode, the verdict and a table of findings."""

from __future__ import annotations

import io
from typing import Any

from leakscope.holders import shorten
from leakscope.policy import exit_code
from leakscope.results import Finding, Report, TargetResult, Verdict

_STYLE = {Verdict.CLEAN: "bold green", Verdict.LEAK: "bold red", Verdict.ERROR: "bold yellow"}


def human_bytes(n: int) -> str:
    """``12288`` -> ``12.0 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def leak_size(result: TargetResult) -> str:
    """``12.0 KiB per micro-batch, growing`` / ``23.0 MiB held until the next step, bounded``."""
    size = human_bytes(result.retained_bytes)
    if result.kind == "growing":
        return f"{size} per micro-batch, growing"
    if result.kind == "bounded":
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
    if g.storage_slope_bytes > 0:
        line += f"; graph-free storage grows {human_bytes(int(g.storage_slope_bytes))}/micro-batch"
    if g.cuda_allocated:
        line += "; cuda allocated " + ", ".join(human_bytes(b) for b in g.cuda_allocated)
    return line


def projection_line(p: Any) -> str:
    """What the leak costs at the user's scale, the fitted terms and every assumption (one block)."""
    s = p.scale
    dims = [f"hidden={s.hidden}", f"tokens={s.tokens}"]
    dims += [f"{k}={v}" for k, v in (("vocab", s.vocab), ("layers", s.layers), ("batch", s.batch)) if v]
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
            head += f", {'fits' if p.bounded_fits else 'does not fit'} in {human_bytes(s.gpu_memory)}"
    lines.append(head)
    for term in getattr(p, "terms", ()):
        part = "per micro-batch" if term.part == "growing" else "held once"
        lines.append(f"    {term} = {human_bytes(term.bytes)} {part}")
    for assumption in getattr(p, "assumptions", ()):
        lines.append(f"    assumes {assumption}")
    return "\n".join(lines)


def _result_block(result: TargetResult, debug: bool) -> list[Any]:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    head = Text()
    head.append(f"{result.target} ", style="bold")
    head.append(f"[{result.mode.value}] ")
    if result.settings:  # the adapter settings the step ran with
        head.append(f"[{', '.join(result.settings)}] ")
    if result.rank is not None:  # under torchrun, only where ranks differ
        head.append(f"[rank {result.rank}] ")
    head.append(result.verdict.value.upper(), style=_STYLE[result.verdict])
    if result.verdict is Verdict.LEAK:
        head.append(f"  {leak_size(result) if result.kind else f'{human_bytes(result.retained_bytes)} retained per micro-batch'}")
    blocks: list[Any] = [head]
    if result.error:
        blocks.append(Text(f"  error: {result.error}"))
        if debug and result.traceback:
            blocks.append(Text(result.traceback.rstrip()))
    if result.findings:
        table = Table(show_header=True, header_style="bold", expand=False, box=box.SIMPLE_HEAD)
        for column in ("path", "holder", "grad_fn", "cause", "kind", "bytes", "confirmed"):
            table.add_column(column, overflow="fold", justify="right" if column == "bytes" else "left")
        for f in result.findings:
            severity = "" if f.severity == "leak" else f" ({f.severity})"
            table.add_row(
                shorten(str(f.path)), f.holder + severity, f.grad_fn, f.cause, f.kind or "-", human_bytes(f.retained_bytes),
                "yes" if f.confirmed else "no",
            )
        blocks.append(table)
        for f in result.findings:
            lines = [f"  {shorten(str(f.path))}"]
            lines.extend(source_lines(f))
            if len(f.bytes_by_cause) > 1:
                split = ", ".join(f"{cause} {human_bytes(n)}" for cause, n in f.bytes_by_cause.items())
                lines.append(f"    bytes by cause: {split}")
            if f.node_cost and f.graph_nodes:
                lines.append(f"    graph nodes: {f.graph_nodes}, each counted at {f.node_cost}")
            if f.allowed_reason:
                lines.append(f"    allowed: {f.allowed_reason}")
            lines.append(f"    fix: {f.hint}")
            blocks.append(Text("\n".join(lines)))
    if result.growth is not None:
        blocks.append(Text(growth_line(result)))
    if result.projection is not None:
        blocks.append(Text(projection_line(result.projection)))
    if set(result.keys_read) - _TOKEN_KEYS:  # synthesised keys: say what the engine was fed
        blocks.append(Text(f"  micro-batch keys read: {', '.join(result.keys_read)}"))
    for warning in result.warnings:
        blocks.append(Text(f"  warning: {warning}", style="yellow"))
    return blocks


#: the keys of leakscope's micro-batch that need no synthesis
_TOKEN_KEYS = {"input_ids", "attention_mask", "position_ids"}


def render(
    report: Report, *, color: bool = False, width: int = 120, debug: bool = False, fail_on: str = "leak", **_: Any
) -> str:
    """The report as terminal text (ANSI colours only when ``color``); the footer's exit code is
    :func:`leakscope.policy.exit_code` under ``fail_on``, the process's own."""
    from rich.console import Console
    from rich.text import Text

    buffer = io.StringIO()
    console = Console(
        file=buffer, width=width, color_system="standard" if color else None,
        force_terminal=color, no_color=not color, highlight=False, soft_wrap=False,
    )
    console.print(Text(
        f"leakscope {report.leakscope_version} · torch {report.torch_version} · Python {report.python_version}",
        style="dim",
    ))
    for result in report.results:
        console.print()
        for block in _result_block(result, debug):
            # Text lines (paths, fixes) are never wrapped: they are copied into editors.
            console.print(block, soft_wrap=not hasattr(block, "columns"))
    counts = {v: sum(1 for r in report.results if r.verdict is v) for v in Verdict}
    console.print()
    console.print(Text(
        f"{counts[Verdict.LEAK]} leak, {counts[Verdict.CLEAN]} clean, {counts[Verdict.ERROR]} error "
        f"(exit {exit_code(report, fail_on)})",
        style="bold",
    ))
    return buffer.getvalue()
