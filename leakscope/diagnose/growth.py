"""Growth over micro-batches: the curve and what it says (plain numbers; the run is the harness's).

``check --micro-batches N`` runs N steps the way ``forward_backward_batch`` does
(:meth:`leakscope.harness.experiment.Experiment.micro_batches`); ``watch`` looks
before every watched call. Either way the harness observes after each step and
this module turns the observations into a :class:`~leakscope.results.Growth`:
bytes the steps' graphs keep (NOTE [One accounting]), nodes alive, and the
slope. One live graph (the current loss's) is normal; growth is the leak.

Storage that grows with no graph attached (detached outputs piling up in a
history on the engine, hooks that store detached activations) is measured
separately: it is worth a warning, not a failed gate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from leakscope.diagnose.findings import storage_growth_finding, union_bytes, with_nodes
from leakscope.holders import ENTRY_KINDS, HolderPath
from leakscope.results import Finding, Growth

if TYPE_CHECKING:
    from leakscope.harness.observe import Held, Observation


def slope(values: Sequence[int] | Sequence[float]) -> float:
    """Least-squares slope of ``values`` against 0, 1, 2, ..."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den


def point_bytes(
    obs: Observation,
    held: Iterable[Held] | None = None,
    unnamed: Iterable[Mapping[str, int]] = (),
) -> dict[str, int]:
    """Bytes by cause at one point of a growth curve (NOTE [One accounting]), the one rule for
    both: after a check's micro-batch (``held`` None), the alive tensors of the steps' graphs plus
    the live nodes held by a reference (not the caller's latest loss) at the measured cost of one;
    at a watch's look, every graph the found holders ``held`` keep, each storage and node once,
    plus what is alive that no holder was found for (``unnamed``: the same bytes the
    ``<unknown holder>`` rows show), so the curve never reads 0 B under a non-zero headline."""
    if held is None:
        return dict(sorted(with_nodes(obs.alive, obs.held_nodes, obs.node_bytes).items()))
    out = union_bytes(held, obs.node_bytes)
    for by_cause in unnamed:
        for cause, nbytes in by_cause.items():
            out[cause] = out.get(cause, 0) + nbytes
    return dict(sorted(out.items()))


def curve(
    observations: Sequence[Observation],
    storage: Sequence[int] = (),
    *,
    points: Sequence[Mapping[str, int]] | None = None,
) -> Growth:
    """The growth curve over observations (one per micro-batch, or per look): the one place a
    :class:`~leakscope.results.Growth` is made. ``points``: bytes by cause at each observation when
    the caller measured them (a watch's looks), else :func:`point_bytes` of each."""
    by_cause = (
        [dict(p) for p in points]
        if points is not None
        else [point_bytes(obs) for obs in observations]
    )
    retained = [sum(point.values()) for point in by_cause]
    last = observations[-1] if observations else None
    cuda = [obs.cuda_allocated for obs in observations]
    return Growth(
        retained_bytes=tuple(retained),
        slope_bytes=round(slope(retained), 1),
        graph_nodes=tuple(obs.graph_nodes for obs in observations),
        nodes_by_micro_batch=last.nodes_by_step if last is not None else (),
        storage_bytes=tuple(storage),
        storage_slope_bytes=round(slope(storage), 1),
        cuda_allocated=tuple(c or 0 for c in cuda)
        if cuda and all(c is not None for c in cuda)
        else None,
        retained_by_cause=tuple(by_cause),
    )


def growing_and_bounded(growth: Growth) -> tuple[dict[str, int], dict[str, int]]:
    """Per cause, from the first two points of a curve: the bytes each micro-batch adds (growing)
    and the bytes of one step's graph that stay as they are (bounded); empty with fewer points."""
    if len(growth.retained_by_cause) < 2:
        return {}, {}
    first, second = growth.retained_by_cause[0], growth.retained_by_cause[1]
    growing, bounded = {}, {}
    for cause in set(first) | set(second):
        r1, r2 = first.get(cause, 0), second.get(cause, 0)
        growing[cause] = max(0, r2 - r1)
        bounded[cause] = max(0, r1 - growing[cause])
    return growing, bounded


def storage_findings(storage: Sequence[int], paths: Sequence[HolderPath]) -> list[Finding]:
    """A warning when graph-free storage grows on *every* micro-batch.

    A tensor stored once in a while and replaced (``self.logged = x`` every
    third step) raises the curve once; that is a slot, not a pile.
    """
    rate = slope(storage)
    steps = [b - a for a, b in zip(storage, storage[1:])]
    if rate <= 0 or not paths or not steps or min(steps) <= 0:
        return []
    return [storage_growth_finding(_growing_container(list(paths)), int(round(rate)))]


def _growing_container(paths: list[HolderPath]) -> HolderPath:
    """The container that grows, from the paths of the graph-free tensors it holds.

    The most common path shape (entries as ``*``) wins; when several tensors
    share it, the container is the path up to its last entry
    (``engine.caught[0].source``, ``engine.caught[1].source`` -> ``engine.caught``;
    ``engine.pending[2].gi_frame.f_locals['x']`` -> ``engine.pending``); a single
    tensor that grows in place is named by its own path.
    """
    by_shape: dict[HolderPath, list[HolderPath]] = {}
    for path in paths:
        by_shape.setdefault(path.shape(), []).append(path)
    shape = max(by_shape, key=lambda k: (len(by_shape[k]), str(k)))
    members = sorted(by_shape[shape], key=str)
    if len(members) == 1:
        return members[0]
    first = members[0]
    for i in range(len(first.segments) - 1, -1, -1):
        if first.segments[i].kind in ENTRY_KINDS:
            return first.prefix(i)
    return first


__all__ = [
    "curve",
    "growing_and_bounded",
    "point_bytes",
    "slope",
    "storage_findings",
]
