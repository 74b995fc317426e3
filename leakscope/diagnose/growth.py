"""Growth over micro-batches: run N steps the way ``forward_backward_batch`` does and measure.

The loop keeps every returned output in a list and holds the latest loss until
the next step returns, exactly like verl's caller. After each micro-batch it
settles and measures what this run's graphs still retain. One live graph (the
current loss's) is normal; growth is the leak.

Storage that grows with no graph attached (detached outputs piling up in a
history on the engine, hooks that store detached activations) is measured
separately: it is worth a warning, not a failed gate.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from leakscope.diagnose.findings import holder_finding, storage_growth_finding
from leakscope.diagnose.kinds import holder_key
from leakscope.harness.protocol import EngineSpec
from leakscope.harness.trial import (
    Trial,
    build_subject,
    collect,
    heap_step_nodes,
    make_micro_batch,
    new_trial,
    next_sequence_nr,
    step_once,
)
from leakscope.holders import ENTRY_KINDS, HolderPath
from leakscope.options import CheckOptions
from leakscope.phase import report
from leakscope.probe.autograd import (
    UINT64_MAX,
    StorageMap,
    iter_nodes,
    sequence_nr,
    storage_key,
    storage_map,
)
from leakscope.probe.liveness import alive_bytes, collect_evidence, settle
from leakscope.results import Finding, Growth, Mode

STORAGE_ROOTS = ("engine", "module", "global")


def slope(values: list[int] | tuple[int, ...]) -> float:
    """Least-squares slope of ``values`` against 0, 1, 2, ..."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den


class GrowthRun(NamedTuple):
    """What a micro-batch run found: its curve, its findings, and the bytes the
    references holding a graph after the last micro-batch retain (storage-deduplicated)."""

    growth: Growth
    findings: list[Finding]
    held_bytes: int = 0
    #: ``{holder_key: "growing" | "bounded"}`` for the references holding a graph after the last micro-batch
    kinds: dict[HolderPath, str] = {}


def measure_growth(spec: EngineSpec, mode: Mode, options: CheckOptions) -> GrowthRun:
    """Run ``options.micro_batches`` steps: the growth curve, graphs still held
    after the last micro-batch (NOTE [Held after the last micro-batch]) and
    storage-growth warnings.

    When the target's adapter can drive the framework's own loop
    (``spec.run_micro_batches``, e.g. verl's ``forward_backward_batch``), growth
    is measured through that loop instead; see :func:`_growth_through_loop`.
    """
    if spec.run_micro_batches is not None:
        return _growth_through_loop(spec, mode, options)
    report(step="building")
    model, engine = build_subject(spec, options)
    batches = [make_micro_batch(spec, options, i) for i in range(options.micro_batches)]
    trial = new_trial(spec, mode, options, model, engine, batches)
    del engine
    trial.roots["output"] = []
    ranges: list[tuple[int, int]] = []
    curve = _Curve()
    try:
        loss: Any = None
        trial.seq_start = next_sequence_nr()
        for i, micro_batch in enumerate(batches):
            report(step=f"micro-batch {i + 1} of {len(batches)}")
            start = next_sequence_nr()
            # `loss` is rebound only after the step returns: the previous
            # micro-batch's loss is alive during this step, as in a real loop.
            loss, output = step_once(spec, trial.roots["engine"], micro_batch, mode)
            trial.roots["output"].append(output)
            del output
            trial.seq_end = next_sequence_nr()
            ranges.append((start, trial.seq_end))
            _collect(trial, model, loss, options)
            curve.measure(trial, loss, ranges, options, find_held=i == len(batches) - 1)
        del loss, micro_batch
        return GrowthRun(curve.growth(), curve.held + curve.storage_findings(), curve.held_bytes, curve.kinds)
    finally:
        batches.clear()
        trial.close()
        del model


def _growth_through_loop(spec: EngineSpec, mode: Mode, options: CheckOptions) -> GrowthRun:
    """Growth through the framework's own loop: run it over 1, 2, ..., N micro-batches.

    The loop runs step and backward for each micro-batch inside the framework,
    so nothing can be measured between its micro-batches; a fresh engine driven
    over the first k micro-batches gives the point after micro-batch k. What
    the loop returns is what its caller keeps (the ``output`` root).
    """
    import torch

    from leakscope.errors import EngineError
    from leakscope.harness.protocol import describe_exception
    from leakscope.harness.rng import seeded
    from leakscope.models.tiny import loss_function as default_loss

    assert spec.run_micro_batches is not None
    curve = _Curve()
    forward_only = mode is Mode.FORWARD_ONLY
    for k in range(1, options.micro_batches + 1):
        report(step=f"{spec.adapter or 'framework'} loop over micro-batches 1-{k} of {options.micro_batches}")
        model, engine = build_subject(spec, options)
        batches = [make_micro_batch(spec, options, i) for i in range(k)]
        trial = new_trial(spec, mode, options, model, engine, batches)
        del engine
        try:
            grad_mode = torch.no_grad() if (forward_only and spec.caller_no_grad_forward_only) else torch.enable_grad()
            trial.seq_start = next_sequence_nr()
            try:
                with grad_mode, seeded(0):
                    result = spec.run_micro_batches(
                        trial.roots["engine"], batches, spec.loss_function or default_loss, forward_only
                    )
            except Exception as exc:
                raise EngineError(describe_exception(exc, f"{spec.adapter or 'the framework'} loop")) from None
            trial.roots["output"] = result
            del result
            trial.seq_end = next_sequence_nr()
            _collect(trial, model, None, options)
            curve.measure(trial, None, [(trial.seq_start, trial.seq_end)], options)
        finally:
            batches.clear()
            trial.close()
            del model
    curve.by_batch = ()
    return GrowthRun(curve.growth(), curve.storage_findings())


def _collect(trial: Trial, model: Any, loss: Any, options: CheckOptions) -> None:
    """Add this micro-batch's graph evidence (weakrefs) to the trial's."""
    import torch

    roots: list[Any] = []
    if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
        roots.append(loss.grad_fn)
    found = collect(trial, options)
    roots.extend(found.nodes())
    found.clear()
    roots.extend(heap_step_nodes(trial))  # NOTE [Heap evidence]
    probes = list(getattr(model, "leakscope_probes", ()))
    model.leakscope_probes.clear() if hasattr(model, "leakscope_probes") else None
    more = collect_evidence(roots, probes, is_preexisting=trial.is_preexisting, after_seq=trial.seq_start)
    roots.clear()
    known = {id(item.ref()) for item in trial.evidence.items if item.ref() is not None}
    for item in more.items:
        obj = item.ref()
        if obj is not None and id(obj) not in known:
            trial.evidence.items.append(item)
        del obj
    trial.evidence.leaf_ids |= more.leaf_ids


class _Curve:
    """Measurements after each micro-batch (plain numbers and paths only)."""

    def __init__(self) -> None:
        self.bytes: list[int] = []
        self.by_cause: list[dict[str, int]] = []
        self.nodes: list[int] = []
        self.by_batch: tuple[int, ...] = ()
        self.storage: list[int] = []
        self.storage_paths: list[HolderPath] = []
        self.cuda: list[int] | None = None
        #: after the last micro-batch: references (other than the caller's loss)
        #: holding any micro-batch's graph; see NOTE [Held after the last micro-batch]
        self.held: list[Finding] = []
        self.held_bytes = 0
        self.kinds: dict[HolderPath, str] = {}

    def measure(
        self, trial: Trial, loss: Any, ranges: list[tuple[int, int]], options: CheckOptions, *, find_held: bool = False
    ) -> None:
        """Settle and measure after a micro-batch; ``find_held`` (after the last one) also
        describes every reference still holding a graph of the run."""
        import torch

        settle()
        plain_ids: set[int] = set()
        excluded = set(trial.excluded_storages)
        node_roots: list[Any] = []
        if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
            node_roots.append(loss.grad_fn)
        stored: list[tuple[str, Any]] = []
        paths: list[HolderPath] = []
        # NOTE [Held after the last micro-batch]
        # Every walked reference to a graph node of this run is a holder: the
        # caller keeps only the latest loss (a local of the loop, never walked),
        # and the single-step check reports any other reference that outlives
        # its step. An engine that keeps a graph only on some micro-batches
        # (every second one, or only the last of two) is caught here, whether
        # the kept graph is an earlier micro-batch's or the last one's.
        held: list[tuple[Any, Any]] = []  # (hit, node or None for a held leaf)
        found = collect(trial, options)
        for hit, node in found.holders:
            if node is not None:
                node_roots.append(node)
            if find_held and (node is None or not trial.only_extends_older_graph(node)):  # NOTE [Older graphs]
                held.append((hit, node))
        for hit in found.plain:
            obj = hit.obj
            plain_ids.add(id(obj))
            key = storage_key(obj)
            if key is not None:
                excluded.add(key)
            if hit.root.kind in STORAGE_ROOTS and not trial.is_preexisting(obj) and not _bounded(hit):
                stored.append(("storage", obj))
                paths.append(hit.path)
        found.clear()
        union: StorageMap = {}
        if find_held:
            from leakscope.diagnose.kinds import holder_kinds, reached_micro_batches

            self.kinds = holder_kinds(
                ((hit.path, reached_micro_batches(node, ranges), _maxlen(hit)) for hit, node in held), len(ranges) - 1
            )
        # Holding a tensor (or node) holds its graph, so each held reference
        # retains it on its own: confirmed by construction.
        self.held = [
            dataclasses.replace(
                holder_finding(
                    hit.path, hit.obj, excluded=excluded, after_seq=trial.seq_start, union=union, confirmed=True,
                    adapter=trial.spec.adapter,
                ),
                kind=self.kinds.get(holder_key(hit.path)),
            )
            for hit, _ in held
        ]
        self.held_bytes = sum(nbytes for _, nbytes in union.values())
        union.clear()
        held.clear()
        alive = trial.evidence.alive(plain_ids)
        by_cause = alive_bytes(alive, excluded)
        self.bytes.append(sum(by_cause.values()))
        self.by_cause.append(dict(sorted(by_cause.items())))
        alive.clear()
        self.storage.append(sum(n for _, n in storage_map(stored, trial.excluded_storages).values()))
        stored.clear()
        self.storage_paths = paths
        counts = [0] * len(ranges)
        total = 0
        for node in iter_nodes(node_roots):
            total += 1
            seq = sequence_nr(node)
            if seq == UINT64_MAX:
                continue
            for i, (start, end) in enumerate(ranges):
                if start < seq < end:
                    counts[i] += 1
                    break
        node_roots.clear()
        self.nodes.append(total)
        self.by_batch = tuple(counts)
        if torch.cuda.is_available() and options.device == "cuda":
            self.cuda = (self.cuda or []) + [int(torch.cuda.memory_allocated())]

    def growth(self) -> Growth:
        return Growth(
            retained_bytes=tuple(self.bytes),
            slope_bytes=round(slope(self.bytes), 1),
            graph_nodes=tuple(self.nodes),
            nodes_by_micro_batch=self.by_batch,
            storage_bytes=tuple(self.storage),
            storage_slope_bytes=round(slope(self.storage), 1),
            cuda_allocated=tuple(self.cuda) if self.cuda is not None else None,
            retained_by_cause=tuple(self.by_cause),
        )

    def storage_findings(self) -> list[Finding]:
        """A warning when graph-free storage grows on *every* micro-batch.

        A tensor stored once in a while and replaced (``self.logged = x`` every
        third step) raises the curve once; that is a slot, not a pile.
        """
        rate = slope(self.storage)
        steps = [b - a for a, b in zip(self.storage, self.storage[1:])]
        if rate <= 0 or not self.storage_paths or not steps or min(steps) <= 0:
            return []
        return [storage_growth_finding(_growing_container(self.storage_paths), int(round(rate)))]


def _bounded(hit: Any) -> bool:
    """A tensor in a ``deque(maxlen=...)``: that container cannot grow without bound."""
    return _maxlen(hit) is not None


def _maxlen(hit: Any) -> int | None:
    """The ``maxlen`` of the deque ``hit`` sits in, if it does."""
    from collections import deque

    container = hit.link.container
    return container.maxlen if isinstance(container, deque) else None


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
