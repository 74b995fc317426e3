"""Observe the watched calls of a real job and judge, before each call, which earlier graph is alive.

# NOTE [When watch looks]
# A call's graph cannot be judged when the call returns: the caller has not run
# backward yet, and the output is meant to be alive. The framework's bookkeeping
# for call k is done when call k+1 starts, so that is when ``watch`` looks: it
# settles the GC and walks what a holder can be (the engine, the call's
# arguments, the frames of the loop that called the step, module globals, and
# through the engine the model and its hooks) for graph nodes whose sequence
# number falls in an earlier watched call's range. The look after the last
# watched call happens at the start of the call after it, or when the job ends.
#
# NOTE [The loop's latest result]
# At the start of call k the loop still holds call k-1's loss (and often its
# output) in a plain local, until the next call returns and rebinds it. That is
# one graph, replaced every call, and every training loop does it: a direct
# local of a caller frame holding only the latest call's graph is not a finding.
# Anything else is: an engine attribute, a global, a container in the loop
# (``output_lst[0]``), or a local still holding an older call's graph.
#
# NOTE [The look that judges]
# A result is judged by the latest look that found its graph held, not by the
# last look: a loop that keeps every call's output until the update returns
# (verl's ``output_lst``) has freed it by the look at the job's end, or at a
# call of the next update, yet memory grew per call until then, and that is the
# OOM. The growth curve runs up to that look; a warning says the last look
# found it freed. A job clean at every look is clean.
#
# NOTE [Stored at, in a running job]
# ``check`` re-runs the step traced to find the line that stored a retaining
# tensor (NOTE [Stored at]); a real job cannot be re-run, but it repeats
# itself. When a look finds a leak and another watched call follows, the
# holder paths are resolved live (the caller frames' locals, the engine, the
# arguments, the globals) and the job is traced, in user files only, from the
# look to the next one: the running frames of the loop from their next line,
# and every frame that starts. The line after which the object at a path, or
# the length of a list the path indexes (``output_lst`` when the loop appends
# to it), changes is the stored-at line; the fix is derived from it as
# ``check`` derives it. Only a job with a leak pays for the tracing, for one
# call; ``--no-source`` turns it off with the created-at traces.
#
# NOTE [Created at, in a running job]
# The line that created a retaining tensor comes from anomaly mode's stack
# trace on its graph node, which costs about a third of a millisecond per node
# created (a fifth of a ~50M-parameter model's forward). The first watched
# call records them; a look that finds a leak reads the line from the held
# call's nodes and keeps it by holder path shape, so a later look that sees
# the same holder keep a later call's graph (a bounded leak) reuses it. A leak
# whose held call was not recorded (it first appeared later) turns recording
# on for the next watched call only. A clean job pays for one call.
#
# NOTE [Frozen heap, in a running job]
# A look settles the GC first, and after ``import torch`` one full collection
# walks millions of objects (about 0.4 s on a small CPU), several times per
# look. As ``check`` does (NOTE [Frozen heap]), the heap is frozen before the
# first watched call: nothing that existed then belongs to a watched call's
# graph, and the collections scan only what the job made since. Frozen
# objects that become garbage meanwhile are collected after the last look,
# when the heap is unfrozen (a job that froze its heap itself is left as it is,
# and its looks cost the full collections).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from leakscope.holders import CYCLE, UNKNOWN, HolderPath
from leakscope.live.methods import MethodSpec, engine_of
from leakscope.phase import report as report_phase
from leakscope.results import Finding, Growth, Mode, TargetResult, Verdict


class WatchStop(BaseException):
    """Raised from the call after the last watched one with ``--then stop``: ends the job.

    A ``BaseException``, so a training loop's ``except Exception`` does not swallow it.
    """


@dataclasses.dataclass
class Call:
    """One watched call: its graph's sequence range, its grad mode, weakrefs to what it returned."""

    index: int
    target: str
    mode: Mode
    start: int
    end: int
    evidence: Any
    seconds: float


@dataclasses.dataclass
class Look:
    """What one look measured (plain numbers and findings)."""

    held_bytes: int
    graph_nodes: int
    cuda_allocated: int | None
    findings: dict[tuple[str, Mode], list[Finding]]
    #: live graph nodes of each watched call made when it looked (one entry per call)
    nodes_by_call: tuple[int, ...] = ()
    #: bytes one call's graph keeps (the earliest held call, storage-deduplicated)
    per_call_bytes: int = 0
    #: the look when the job ended (not at the start of a call)
    final: bool = False


@dataclasses.dataclass(frozen=True)
class ObserverOptions:
    micro_batches: int = 3
    skip: int = 0
    stop: bool = True
    source: bool = True
    max_objects: int = 2_000_000


def _caller_root_name(frame: types.FrameType) -> str:
    code = frame.f_code
    return f"caller:{os.path.basename(code.co_filename)}:{getattr(code, 'co_qualname', code.co_name)}"


def _is_leakscope_or_library(frame: types.FrameType) -> bool:
    from leakscope.probe.library import is_library_module

    name = str(frame.f_globals.get("__name__", ""))
    return is_library_module(name) or name in ("runpy", "__mp_main__") and frame.f_code.co_name.startswith("_run")


class Observer:
    """Counts calls, records the watched ones, looks before each (NOTE [When watch looks])."""

    def __init__(self, options: ObserverOptions) -> None:
        self.options = options
        #: tracing the job between two looks (NOTE [Stored at, in a running job])
        self.tracer: Any = None
        #: stored-at line, store op and code, by holder path shape
        self.sites: dict[HolderPath, tuple[Any, str, str]] = {}
        #: created-at lines by holder path shape, and whether the next watched call records them
        #: (NOTE [Created at, in a running job])
        self.sources: dict[HolderPath, Any] = {}
        self.anomaly_next = True
        #: whether this observer froze the heap (NOTE [Frozen heap, in a running job])
        self.frozen = False
        self.seen = 0
        self.depth = 0
        self.calls: list[Call] = []
        self.looks: list[Look] = []
        self.done = False
        #: weakrefs to the engines (``self`` of the calls), for the look at the job's end
        self.engines: list[weakref.ref[Any]] = []
        #: modules whose globals are walked
        self.modules: dict[str, None] = {}
        self.on_done: Callable[[], None] | None = None
        #: called once, at the start of the first watched call (a child process announces itself)
        self.on_first_call: Callable[[], None] | None = None
        self.truncated = False

    # -- the call -----------------------------------------------------------------
    def call(self, spec: MethodSpec, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.done or self.depth:
            return original(*args, **kwargs)
        n = self.seen
        self.seen += 1
        if n < self.options.skip:
            return original(*args, **kwargs)
        frame = sys._getframe(2)  # the caller of the patched method (wrapper -> call)
        # The engine first, then the step's arguments (NOTE [The engine of a framework's step]).
        holders = (engine_of(spec, args[0]), *args[1:]) if args else args
        try:
            if len(self.calls) >= self.options.micro_batches:
                self.look(frame, holders, final=True)
                self.finish()
                if self.options.stop:
                    raise WatchStop()
                return original(*args, **kwargs)
            if self.calls:
                self.look(frame, holders)
        finally:
            del frame
        self._remember(holders, original)
        if not self.calls:
            self._freeze()
            if self.on_first_call is not None:
                self.on_first_call()
        return self._watched_call(spec, original, args, kwargs)

    def _freeze(self) -> None:
        """NOTE [Frozen heap, in a running job]"""
        import gc

        if gc.get_freeze_count() == 0:  # the job's own freeze, if any, is left as it is
            gc.collect()
            gc.freeze()
            self.frozen = True

    def _unfreeze(self) -> None:
        import gc

        if self.frozen:
            self.frozen = False
            gc.unfreeze()

    def _watched_call(self, spec: MethodSpec, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        import contextlib

        import torch

        from leakscope.harness.trial import next_sequence_nr

        report_phase(f"in watched call #{len(self.calls)}")
        mode = Mode.TRAIN if torch.is_grad_enabled() else Mode.FORWARD_ONLY
        record = self.options.source and self.anomaly_next
        self.anomaly_next = False
        anomaly = torch.autograd.set_detect_anomaly(True, check_nan=False) if record else contextlib.nullcontext()
        started = time.perf_counter()
        start = next_sequence_nr()
        self.depth += 1
        try:
            with anomaly:
                result = original(*args, **kwargs)
        finally:
            self.depth -= 1
        end = next_sequence_nr()
        seconds = time.perf_counter() - started
        evidence = _returned_evidence(result, start, end, self.options.max_objects)
        self.calls.append(Call(len(self.calls), str(spec), mode, start, end, evidence, seconds))
        return result

    def _remember(self, args: tuple[Any, ...], original: Callable[..., Any]) -> None:
        if args:
            engine = args[0]
            if not any(ref() is engine for ref in self.engines):
                try:
                    self.engines.append(weakref.ref(engine))
                except TypeError:
                    pass
            for klass in type(engine).__mro__:
                self._add_module(klass.__module__)
        self._add_module(getattr(original, "__module__", "") or "")

    def _add_module(self, name: str) -> None:
        from leakscope.probe.library import is_library_module

        if name and name != "builtins" and not is_library_module(name):
            self.modules[name] = None

    # -- the look -----------------------------------------------------------------
    def look(
        self, frame: types.FrameType | None, args: tuple[Any, ...] = (), *, final: bool = False,
        extra_modules: Sequence[types.ModuleType] = (), extra_frames: Sequence[types.FrameType] = (),
    ) -> None:
        """Settle, walk the holders, and record which earlier call's graph each one keeps."""
        import torch

        from leakscope.diagnose.findings import held_bytes, holder_finding, unknown_finding
        from leakscope.diagnose.stored import with_site
        from leakscope.diagnose.verdict import created_at
        from leakscope.probe.autograd import StorageMap, iter_nodes, storage_key
        from leakscope.probe.liveness import alive_bytes, settle
        from leakscope.probe.walk import WalkStats, walk

        report_phase("looking for held graphs " + ("for the last time" if final else f"before watched call #{len(self.calls)}"))
        self._stop_tracing()
        settle()
        roots = self._roots(frame, args, extra_modules, extra_frames)
        latest = len(self.calls) - 1 if frame is not None or extra_frames else -1
        held: dict[HolderPath, list[tuple[Any, Any, Call]]] = {}  # by path shape
        touched: set[int] = set()
        plain_ids: set[int] = set()
        excluded: set[tuple[str, int]] = set()
        stats = WalkStats()
        for hit in walk(roots, max_objects=self.options.max_objects, stats=stats):
            obj = hit.obj
            node = obj.grad_fn if isinstance(obj, torch.Tensor) else obj
            call = self._call_of(node) if node is not None else None
            if call is None:
                if isinstance(obj, torch.Tensor):
                    plain_ids.add(id(obj))
                    key = storage_key(obj)
                    if key is not None:
                        excluded.add(key)
                continue
            touched.add(call.index)
            if hit.root.kind == "caller" and hit.link.parent is not None and hit.link.parent.parent is None and call.index == latest:
                continue  # NOTE [The loop's latest result]
            held.setdefault(hit.path.shape(), []).append((hit, node, call))
        hit = obj = node = None  # type: ignore[assignment]  # no reference to the job's objects stays here
        roots.clear()
        union: StorageMap = {}  # every held call's graph: the growth curve
        per_call: StorageMap = {}  # the earliest held call's: bytes per call
        findings: dict[tuple[str, Mode], list[Finding]] = {}
        node_roots = []
        for hits in held.values():
            first_hit, first_node, first_call = min(hits, key=lambda h: h[2].index)
            # Holding a tensor (or node) holds its graph: confirmed by construction.
            finding = holder_finding(
                first_hit.path, first_hit.obj, excluded=excluded, after_seq=first_call.start, union=per_call,
                confirmed=True,
            )
            for hit, node, call in hits:
                node_roots.append(node)
                held_bytes(hit.obj, excluded=excluded, after_seq=call.start, union=union)
            calls = sorted({c.index for _, _, c in hits})
            site = self.sites.get(first_hit.path.shape())
            if site is not None:
                finding = with_site(finding, site, None)
            shape = first_hit.path.shape()
            source = created_at(first_node, self._modules()) or self.sources.get(shape)
            if source is not None:
                self.sources.setdefault(shape, source)
            elif finding.severity == "leak" and not final:
                self.anomaly_next = True  # NOTE [Created at, in a running job]
            finding = _with_kind(finding, calls, len(self.calls), source)
            findings.setdefault((first_call.target, first_call.mode), []).append(finding)
        held.clear()
        if final:
            # Evidence of a call alive though nothing walked touches its graph: an unnamed holder.
            for call in self.calls:
                if call.index in touched or call.evidence is None:
                    continue
                alive = call.evidence.alive(plain_ids)
                if alive:
                    residual = alive_bytes(alive, excluded)
                    alive.clear()
                    if sum(residual.values()) > 0:
                        findings.setdefault((call.target, call.mode), []).append(unknown_finding(residual))
        counts = [0] * len(self.calls)
        total = 0
        for node in iter_nodes(node_roots):
            total += 1
            c = self._call_of(node)
            if c is not None:
                counts[c.index] += 1
        node_roots.clear()
        cuda = int(torch.cuda.memory_allocated()) if torch.cuda.is_available() and torch.cuda.is_initialized() else None  # type: ignore[no-untyped-call]
        self.looks.append(Look(
            sum(n for _, n in union.values()), total, cuda, findings, tuple(counts), sum(n for _, n in per_call.values()),
            final=final,
        ))
        union.clear()
        per_call.clear()
        self.truncated = stats.truncated
        if not final and frame is not None and self.options.source:
            self._start_tracing(findings, frame, args)

    def _start_tracing(
        self, findings: dict[tuple[str, Mode], list[Finding]], frame: types.FrameType, args: tuple[Any, ...]
    ) -> None:
        """Trace the job until the next look, for the leaks whose stored-at line is not known yet."""
        from leakscope.diagnose.stored import StoreTracer
        from leakscope.probe.library import is_library_file

        wanted = [
            f for found in findings.values() for f in found
            if f.severity == "leak" and f.path.shape() not in self.sites and f.path not in (UNKNOWN, CYCLE)
        ]
        if not wanted:
            return
        frames = stack_of(frame)
        roots: dict[str, Any] = {}
        for root in self._roots(frame, args, live=True):
            roots.setdefault(root.name, root.obj)
        owners = _owner_files(wanted, frames, args)

        def is_user_file(file: str) -> bool:
            if is_library_file(file):
                return False
            resolved = os.path.realpath(file)
            return not _INSTALLED.search(resolved) or resolved in owners

        try:
            self.tracer = StoreTracer(wanted, roots, is_user_file, growth=True)
            self.tracer.install(frames)
        finally:
            roots.clear()
            frames.clear()
            frame = None  # type: ignore[assignment]

    def _stop_tracing(self) -> None:
        tracer, self.tracer = self.tracer, None
        if tracer is not None:
            for path, site in tracer.remove().items():
                self.sites.setdefault(path.shape(), site)

    def _call_of(self, node: Any) -> Call | None:
        from leakscope.probe.autograd import UINT64_MAX, sequence_nr

        try:
            seq = sequence_nr(node)
        except Exception:
            return None
        if seq == UINT64_MAX:
            return None
        for call in self.calls:
            if call.start < seq < call.end:
                return call
        return None

    def _modules(self) -> list[types.ModuleType]:
        return [m for m in (sys.modules.get(name) for name in self.modules) if m is not None]

    def _roots(
        self, frame: types.FrameType | None, args: tuple[Any, ...], extra_modules: Sequence[types.ModuleType] = (),
        extra_frames: Sequence[types.FrameType] = (), *, live: bool = False,
    ) -> list[Any]:
        """The holders a look walks, named as reports show them (NOTE [When watch looks]).

        ``live``: a caller's locals are read when a path is resolved (the stored-at tracer,
        NOTE [Stored at, in a running job]), not copied now.
        """
        from leakscope.probe.walk import Root

        roots: list[Any] = []
        engines = [args[0]] if args else [e for e in (ref() for ref in self.engines) if e is not None]
        for engine in engines[:1]:
            roots.append(Root("engine", engine, "engine"))
        for i, value in enumerate(args[1:]):
            roots.append(Root(f"args[{i}]", value, "argument"))
        seen_modules: set[str] = set()
        frames = stack_of(frame)
        for frame in [*frames, *extra_frames]:
            if not _is_leakscope_or_library(frame):
                name = str(frame.f_globals.get("__name__", ""))
                if frame.f_code.co_name == "<module>":
                    module = sys.modules.get(name)
                    if module is not None and module.__dict__ is frame.f_globals:
                        roots.append(Root(f"global:{_module_label(module)}", module, "global"))
                        seen_modules.add(name)
                else:
                    local = _LiveLocals(frame) if live else _locals_of(frame)
                    roots.append(Root(_caller_root_name(frame), local, "caller"))
                    self._add_module(name)
        frames.clear()
        frame = None
        for module in [*extra_modules, *self._modules()]:
            if module.__name__ not in seen_modules:
                seen_modules.add(module.__name__)
                roots.append(Root(f"global:{_module_label(module)}", module, "global"))
        return roots

    # -- the end ------------------------------------------------------------------
    def finish(self) -> None:
        """Stop watching: the wrapper passes calls through from now on."""
        if self.done:
            return
        self.done = True
        self._stop_tracing()
        self._unfreeze()
        if self.on_done is not None:
            self.on_done()

    def clear(self) -> None:
        """Drop every reference to the job's objects (weakrefs included)."""
        self._stop_tracing()
        self._unfreeze()
        for call in self.calls:
            call.evidence = None
        self.engines.clear()

    def results(self) -> list[TargetResult]:
        """One result per watched method and grad mode seen (NOTE [The look that judges])."""
        from leakscope.diagnose.growth import slope
        from leakscope.diagnose.kinds import result_kind

        keys = list(dict.fromkeys((c.target, c.mode) for c in self.calls))
        out = []
        for target, mode in keys:
            looks = self._judging_looks(target, mode)
            last = looks[-1] if looks else None
            findings = tuple(last.findings.get((target, mode), [])) if last else ()
            per_look = [look.held_bytes for look in looks]
            growth = Growth(
                retained_bytes=tuple(per_look),
                slope_bytes=round(slope(per_look), 1),
                graph_nodes=tuple(look.graph_nodes for look in looks),
                nodes_by_micro_batch=last.nodes_by_call if last else (),
                cuda_allocated=(
                    tuple(look.cuda_allocated or 0 for look in looks)
                    if last is not None and last.cuda_allocated is not None else None
                ),
            ) if looks else None
            leak = any(f.severity == "leak" for f in findings)
            warnings: list[str] = []
            if leak and last is not None and last is not self.looks[-1]:
                end = self.looks[-1]
                when = "when the job ended" if end.final else f"at the start of call #{len(end.nodes_by_call)}"
                warnings.append(
                    f"freed by the last look ({when}): the loop held these graphs across calls (seen at the "
                    f"start of call #{len(last.nodes_by_call)}) and released them later; memory grows per call until it does"
                )
            if self.truncated:
                warnings.append("the holder walk stopped at its object limit; some holders may be unnamed")
            out.append(TargetResult(
                target=target, mode=mode, verdict=Verdict.LEAK if leak else Verdict.CLEAN,
                findings=findings, kind=result_kind(findings) if leak else None,
                retained_bytes=(last.per_call_bytes + sum(f.retained_bytes for f in findings if f.holder == "not found"))
                if leak and last else 0,
                growth=growth, warnings=tuple(warnings),
                seconds=round(sum(c.seconds for c in self.calls if (c.target, c.mode) == (target, mode)), 3),
            ))
        return out

    def _judging_looks(self, target: str, mode: Mode) -> list[Look]:
        """The looks up to the one that judges ``target`` in ``mode``: the latest that found it
        leaking, else every look (NOTE [The look that judges])."""
        for i in range(len(self.looks) - 1, -1, -1):
            if any(f.severity == "leak" for f in self.looks[i].findings.get((target, mode), ())):
                return self.looks[: i + 1]
        return list(self.looks)

    def call_summaries(self) -> list[dict[str, Any]]:
        """Per watched call: grad mode, graph nodes created (its sequence range), seconds."""
        return [
            {"call": c.index, "method": c.target, "mode": c.mode.value, "graph_nodes_created": max(0, c.end - c.start - 1),
             "seconds": round(c.seconds, 4)}
            for c in self.calls
        ]


def _locals_of(frame: types.FrameType) -> dict[str, Any]:
    """A running function's locals, without leaving a snapshot behind.

    # NOTE [Stale locals snapshot]
    # Before Python 3.13, reading ``frame.f_locals`` of a running function
    # fills a dict that the frame keeps until it returns, and that dict is not
    # updated when the function later does ``del x``: the snapshot would keep
    # ``x`` (the model, a step's output) alive for the rest of the function, a
    # reference made by leakscope. The snapshot is emptied once copied; writing
    # locals back (``PyFrame_LocalsToFast`` without ``clear``, which only
    # tracers call) skips names that are missing, so nothing is lost.
    """
    snapshot = frame.f_locals
    out = dict(snapshot)
    if sys.version_info < (3, 13) and snapshot is not frame.f_globals and type(snapshot) is dict:
        snapshot.clear()
    return out


#: an installed package's file: traced only when it owns a holder (:func:`_owner_files`)
_INSTALLED = re.compile(r"[/\\](site|dist)-packages[/\\]")


def _owner_files(findings: Sequence[Finding], frames: Sequence[types.FrameType], args: tuple[Any, ...]) -> set[str]:
    """The installed files whose lines can be the one to change: those of a caller frame that holds
    a finding (verl's own loop keeping ``output_lst``) and those of the engine's classes (a TRL
    trainer's ``self._metrics``). Other installed code (torchmetrics storing into its own
    ``_forward_cache``) runs untraced, so the stored-at line is the job's line that called it."""
    roots = {f.path.root for f in findings}
    files = {
        os.path.realpath(frame.f_code.co_filename) for frame in frames
        if frame.f_code.co_name != "<module>" and _caller_root_name(frame) in roots
    }
    if args and any(f.path.root == "engine" for f in findings):
        for klass in type(args[0]).__mro__:
            module = sys.modules.get(klass.__module__)
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                files.add(os.path.realpath(file))
    return files


def stack_of(frame: types.FrameType | None) -> list[types.FrameType]:
    """``frame`` and the frames that called it, innermost first."""
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


class _LiveLocals:
    """A running frame's locals, read when a path is resolved (NOTE [Stored at, in a running job]).

    Held only while the job is traced between two looks; reading ``f_locals``
    then is what the tracer does anyway (NOTE [Stale locals snapshot]).
    """

    __slots__ = ("_frame",)

    def __init__(self, frame: types.FrameType) -> None:
        self._frame = frame

    def __getitem__(self, name: str) -> Any:
        return self._frame.f_locals[name]


def _module_label(module: types.ModuleType) -> str:
    if module.__name__ == "__main__":
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            return os.path.splitext(os.path.basename(file))[0]
    return module.__name__


def _with_kind(finding: Finding, calls: list[int], watched: int, source: Any) -> Finding:
    """The leak kind (growing: a graph per call; bounded: only the latest) and the created-at line."""
    from leakscope.diagnose.kinds import BOUNDED, GROWING

    if len(calls) > 1:
        kind, says = GROWING, f"keeps a graph of every call ({len(calls)} of {watched} watched calls)"
    else:
        kind, says = BOUNDED, f"keeps the graph of call {calls[0]} only, replaced as the job goes on"
    return dataclasses.replace(
        finding, hint=f"{kind}: {says}; {finding.hint}", source=source or finding.source, kind=kind
    )


def _returned_evidence(result: Any, start: int, end: int, max_objects: int) -> Any:
    """Weakrefs to what the graph reachable from the call's return value keeps."""
    import torch

    from leakscope.probe.autograd import sequence_nr
    from leakscope.probe.liveness import collect_evidence
    from leakscope.probe.walk import Root, walk

    nodes = []
    for hit in walk([Root("output", result, "output")], max_objects=max_objects):
        node = hit.obj.grad_fn if isinstance(hit.obj, torch.Tensor) else hit.obj
        if node is not None and start < sequence_nr(node) < end:
            nodes.append(node)
    evidence = collect_evidence(nodes, [], is_preexisting=lambda t: False, after_seq=start)
    nodes.clear()
    return evidence


__all__ = ["Call", "Look", "Observer", "ObserverOptions", "WatchStop", "stack_of"]
