"""Leak kinds: does a held graph grow with every micro-batch, or is it bounded?

# NOTE [Leak kinds]
# Both kinds fail the gate; they differ in what they cost at scale.
#
# - growing: every micro-batch adds a graph the caller keeps (a returned
#   tree kept in ``output_lst``, ``self.history.append(loss)``, a running sum
#   ``self.total = self.total + loss``). Memory climbs per micro-batch until the
#   update ends or the job dies: it is projected per micro-batch.
# - bounded: the holder keeps only the latest micro-batch's graph (or the last
#   ``maxlen`` of a ``deque(maxlen=...)``) and lets it go when the next one
#   replaces it (``self.last_logits = logits``, torchmetrics' ``_forward_cache``).
#   It never climbs, but it costs one step's retained graph of peak memory at
#   the worst moment (during the next backward): it is projected as a peak.
#
# Classified from the growth run (``--micro-batches N``, N >= 2): after the last
# micro-batch, each reference that still holds a graph is asked which
# micro-batches' graphs it reaches (graph-node sequence numbers, one range per
# micro-batch). A holder shape (``output[*].model_output.log_probs``) that
# reaches only the last micro-batch's graph, or sits in a deque with a maxlen,
# is bounded; one that reaches an earlier micro-batch's graph is growing (it
# kept a graph past the step that replaced it). When the framework's own loop
# runs the micro-batches (no point between them to look at), the curve decides:
# retained bytes that rise from the first micro-batch to the last are growing,
# a flat curve is bounded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from leakscope.holders import HolderPath, RootKind, SegmentKind
from leakscope.results import Finding, LeakKind, Severity

if TYPE_CHECKING:
    from leakscope.harness.observe import Held

GROWING = LeakKind.GROWING
BOUNDED = LeakKind.BOUNDED
KINDS = tuple(LeakKind)


def holder_key(path: HolderPath) -> HolderPath:
    """The same holder in a single step and in a growth run.

    ``output[2].model_output.log_probs`` (the growth run keeps every output in a
    list, as ``output_lst`` does) and ``output.model_output.log_probs`` (one
    step) are the same holder; entries become ``*``.
    """
    segments = path.segments
    if path.root_kind is RootKind.OUTPUT and segments and segments[0].kind is SegmentKind.INDEX:
        segments = segments[1:]
    return HolderPath(path.root, segments).shape()


def kind_of(steps: frozenset[int], latest: int, maxlen: int | None = None) -> LeakKind:
    """One reference's kind: bounded when it reaches only the latest step's graph (or sits in a
    deque with a maxlen), growing when it reaches an earlier one (NOTE [Leak kinds])."""
    return BOUNDED if steps <= {latest} or maxlen is not None else GROWING


def group_kind(members: Iterable[Held], latest: int) -> LeakKind:
    """The kind of one holder seen at several references (its entries in a list, its shape across
    calls): bounded when together they reach only the latest step's graph or every one sits in a
    deque with a maxlen, else growing (NOTE [Leak kinds])."""
    steps: set[int] = set()
    capped = True
    for held in members:
        steps |= held.steps
        capped = capped and held.maxlen is not None
    return kind_of(frozenset(steps), latest, 0 if capped else None)


def holder_kinds(held: Iterable[Held], last: int) -> dict[HolderPath, LeakKind]:
    """``{holder_key: kind}`` of the references held after the last micro-batch (index ``last``)."""
    groups: dict[HolderPath, list[Held]] = {}
    for h in held:
        groups.setdefault(holder_key(h.path), []).append(h)
    return {key: group_kind(members, last) for key, members in groups.items()}


def curve_kind(retained: Sequence[int]) -> LeakKind | None:
    """The kind a growth curve shows: rising is growing, flat and non-zero is bounded."""
    if len(retained) < 2 or max(retained) <= 0:
        return None
    return GROWING if retained[-1] > retained[0] else BOUNDED


def with_kinds(
    findings: Iterable[Finding], kinds: Mapping[HolderPath, LeakKind], default: LeakKind | None
) -> list[Finding]:
    """Each leak finding with its kind: its holder's in the growth run, else the curve's."""
    out = []
    for f in findings:
        if f.severity is Severity.WARNING or f.kind is not None:
            out.append(f)
            continue
        kind = kinds.get(holder_key(f.path), default)
        out.append(dataclasses.replace(f, kind=kind) if kind is not None else f)
    return out


def result_kind(findings: Iterable[Finding]) -> LeakKind | None:
    """The headline kind: growing if any failing finding grows, else bounded (None: unknown)."""
    kinds = {f.kind for f in findings if f.severity is Severity.LEAK and f.kind is not None}
    if GROWING in kinds:
        return GROWING
    return BOUNDED if BOUNDED in kinds else None


__all__ = [
    "BOUNDED",
    "GROWING",
    "KINDS",
    "curve_kind",
    "group_kind",
    "holder_key",
    "holder_kinds",
    "kind_of",
    "result_kind",
    "with_kinds",
]
