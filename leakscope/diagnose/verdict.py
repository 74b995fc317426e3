"""Judge one target in one mode: find who holds the step's graph, size it, prove it.

The steps, each on a fresh model and engine (a step costs milliseconds):

1. Run the step with anomaly-mode stack traces on, observe the caller's roots,
   and describe every candidate reference (path, holder, graph size, bytes,
   cause, source line).
2. Confirm each candidate: re-run, release every *other* candidate the way the
   fix would (detached copies in their place), and check that this step's
   graph is still alive. A candidate that keeps it alive on its own is
   ``confirmed``.
3. Release all candidates in one more run: whatever is still alive is held by
   something the walk cannot see, and is reported as ``<unknown holder>``.
"""

from __future__ import annotations

from typing import Any

from leakscope.diagnose.fixes import hint_for, holder_kind
from leakscope.harness.protocol import EngineSpec
from leakscope.harness.source import display_path, engine_files, user_frame_in_stack_text
from leakscope.harness.trial import Observation, Trial, observe, run_trial
from leakscope.options import CheckOptions
from leakscope.probe.autograd import (
    CAUSE_ORDER,
    LEAF_GRAD,
    NODES_ONLY,
    UNTIL_GC,
    StorageMap,
    bytes_by_cause,
    graph_tensors,
    node_name,
    storage_key,
    storage_map,
    storage_nbytes,
)
from leakscope.probe.liveness import alive_bytes, settle
from leakscope.probe.references import Hit, ReleaseFailed, path_shape, release
from leakscope.results import Finding, Mode, Source, TargetResult, Verdict

UNKNOWN_HOLDER = "<unknown holder>"


def judge(spec: EngineSpec, mode: Mode, options: CheckOptions) -> TargetResult:
    """The verdict and findings for ``spec`` in ``mode``."""
    trial = run_trial(spec, mode, options, anomaly=options.source)
    try:
        died_in_gc = _until_gc_bytes(trial)
        obs = observe(trial, options)
        union: StorageMap = {}
        findings = [_describe(hit, trial, obs, union) for hit in obs.candidates]
        residual = alive_bytes(obs.alive_unexplained(), obs.excluded_storages) if not obs.candidates else {}
        warnings = ["the holder walk stopped at --max-objects; some holders may be unnamed"] if obs.truncated else []
        obs.clear()
    finally:
        trial.close()
    if findings and options.confirm:
        findings = _confirm(spec, mode, options, findings)
        residual = _residual_after_release(spec, mode, options)
    if sum(residual.values()) > 0:
        findings.append(unknown_finding(residual))
    if not findings and sum(died_in_gc.values()) > 0:
        findings.append(_until_gc_finding(died_in_gc))
    growth = None
    held_bytes = 0  # retained after the last micro-batch, when only the growth run saw a leak
    if options.micro_batches > 1:
        from leakscope.diagnose.growth import measure_growth

        run = measure_growth(spec, mode, options)
        growth = run.growth
        # Graphs still held after the last micro-batch are a leak the single
        # step can miss (an engine that keeps every second step; NOTE [Held
        # after the last micro-batch]); when the single step already named the
        # holders, they are not repeated under their micro-batch-indexed paths.
        single_step_leak = any(f.severity == "leak" for f in findings)
        findings.extend(f for f in run.findings if f.severity != "leak" or not single_step_leak)
        if not single_step_leak:
            held_bytes = run.held_bytes
    verdict = Verdict.LEAK if any(f.severity == "leak" for f in findings) else Verdict.CLEAN
    projection = None
    if options.at is not None and verdict is Verdict.LEAK:
        from leakscope.diagnose.projection import project

        projection = project(spec, mode, options, options.at)
    total = sum(bytes_by_cause(union).values()) + sum(residual.values()) + held_bytes if verdict is Verdict.LEAK else 0
    return TargetResult(
        target=spec.name, mode=mode, verdict=verdict, findings=_anchored(findings, spec),
        retained_bytes=total, warnings=tuple(warnings), growth=growth, projection=projection,
    )


def _until_gc_bytes(trial: Trial) -> dict[str, int]:
    """Bytes alive before ``settle()`` that the cyclic GC then freed (see ``until-gc``)."""
    before = {}
    for item, obj in trial.evidence.alive():
        key = storage_key(obj)
        if key is not None and key not in trial.excluded_storages:
            before[id(item)] = (item.cause, key, storage_nbytes(obj))
        del obj
    if not before:
        return {}
    settle()
    still = {id(item) for item, _ in trial.evidence.alive()}
    seen: set[tuple[str, int]] = set()
    out: dict[str, int] = {}
    for item_id, (_cause, key, nbytes) in before.items():
        if item_id in still or key in seen:
            continue
        seen.add(key)
        out[UNTIL_GC] = out.get(UNTIL_GC, 0) + nbytes
    return out


def _graph_of(obj: Any) -> tuple[list[Any], list[tuple[str, Any]], str]:
    """Graph roots, extra leaf tensors, and the grad_fn label for one held object."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.grad_fn is not None:
            return [obj.grad_fn], [], node_name(obj.grad_fn)
        extra = [(LEAF_GRAD, obj)]
        if obj.grad is not None:
            extra.append((LEAF_GRAD, obj.grad))
        return [], extra, "AccumulateGrad (leaf)"
    return [obj], [], node_name(obj)


def _anchored(findings: list[Finding], spec: EngineSpec) -> tuple[Finding, ...]:
    """Findings with no known creating line point at the engine's ``forward_step``.

    A held leaf, an unnamed holder, a reference cycle or storage growth has no
    line that created it, but SARIF and pull-request annotations need a place
    to stand.
    """
    if all(f.source is not None for f in findings):
        return tuple(findings)
    import dataclasses

    anchor = anchor_source(spec)
    return tuple(f if f.source is not None else dataclasses.replace(f, source=anchor) for f in findings)


def _source_of(obj: Any, spec: EngineSpec, modules: Any = ()) -> Source | None:
    return created_at(obj, modules)


def created_at(obj: Any, modules: Any = ()) -> Source | None:
    """The user line that created ``obj``'s graph node (needs anomaly-mode stack traces).

    Lines in ``modules``' files are preferred. Shared with ``leakscope watch``.
    """
    node = getattr(obj, "grad_fn", None) if not _is_node(obj) else obj
    if node is not None:
        try:
            text = node.metadata.get("traceback_")
        except Exception:
            text = None
        if isinstance(text, (list, tuple)):
            text = "".join(str(line) for line in text)
        if text:
            found = user_frame_in_stack_text(str(text), engine_files(modules))
            if found is not None:
                return found
    return None


def _is_node(obj: Any) -> bool:
    from leakscope.probe.references import kinds

    return kinds().is_node(obj)


def anchor_source(spec: EngineSpec) -> Source | None:
    """Where the engine's ``forward_step`` (or the step function) is defined."""
    import inspect

    anchor = spec.anchor
    fn = getattr(anchor, "forward_step", None) if inspect.isclass(anchor) else anchor
    if fn is None:
        return None
    try:
        fn = inspect.unwrap(fn)
        file = inspect.getsourcefile(fn)
        _, line = inspect.getsourcelines(fn)
    except (TypeError, OSError):
        return None
    if not file:
        return None
    return Source(display_path(file), line, getattr(fn, "__name__", "forward_step"))


def _dominant(by_cause: dict[str, int]) -> str:
    if not by_cause or sum(by_cause.values()) == 0:
        return NODES_ONLY
    return max(by_cause, key=lambda c: (by_cause[c], -CAUSE_ORDER.index(c) if c in CAUSE_ORDER else 0))


def _describe(hit: Hit, trial: Trial, obs: Observation, union: StorageMap) -> Finding:
    roots, extra, grad_fn = _graph_of(hit.obj)
    nodes, found = graph_tensors(roots, after_seq=trial.seq_start)
    items = [(g.cause, t) for g in found for t in g.tensors] + extra
    storages = storage_map(items, obs.excluded_storages - _own_storage(hit.obj))
    found.clear()
    items.clear()
    union.update(storages)
    by_cause = bytes_by_cause(storages)
    cause = _dominant(by_cause)
    holder = holder_kind(hit.root.kind, hit.link.in_hook())
    return Finding(
        path=hit.path,
        holder=holder,
        grad_fn=grad_fn,
        graph_nodes=nodes,
        retained_bytes=sum(by_cause.values()),
        confirmed=False,
        hint=hint_for(holder, cause, hit.path),
        cause=cause,
        bytes_by_cause=dict(sorted(by_cause.items())),
        source=_source_of(hit.obj, trial.spec, trial.modules),
    )


def _own_storage(obj: Any) -> set[tuple[str, int]]:
    """A held leaf's own storage is what it retains; a held graph tensor's is not."""
    import torch

    if isinstance(obj, torch.Tensor) and obj.grad_fn is None:
        key = storage_key(obj)
        return {key} if key is not None else set()
    return set()


def _replacement(obj: Any) -> Any:
    import torch

    return obj.detach() if isinstance(obj, torch.Tensor) else None


def _release_all(hits: list[Hit]) -> bool:
    """Release every hit as the fix would; False if one could not be released."""
    ok = True
    for hit in hits:
        try:
            release(hit.link, _replacement(hit.obj))
        except (ReleaseFailed, Exception):
            # An immutable holder (frozenset, tuple root): detach the tensor in
            # place instead, which cuts the same reference.
            try:
                hit.obj.detach_()
            except Exception:
                ok = False
    return ok


def _confirm(spec: EngineSpec, mode: Mode, options: CheckOptions, findings: list[Finding]) -> list[Finding]:
    import dataclasses

    out = []
    for i, finding in enumerate(findings):
        if i >= options.max_confirm:
            out.append(finding)
            continue
        out.append(dataclasses.replace(finding, confirmed=_holds_alone(spec, mode, options, finding)))
    return out


def _holds_alone(spec: EngineSpec, mode: Mode, options: CheckOptions, finding: Finding) -> bool:
    """Re-run, release every other candidate, and see whether the graph is still alive."""
    trial = run_trial(spec, mode, options)
    try:
        obs = observe(trial, options)
        mine = [h for h in obs.candidates if h.path == finding.path]
        if not mine:
            # State that outlives trials (a module-level registry) puts this
            # run's entry at another index: the same slot, by path shape.
            shape = path_shape(finding.path)
            mine = [h for h in obs.candidates if path_shape(h.path) == shape]
        if not mine:
            obs.clear()
            return False
        my_paths = {h.path for h in mine}
        others = [h for h in obs.candidates if h.path not in my_paths and all(h.obj is not m.obj for m in mine)]
        released = _release_all(others)
        mine.clear()
        others.clear()
        obs.clear()
        if not released:
            return False
        obs = observe(trial, options)
        still_held = any(h.path in my_paths for h in obs.candidates)
        alive = bool(obs.alive_unexplained() or obs.alive)
        obs.clear()
        if finding.cause == NODES_ONLY:
            return still_held
        return still_held and alive
    finally:
        trial.close()


def _residual_after_release(spec: EngineSpec, mode: Mode, options: CheckOptions) -> dict[str, int]:
    """Bytes still alive once every named holder is released: held by something unnamed."""
    trial = run_trial(spec, mode, options)
    try:
        obs = observe(trial, options)
        released = _release_all(obs.candidates)
        obs.clear()
        obs = observe(trial, options)
        if obs.candidates or not released:
            obs.clear()
            return {}
        residual = alive_bytes(obs.alive, obs.excluded_storages)
        obs.clear()
        return residual
    finally:
        trial.close()


def unknown_finding(by_cause: dict[str, int]) -> Finding:
    """Retention proven (bytes per cause alive) but no holder named. Shared with ``leakscope watch``."""
    cause = _dominant(by_cause)
    return Finding(
        path=UNKNOWN_HOLDER,
        holder="not found",
        grad_fn="-",
        graph_nodes=0,
        retained_bytes=sum(by_cause.values()),
        confirmed=True,
        hint=hint_for("not found", cause, UNKNOWN_HOLDER),
        cause=cause,
        bytes_by_cause=dict(sorted(by_cause.items())),
    )


def _until_gc_finding(by_cause: dict[str, int]) -> Finding:
    return Finding(
        path="<reference cycle>",
        holder="cycle",
        grad_fn="-",
        graph_nodes=0,
        retained_bytes=sum(by_cause.values()),
        confirmed=True,
        hint=hint_for("cycle", UNTIL_GC, ""),
        cause=UNTIL_GC,
        bytes_by_cause=dict(sorted(by_cause.items())),
        severity="warning",
    )
