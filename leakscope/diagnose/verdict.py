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
   something the typed walk cannot see. The walk's generic fallback then looks
   again through every object reachable from the caller's roots (library types
   included); a holder it names is reported under its path, and what is still
   alive after that is ``<unknown holder>``.
"""

from __future__ import annotations

from typing import Any

from leakscope.diagnose.findings import cycle_finding, holder_finding, unknown_finding
from leakscope.diagnose.kinds import curve_kind, result_kind, with_kinds
from leakscope.harness.protocol import EngineSpec
from leakscope.harness.source import (
    display_path,
    engine_files,
    user_frame_in_stack_text,
    user_frames_in_stack_text,
)
from leakscope.harness.trial import Observation, Trial, observe, run_trial
from leakscope.holders import HolderPath
from leakscope.options import CheckOptions
from leakscope.phase import report
from leakscope.probe.autograd import (
    INSPECTION,
    NODES_ONLY,
    UNTIL_GC,
    StorageMap,
    bytes_by_cause,
    storage_key,
    storage_nbytes,
)
from leakscope.probe.liveness import alive_bytes, settle
from leakscope.probe.release import ReleaseFailed, release
from leakscope.probe.walk import Hit
from leakscope.results import Finding, Mode, Source, TargetResult, Verdict


def judge(spec: EngineSpec, mode: Mode, options: CheckOptions) -> TargetResult:
    """The verdict and findings for ``spec`` in ``mode``."""
    INSPECTION.reset()
    report("finding holders")
    trial = run_trial(spec, mode, options, anomaly=options.source)
    warnings: list[str] = []
    try:
        died_in_gc = _until_gc_bytes(trial)
        report(step="walking")
        obs = observe(trial, options)
        if not obs.candidates and obs.alive:
            # Nothing the typed walk knows holds the live graph: look through everything.
            obs.clear()
            obs = observe(trial, options, generic=True)
        union: StorageMap = {}
        findings = [_describe(hit, trial, obs, union) for hit in obs.candidates]
        residual = alive_bytes(obs.alive_unexplained(), obs.excluded_storages) if not obs.candidates else {}
        _note_walk(obs, warnings)
        obs.clear()
    finally:
        trial.close()
    if findings and options.confirm:
        findings = _confirm(spec, mode, options, findings)
        more, residual = _residual_after_release(spec, mode, options, {f.path for f in findings}, union, warnings)
        findings.extend(more)
    if sum(residual.values()) > 0:
        findings.append(unknown_finding(residual))
    if not findings and sum(died_in_gc.values()) > 0:
        findings.append(cycle_finding(died_in_gc))
    growth = None
    held_kinds: dict[HolderPath, str] = {}
    held_bytes = 0  # retained after the last micro-batch, when only the growth run saw a leak
    if options.micro_batches > 1:
        from leakscope.diagnose.growth import measure_growth

        report("growth")
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
        held_kinds = run.kinds
    if growth is not None:  # NOTE [Leak kinds]
        findings = with_kinds(findings, held_kinds, curve_kind(growth.retained_bytes))
    verdict = Verdict.LEAK if any(f.severity == "leak" for f in findings) else Verdict.CLEAN
    if verdict is Verdict.LEAK and options.source:  # NOTE [Stored at]: only when a leak was found
        from leakscope.diagnose.stored import add_store_sites

        findings = add_store_sites(spec, mode, options, findings)
    projection = None
    if options.at is not None and verdict is Verdict.LEAK:
        from leakscope.diagnose.projection import project

        projection = project(spec, mode, options, options.at)
    total = sum(bytes_by_cause(union).values()) + sum(residual.values()) + held_bytes if verdict is Verdict.LEAK else 0
    inspection = INSPECTION.warning()
    if inspection is not None:
        warnings.append(inspection)
    return TargetResult(
        target=spec.name, mode=mode, verdict=verdict, findings=_anchored(findings, spec),
        retained_bytes=total, warnings=tuple(warnings), growth=growth, projection=projection,
        kind=result_kind(findings) if verdict is Verdict.LEAK else None,
    )


def _until_gc_bytes(trial: Trial) -> dict[str, int]:
    """Bytes alive before ``settle()`` that the cyclic GC then freed (see ``until-gc``)."""
    before = {}
    excluded = trial.excluded_storages
    for item, obj in trial.evidence.alive():
        key = storage_key(obj)
        if key is not None and key not in excluded:
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


def _note_walk(obs: Observation, warnings: list[str]) -> None:
    """Say when the walk stopped early or could not list some objects' children."""
    if obs.truncated:
        warnings.append("the holder walk stopped at --max-objects; some holders may be unnamed")
    INSPECTION.add(obs.stats)


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


def _stack_text(obj: Any) -> str | None:
    node = getattr(obj, "grad_fn", None) if not _is_node(obj) else obj
    if node is None:
        return None
    try:
        text = node.metadata.get("traceback_")
    except Exception:
        return None
    if isinstance(text, (list, tuple)):
        text = "".join(str(line) for line in text)
    return str(text) if text else None


#: at most this many engine-side call sites under "created at"
MAX_CALLED_FROM = 3
#: the engine's step entry: where a call chain reaches the engine
STEP_NAMES = ("forward_step", "training_step", "step")


def _called_from(obj: Any, source: Source | None, modules: Any) -> tuple[Source, ...]:
    """When ``source`` is a shared helper or is reached through ``super()``: the user frames
    that called it, innermost first, up to the target's own file or its step method.

    ``modules``: the target's own module(s) (not its bases'): a line there in a function
    that no outer frame repeats is the engine's own line and needs no call site.
    """
    import os

    if source is None:
        return ()
    text = _stack_text(obj)
    if not text:
        return ()
    frames = user_frames_in_stack_text(text)
    if source not in frames:
        return ()
    outer = frames[frames.index(source) + 1:]
    files = engine_files(modules)
    if os.path.abspath(source.file) in files and not any(f.function == source.function for f in outer):
        return ()
    out = []
    for frame in outer[:MAX_CALLED_FROM]:
        out.append(frame)
        if os.path.abspath(frame.file) in files or frame.function in STEP_NAMES:
            break
    return tuple(out)


def _is_node(obj: Any) -> bool:
    from leakscope.probe.walk import kinds

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


def _describe(hit: Hit, trial: Trial, obs: Observation, union: StorageMap) -> Finding:
    source = created_at(hit.obj, trial.modules)
    return holder_finding(
        hit.path, hit.obj, excluded=obs.excluded_storages, after_seq=trial.seq_start, union=union,
        source=source, called_from=_called_from(hit.obj, source, trial.spec.modules), adapter=trial.spec.adapter,
    )


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
        report(f"confirming {i + 1} of {min(len(findings), options.max_confirm)}")
        out.append(dataclasses.replace(finding, confirmed=_holds_alone(spec, mode, options, finding)))
    return out


def _holds_alone(spec: EngineSpec, mode: Mode, options: CheckOptions, finding: Finding) -> bool:
    """Re-run, release every other candidate, and see whether the graph is still alive."""
    trial = run_trial(spec, mode, options)
    try:
        obs = observe(trial, options)
        mine = _matching(obs.candidates, finding.path)
        generic = False
        if not mine:  # a holder only the generic walk names (NOTE [Generic fallback])
            obs.clear()
            obs = observe(trial, options, generic=True)
            generic = True
            mine = _matching(obs.candidates, finding.path)
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
        obs = observe(trial, options, generic=generic)
        still_held = any(h.path in my_paths for h in obs.candidates)
        alive = bool(obs.alive_unexplained() or obs.alive)
        obs.clear()
        if finding.cause == NODES_ONLY:
            return still_held
        return still_held and alive
    finally:
        trial.close()


def _residual_after_release(
    spec: EngineSpec, mode: Mode, options: CheckOptions, known: set[HolderPath], union: StorageMap,
    warnings: list[str],
) -> tuple[list[Finding], dict[str, int]]:
    """Holders only the generic walk names (other than the ``known`` ones), and the bytes still
    alive once every named holder is released (held by something unnamed)."""
    report("releasing every holder")
    trial = run_trial(spec, mode, options)
    more: list[Finding] = []
    try:
        obs = observe(trial, options)
        released = _release_all(obs.candidates)
        obs.clear()
        obs = observe(trial, options)
        if obs.candidates or not released:
            obs.clear()
            return more, {}
        if obs.alive:
            # NOTE [Generic fallback]: something the typed walk does not enter
            # (a library object the user owns: a logging handler's records, a
            # threading.local, a torch.distributions object) holds the rest.
            obs.clear()
            obs = observe(trial, options, generic=True)
            _note_walk(obs, warnings)
            if obs.candidates:
                more = [_describe(hit, trial, obs, union) for hit in obs.candidates if hit.path not in known]
                released = _release_all(obs.candidates)
                obs.clear()
                obs = observe(trial, options, generic=True)
                if not released:
                    obs.clear()
                    return more, {}
        residual = alive_bytes(obs.alive, obs.excluded_storages)
        obs.clear()
        return more, residual
    finally:
        trial.close()


def _matching(candidates: list[Hit], path: HolderPath) -> list[Hit]:
    """The candidates at ``path``; else at the same slot by shape (state that outlives trials,
    a module-level registry, puts this run's entry at another index)."""
    mine = [h for h in candidates if h.path == path]
    if not mine:
        shape = path.shape()
        mine = [h for h in candidates if h.path.shape() == shape]
    return mine
