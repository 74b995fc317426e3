"""The one judge: observations of what a caller keeps become verdicts, findings, kinds, bytes and fixes.

``check`` (:func:`judge`) and ``watch`` (:func:`look_findings`, :func:`watch_results`)
both come here. The judge asks the harness for evidence (a check's experiments,
:class:`leakscope.harness.experiment.Experiment`; a watch's looks through the
same :mod:`leakscope.harness.observe` walk) and decides, from descriptions
only:

- which references are findings: every reference that keeps a judged step's
  graph, but the loop's own variable holding only the latest result
  (NOTE [The loop's latest result]);
- each finding's kind: growing when it reaches an earlier step's graph, bounded
  when only the latest (NOTE [Leak kinds]);
- its bytes (NOTE [One accounting]) and its fix (NOTE [Fixes that never break
  training]);
- for ``check``: which findings hold the graph on their own (confirmation), what is
  held by nothing nameable (``<unknown holder>``), and the growth curve.

# NOTE [The loop's latest result]
# At the start of call k a training loop still holds call k-1's loss (and often
# its output) in its own variables, until the next call returns and rebinds
# them: one graph, replaced every call, which every loop does. A reference from
# a loop's variable (a caller frame's local, or a module-level loop's global),
# through anything but a container that accumulates, that reaches only the
# latest call's graph is therefore not a finding. An older call's graph, or any
# list, deque, set or step-keyed mapping, still is; so is an object's attribute
# reached from the loop's variable (``self._results.minimize``, Lightning 1.4.5's
# #9343): the loop does not rebind it, and it keeps the latest graph alive while
# the next call's forward builds its own (NOTE [Alive when the next forward starts]).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from leakscope.diagnose.findings import (
    cycle_finding,
    held_finding,
    retained_total,
    unknown_finding,
    with_nodes,
)
from leakscope.diagnose.fixes import grad_hint
from leakscope.diagnose.growth import curve, point_bytes, storage_findings
from leakscope.diagnose.kinds import (
    GROWING,
    curve_kind,
    group_kind,
    holder_key,
    holder_kinds,
    kind_of,
    result_kind,
    with_kinds,
)
from leakscope.diagnose.safety import Backward, Plan, plan_for
from leakscope.diagnose.storefix import (
    StoreSite,
    after_loss_fix,
    fix_for,
    node_fix,
    release_fix,
    rewrite,
    shown,
    with_comment,
)
from leakscope.holders import CYCLE, UNKNOWN, HolderPath
from leakscope.phase import report
from leakscope.results import (
    Cause,
    Edit,
    Finding,
    Growth,
    Holder,
    LeakKind,
    Mode,
    Severity,
    Source,
    TargetResult,
    Verdict,
)

if TYPE_CHECKING:
    from leakscope.harness.observe import Held, Observation
    from leakscope.harness.protocol import EngineSpec
    from leakscope.harness.stored import Stored as Site
    from leakscope.options import CheckOptions


@dataclasses.dataclass(frozen=True)
class Context:
    """What the judge needs to know beyond an observation: who runs backward, and the adapter."""

    backward: Backward
    adapter: str | None = None


# -- the shared rules --------------------------------------------------------------------------


def is_finding(held: Held, latest: int) -> bool:
    """NOTE [The loop's latest result]: the loop's own variable holding only the latest result is not."""
    return not (held.loop_local and held.steps <= {latest})


def finding(
    held: Held,
    obs: Observation,
    ctx: Context,
    *,
    confirmed: bool = False,
    kind: LeakKind | None = None,
    site: Site | None = None,
    promptly: bool = True,
) -> Finding:
    """The finding for one reference (NOTE [One accounting]), its fix planned (NOTE [Fixes that never
    break training]) from its stored-at line when known (see :func:`with_fix`)."""
    f = held_finding(
        held,
        obs.node_bytes,
        confirmed=confirmed,
        adapter=ctx.adapter,
        kind=kind,
        node_cost=obs.node_cost_note,
    )
    return with_fix(f, held, site, ctx, promptly=promptly)


def with_fix(
    f: Finding, held: Held | None, site: Site | None, ctx: Context, *, promptly: bool = True
) -> Finding:
    """``f`` with its stored-at line (when known) and the fix derived from it and from its plan;
    ``promptly``: backward ran through the holder's newest entry within the step that stored it."""
    store = (
        StoreSite(site.op, site.code, site.where, site.graph_names) if site is not None else None
    )
    changes: dict[str, Any] = {}
    if site is not None:
        changes.update(stored_at=site.where, store_op=site.op)
    if (
        f.severity is Severity.LEAK
        and f.path not in (UNKNOWN, CYCLE)
        and f.holder is not Holder.CYCLE
    ):
        done = site.backward_done if site is not None else None
        plan = (
            plan_for(held, ctx.backward, backward_done=done, promptly=promptly)
            if held is not None
            else Plan.DETACH
        )
        graph_note = (
            "; if it is only logged, compute it under torch.no_grad()"
            if f.cause is Cause.ACTIVATIONS
            else ""
        )
        hint: str | None
        if held is not None and held.node:
            hint = node_fix(f.path, f.grad_fn, store)
        elif f.path.grad_slot():  # NOTE [A gradient that keeps a graph]
            filled = f" (at {store.where}: {shown(store.code)})" if store is not None else ""
            hint = grad_hint(f.path, filled)
        elif plan is Plan.RELEASE_AFTER_BACKWARD:
            hint = release_fix(f.path, store)
        elif plan is Plan.DETACH_AFTER_LOSS and not (site is not None and site.detach_safe):
            hint = after_loss_fix(f.path, store, graph_note)
        else:
            hint = fix_for(store, f.path, f.holder, f.cause, ctx.adapter)
            after = rewrite(store, f.path) if store is not None and site is not None else None
            if (
                after is not None
                and site is not None
                and store is not None
                and not (held is not None and held.node)
            ):
                changes["edit"] = Edit(
                    site.where.file,
                    site.where.line,
                    site.column,
                    store.code,
                    with_comment(store.code, after),
                )
        if hint:
            changes["hint"] = hint
    return dataclasses.replace(f, **changes) if changes else f


def _kind_hint(f: Finding, steps: frozenset[int], watched: int, latest: int) -> Finding:
    """watch: the leak kind in words (growing: a graph per call; bounded: only the latest)."""
    if f.kind == GROWING:
        says = f"keeps a graph of every call ({len(steps)} of {watched} watched calls)"
    else:
        says = f"keeps the graph of call {max(steps) if steps else latest} only, replaced as the job goes on"
    return dataclasses.replace(f, hint=f"{f.kind}: {says}; {f.hint}")


# -- check ---------------------------------------------------------------------------------------


def judge(spec: EngineSpec, mode: Mode, options: CheckOptions) -> TargetResult:
    """The verdict and findings of ``spec`` in ``mode``: run the step, name and size every holder of its
    graph, prove each one, measure growth over micro-batches, find where each was stored."""
    from leakscope.harness.experiment import Experiment

    experiment = Experiment(spec, mode, options)
    report("finding holders")
    first = experiment.step(source=options.source)
    obs = first.observation
    ctx = Context(Backward.FRAMEWORK if spec.runs_backward else Backward.CALLER, spec.adapter)
    warnings: list[str] = []
    held = list(obs.held)
    by_path = {h.path: h for h in held}
    findings = [finding(h, obs, ctx) for h in held]
    residual: Mapping[str, int] = obs.unexplained if not held else {}
    _note_walk(obs, warnings)
    if findings and options.confirm:
        confirmed = []
        for i, f in enumerate(findings):
            if i < options.max_confirm:
                report(f"confirming {i + 1} of {min(len(findings), options.max_confirm)}")
                proven = experiment.holds_alone(f.path, nodes_only=f.cause is Cause.NODES_ONLY)
                f = dataclasses.replace(f, confirmed=proven)
            confirmed.append(f)
        findings = confirmed
        more, residual, generic = experiment.after_release(set(by_path))
        for h in more:
            by_path.setdefault(h.path, h)
            findings.append(finding(h, obs, ctx))
        if generic and more:
            warnings.extend(_walk_warning(obs))
    if sum(residual.values()) > 0:
        findings.append(unknown_finding(residual))
    if not findings and sum(first.until_gc.values()) > 0:
        findings.append(cycle_finding(first.until_gc, gc_off=first.gc_off))
    growth: Growth | None = None
    kinds: dict[HolderPath, LeakKind] = {}
    node_bytes = obs.node_bytes
    if options.micro_batches > 1:
        report("growth")
        run = experiment.micro_batches()
        growth = curve(run.observations, run.storage_bytes)
        last = run.observations[-1]
        node_bytes = node_bytes or last.node_bytes
        latest = len(run.observations) - 1
        after = [h for h in last.held]
        kinds = holder_kinds(after, latest)
        # Graphs still held after the last micro-batch are a leak the single step can miss
        # (an engine that keeps every second step; NOTE [Held after the last micro-batch]);
        # when the single step already named the holders, they are not repeated under their
        # micro-batch-indexed paths.
        single_step_leak = any(f.severity is Severity.LEAK for f in findings)
        if not single_step_leak:
            for h in after:
                by_path.setdefault(h.path, h)
                findings.append(
                    finding(h, last, ctx, confirmed=True, kind=kinds.get(holder_key(h.path)))
                )
        findings.extend(storage_findings(run.storage_bytes, run.storage_paths))
        if run.through_loop:
            kinds = {}
    if growth is not None:  # NOTE [Leak kinds]
        findings = with_kinds(findings, kinds, curve_kind(growth.retained_bytes))
    verdict = Verdict.LEAK if any(f.severity is Severity.LEAK for f in findings) else Verdict.CLEAN
    if verdict is Verdict.LEAK and options.source:  # NOTE [Stored at]: only when a leak was found
        wanted = [
            f.path
            for f in findings
            if f.severity is Severity.LEAK and f.path not in (UNKNOWN, CYCLE)
        ]
        if wanted:
            sites = experiment.store_sites(wanted)
            for path, site in list(sites.items()):
                reference = by_path.get(path)
                if reference is not None and reference.feeds_loss and not site.detach_safe:
                    # Stored before the loss was computed: tell by a run whether a detached copy
                    # stored there changes a gradient (the loss reads it back) or not.
                    if experiment.detach_keeps_gradients(path):
                        sites[path] = dataclasses.replace(site, detach_safe=True)
            findings = [
                with_fix(f, by_path.get(f.path), sites.get(f.path), ctx) if f.path in sites else f
                for f in findings
            ]
    projection = None
    if options.at is not None and verdict is Verdict.LEAK:
        from leakscope.diagnose.projection import project

        projection = project(experiment, options.at)
    total = retained_total(findings, by_path, node_bytes) if verdict is Verdict.LEAK else 0
    inspection = experiment.inspection_warning()
    if inspection is not None:
        warnings.append(inspection)
    return TargetResult(
        target=spec.name,
        mode=mode,
        verdict=verdict,
        findings=_anchored(findings, spec),
        retained_bytes=total,
        warnings=tuple(dict.fromkeys(warnings)),
        growth=growth,
        projection=projection,
        kind=result_kind(findings) if verdict is Verdict.LEAK else None,
    )


def _note_walk(obs: Observation, warnings: list[str]) -> None:
    warnings.extend(_walk_warning(obs))


def _walk_warning(obs: Observation) -> list[str]:
    if obs.truncated:
        return [_stopped(obs, "at --max-objects")]
    return []


def _stopped(obs: Observation, at_limit: str) -> str:
    """The warning of a walk that stopped early: at its object limit, or after its time budget."""
    when = f"after {obs.walk_stopped_after:g} s" if obs.walk_stopped_after is not None else at_limit
    return f"the holder walk stopped {when}; some holders may be unnamed"


def _anchored(findings: list[Finding], spec: EngineSpec) -> tuple[Finding, ...]:
    """Findings with no known creating line point at the engine's ``forward_step``.

    A held leaf, an unnamed holder, a reference cycle or storage growth has no
    line that created it, but SARIF and pull-request annotations need a place
    to stand.
    """
    if all(f.source is not None for f in findings):
        return tuple(findings)
    from leakscope.harness.source import anchor_source

    anchor = anchor_source(spec)
    return tuple(
        f if f.source is not None else dataclasses.replace(f, source=anchor) for f in findings
    )


# -- watch ----------------------------------------------------------------------------------------

#: how ``watch`` is judged: the job runs its own backward
WATCH = Context(Backward.JOB)


@dataclasses.dataclass(frozen=True)
class Call:
    """One watched call, as the judge needs it: which method, in which grad mode."""

    index: int
    target: str
    mode: Mode
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class Look:
    """One look of a watch: what it observed and what the judge found then."""

    observation: Observation
    findings: Mapping[tuple[str, Mode], tuple[Finding, ...]]
    #: each finding's reference at its earliest call (what one call's graph keeps, together)
    firsts: tuple[Held, ...] = ()
    #: the look when the job ended (not at the start of a call)
    final: bool = False
    #: bytes by cause alive of each call no holder was found for (the growth curve counts them)
    unnamed: tuple[Mapping[str, int], ...] = ()


def look_findings(
    obs: Observation,
    calls: Sequence[Call],
    ctx: Context,
    *,
    sites: Mapping[HolderPath, Site] = {},
    sources: Mapping[HolderPath, Source] = {},
    unknown: Mapping[int, Mapping[str, int]] = {},
    unknown_nodes: Mapping[int, int] = {},
    node_bytes: int = 0,
    owners: Mapping[int, str] = {},
    final: bool = False,
) -> Look:
    """What one look found, per watched method and grad mode (NOTE [When watch looks]).

    References are grouped by holder shape (``output_lst[*].model_output.log_probs``): one
    finding per shape, named at its earliest call's entry. ``sites`` and ``sources``: stored-at
    and created-at lines already known by holder shape; ``unknown``: bytes by cause alive of
    calls no reference reaches (an unnamed holder; the last look only), and ``unknown_nodes`` their live
    nodes, at ``node_bytes`` each; ``owners``: the object that
    keeps such a call's graph, in words, when one was found (NOTE [Held from C++]).
    """
    latest = obs.latest
    unknown = _unnamed_bytes(unknown, unknown_nodes, node_bytes)
    groups: dict[HolderPath, list[Held]] = {}
    for held in obs.held:
        if held.steps and is_finding(held, latest):
            groups.setdefault(held.path.shape(), []).append(held)
    findings: dict[tuple[str, Mode], list[Finding]] = {}
    firsts: list[Held] = []
    for shape, members in groups.items():
        first = min(members, key=lambda h: (min(h.steps), str(h.path)))
        steps = frozenset().union(*(h.steps for h in members))
        call = calls[min(first.steps)] if min(first.steps) < len(calls) else calls[-1]
        kind = group_kind(members, latest)
        source = first.source or sources.get(shape)
        if source is not None and first.source is None:
            first = dataclasses.replace(first, source=source)
        newest = max(members, key=lambda h: (max(h.steps), str(h.path)))
        f = finding(
            first,
            obs,
            ctx,
            confirmed=True,
            kind=kind,
            site=sites.get(shape),
            promptly=newest.backward_ran,
        )
        f = _kind_hint(f, steps, len(calls), latest)
        findings.setdefault((call.target, call.mode), []).append(f)
        firsts.append(first)
    # What no holder was found for: one row per method and grad mode, sized as one call's graph
    # (its earliest call's) and of the kind its calls show, as a named holder's row is.
    unnamed: dict[tuple[str, Mode], list[int]] = {}
    for index, by_cause in sorted(unknown.items()):
        if sum(by_cause.values()) > 0 and index < len(calls):
            unnamed.setdefault((calls[index].target, calls[index].mode), []).append(index)
    for key, indexes in unnamed.items():
        first_call = indexes[0]
        owner = next((owners[i] for i in indexes if i in owners), None)
        f = unknown_finding(unknown[first_call], owner)
        f = dataclasses.replace(f, kind=kind_of(frozenset(indexes), latest))
        findings.setdefault(key, []).append(f)
    alive = tuple(dict(by_cause) for by_cause in unknown.values() if sum(by_cause.values()) > 0)
    return Look(obs, {k: tuple(v) for k, v in findings.items()}, tuple(firsts), final, alive)


def _unnamed_bytes(
    alive: Mapping[int, Mapping[str, int]], nodes: Mapping[int, int], node_bytes: int
) -> dict[int, dict[str, int]]:
    """Per call, bytes by cause no holder was found for: its tensors alive, and its live nodes."""
    out = {index: dict(by_cause) for index, by_cause in alive.items()}
    for index, count in nodes.items():
        out[index] = with_nodes(out.get(index, {}), count, node_bytes)
    return out


def watch_results(looks: Sequence[Look], calls: Sequence[Call]) -> list[TargetResult]:
    """One result per watched method and grad mode seen (NOTE [The look that judges])."""
    keys = list(dict.fromkeys((c.target, c.mode) for c in calls))
    out = []
    for target, mode in keys:
        judging = _judging_looks(looks, target, mode)
        last = judging[-1] if judging else None
        findings = tuple(last.findings.get((target, mode), ())) if last else ()
        growth = _look_growth(judging) if judging else None
        leak = any(f.severity is Severity.LEAK for f in findings)
        warnings: list[str] = []
        if leak and last is not None and last is not looks[-1]:
            end = looks[-1]
            when = (
                "when the job ended"
                if end.final
                else f"at the start of call #{end.observation.latest + 1}"
            )
            warnings.append(
                f"freed by the last look ({when}): the loop held these graphs across calls (seen at the "
                f"start of call #{last.observation.latest + 1}) and released them later; memory grows per call until it does"
            )
        stopped = next((look.observation for look in looks if look.observation.truncated), None)
        if stopped is not None:
            warnings.append(_stopped(stopped, "at its object limit"))
        out.append(
            TargetResult(
                target=target,
                mode=mode,
                verdict=Verdict.LEAK if leak else Verdict.CLEAN,
                findings=findings,
                kind=result_kind(findings) if leak else None,
                retained_bytes=(
                    retained_total(
                        findings, {h.path: h for h in last.firsts}, last.observation.node_bytes
                    )
                    if leak and last
                    else 0
                ),
                growth=growth,
                warnings=tuple(warnings),
                seconds=round(
                    sum(c.seconds for c in calls if (c.target, c.mode) == (target, mode)), 3
                ),
            )
        )
    return out


def _judging_looks(looks: Sequence[Look], target: str, mode: Mode) -> list[Look]:
    """The looks up to the one that judges ``target`` in ``mode``: the latest that found it leaking,
    else every look (NOTE [The look that judges])."""
    for i in range(len(looks) - 1, -1, -1):
        if any(f.severity is Severity.LEAK for f in looks[i].findings.get((target, mode), ())):
            return list(looks[: i + 1])
    return list(looks)


def _look_growth(looks: Sequence[Look]) -> Growth:
    """The growth curve over looks (NOTE [One accounting]): at each, the bytes of every held graph
    and of what no holder was found for, as :func:`leakscope.diagnose.growth.curve` makes every
    curve. A holder that is a finding at any look is counted at every look: a running sum holds
    only the latest graph at the first look (the loop's own variable then, NOTE [The loop's latest
    result]), and its bytes there are the first point of its growth, not 0 B."""
    found = {
        h.path
        for look in looks
        for h in look.observation.held
        if h.steps and is_finding(h, look.observation.latest)
    }
    points = []
    for look in looks:
        obs = look.observation
        held = [h for h in obs.held if h.steps and (h.path in found or is_finding(h, obs.latest))]
        points.append(point_bytes(obs, held, look.unnamed))
    return curve([look.observation for look in looks], points=points)


__all__ = [
    "WATCH",
    "Call",
    "Context",
    "Look",
    "finding",
    "is_finding",
    "judge",
    "look_findings",
    "watch_results",
    "with_fix",
]
