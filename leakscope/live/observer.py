"""Observe the watched calls of a real job and look, before each call, at which earlier graph is alive.

What is particular to a live job lives here: counting the calls, placing each
call's graph (:class:`~leakscope.probe.steps.StepGraphs`), collecting the roots
of a running program (its frames, the engine, the call's arguments, globals),
looking at the right moment, and tracing the job for the stored-at line. The
walk and the descriptions are the harness's (:mod:`leakscope.harness.observe`),
and the judge is ``check``'s (:mod:`leakscope.diagnose.judge`).

# NOTE [When watch looks]
# A call's graph cannot be judged when the call returns: the caller has not run
# backward yet, and the output is meant to be alive. The framework's bookkeeping
# for call k is done when call k+1 starts, so that is when ``watch`` looks: it
# settles the GC and walks what a holder can be (the engine, the call's
# arguments, the frames of the loop that called the step, module globals, and
# through the engine the model and its hooks) for references whose graph reaches
# an earlier watched call's (NOTE [A step's graph]). The look after the last
# watched call happens at the start of the call after it, or when the job ends.
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
import gc
import os
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from leakscope.diagnose.judge import WATCH, Call, Context, Look, look_findings, watch_results
from leakscope.holders import CYCLE, UNKNOWN, HolderPath, RootKind
from leakscope.live.methods import MethodSpec, engine_of
from leakscope.phase import report as report_phase
from leakscope.probe import safe
from leakscope.probe.cost import node_cost
from leakscope.probe.liveness import collect_evidence
from leakscope.probe.steps import StepGraphs, heap_graph_nodes
from leakscope.results import Finding, Mode, Severity, TargetResult

if TYPE_CHECKING:
    from leakscope.harness.observe import Sight
    from leakscope.harness.stored import Stored, StoreTracer
    from leakscope.probe.liveness import Evidence
    from leakscope.probe.walk import Root
    from leakscope.results import Source


class WatchStop(BaseException):
    """Raised from the call after the last watched one with ``--then stop``: ends the job.

    A ``BaseException``, so a training loop's ``except Exception`` does not swallow it.
    """


@dataclasses.dataclass
class CallRecord:
    """One watched call: which method, its grad mode, and weakrefs to what its graph keeps."""

    index: int
    target: str
    mode: Mode
    evidence: Evidence | None
    seconds: float
    #: the optimizer steps the job had made when it ended (NOTE [Steps from autograd])
    optimizer_step: int | None = None


@dataclasses.dataclass
class Opened:
    """A watched micro-batch that has begun: its grad mode, anomaly mode while it records, its start."""

    mode: Mode
    anomaly: Any
    started: float

    def close(self) -> None:
        """Anomaly mode back as it was before :meth:`Observer.begin` (once)."""
        anomaly, self.anomaly = self.anomaly, None
        if anomaly is not None:
            anomaly.__exit__(None, None, None)


@dataclasses.dataclass(frozen=True)
class ObserverOptions:
    micro_batches: int = 3
    skip: int = 0
    stop: bool = True
    source: bool = True
    max_objects: int = 2_000_000


def _caller_root_name(frame: types.FrameType) -> str:
    code = frame.f_code
    return (
        f"caller:{os.path.basename(code.co_filename)}:{getattr(code, 'co_qualname', code.co_name)}"
    )


def is_library_frame(frame: types.FrameType) -> bool:
    """A frame whose locals are not the job's: the standard library's, torch's, leakscope's, a
    tool's. An installed framework's frames are the job's loop (a Trainer's ``tr_loss``)."""
    from leakscope.probe.library import is_job_frame_module

    found = frame.f_globals.get("__name__", "")
    name = found if type(found) is str else ""
    return not is_job_frame_module(name) or (
        name == "__mp_main__" and frame.f_code.co_name.startswith("_run")
    )


class Observer:
    """Counts calls, records the watched ones, looks before each (NOTE [When watch looks])."""

    def __init__(self, options: ObserverOptions) -> None:
        self.options = options
        #: tracing the job between two looks (NOTE [Stored at, in a running job])
        self.tracer: StoreTracer | None = None
        #: stored-at line, store op and code, by holder path shape
        self.sites: dict[HolderPath, Stored] = {}
        #: created-at lines by holder path shape, and whether the next watched call records them
        #: (NOTE [Created at, in a running job])
        self.sources: dict[HolderPath, Source] = {}
        self.anomaly_next = True
        #: whether this observer froze the heap (NOTE [Frozen heap, in a running job])
        self.frozen = False
        self.seen = 0
        self.depth = 0
        #: the thread that makes the watched calls (the first one's); other threads pass through
        self.thread: int | None = None
        self.steps = StepGraphs()
        self.calls: list[CallRecord] = []
        #: tensors alive before the first watched call, and before the current one (weakly)
        self._older: dict[int, weakref.ref[object]] = {}
        self._before: dict[int, weakref.ref[object]] = {}
        self.looks: list[Look] = []
        self.done = False
        #: weakrefs to the engines (``self`` of the calls), for the look at the job's end
        self.engines: list[weakref.ref[object]] = []
        #: modules whose globals are walked
        self.modules: dict[str, None] = {}
        #: the names of the global roots the latest look walked that are a running loop's own
        #: (a module-level loop's globals: NOTE [The loop's latest result])
        self._loop_globals: set[str] = set()
        self.on_done: Callable[[], None] | None = None
        #: called once, at the start of the first watched call (a child process announces itself)
        self.on_first_call: Callable[[], None] | None = None

    # -- the call -----------------------------------------------------------------
    def call(
        self,
        spec: MethodSpec,
        original: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> object:
        if (
            self.done
            or self.depth
            or (self.thread is not None and threading.get_ident() != self.thread)
        ):
            return original(*args, **kwargs)
        n = self.seen
        self.seen += 1
        if n < self.options.skip:
            return original(*args, **kwargs)
        frame = sys._getframe(2)  # the caller of the patched method (wrapper -> call)
        # The engine first, then the step's arguments (NOTE [The engine of a framework's step]); a
        # module-level function has no engine: its arguments are all arguments.
        holders = (
            (engine_of(spec, args[0]), *args[1:])
            if args and not spec.is_function
            else (None, *args)
        )
        try:
            if self.calls and self.checkpoint(frame, holders):
                if self.options.stop:
                    raise WatchStop()
                return original(*args, **kwargs)
        finally:
            del frame
        self._remember(holders, original)
        if not self.calls:
            self.start(sys._getframe(2), holders)
        return self._watched_call(spec, original, args, kwargs)

    def checkpoint(self, frame: types.FrameType | None, holders: tuple[object, ...]) -> bool:
        """Before the next micro-batch: look (NOTE [When watch looks]); once every micro-batch asked for
        was watched, the last look, and the watch is done (True)."""
        if len(self.calls) >= self.options.micro_batches:
            self.look(frame, holders, final=True)
            self.finish()
            return True
        self.look(frame, holders)
        return False

    def start(self, frame: types.FrameType | None, holders: tuple[object, ...] = ()) -> None:
        """Before the first watched micro-batch: this thread watches, the heap is frozen, the graphs alive
        now are older than every micro-batch (NOTE [A step's graph])."""
        self.thread = threading.get_ident()
        self._older = _tensor_refs()  # everything alive before the first call, frozen below
        self._freeze()
        self._mark_before(frame, holders)
        if self.on_first_call is not None:
            self.on_first_call()
            self.on_first_call = None

    def _freeze(self) -> None:
        """NOTE [Frozen heap, in a running job]"""
        if gc.get_freeze_count() == 0:  # the job's own freeze, if any, is left as it is
            gc.collect()
            gc.freeze()
            self.frozen = True

    def _unfreeze(self) -> None:
        if self.frozen:
            self.frozen = False
            gc.unfreeze()

    def _mark_before(self, frame: types.FrameType | None, args: tuple[object, ...]) -> None:
        """Graphs the job held before its first watched call are older than every call
        (NOTE [A step's graph]): walk what a look walks, once, and register them."""
        from leakscope.probe.walk import walk

        roots = self._roots(frame, args)
        older = []
        try:
            for hit in walk(roots, max_objects=self.options.max_objects):
                obj = hit.obj
                node = safe.grad_fn(obj) if safe.is_tensor(obj) else obj
                if node is not None:
                    older.append(node)
            self.steps.mark_before(older)
        finally:
            older.clear()
            roots.clear()
            frame = None

    def _watched_call(
        self,
        spec: MethodSpec,
        original: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> object:
        report_phase(f"in watched call #{len(self.calls)}")
        opened = self.begin()
        self.depth += 1
        try:
            result = original(*args, **kwargs)
        finally:
            self.depth -= 1
            self.end(opened, str(spec), locals().get("result"))
        return result

    def begin(self) -> Opened:
        """A watched micro-batch starts in this thread: its grad mode, anomaly mode on when it records
        created-at lines (NOTE [Created at, in a running job]), its sequence numbers begin."""
        import torch

        mode = Mode.TRAIN if torch.is_grad_enabled() else Mode.FORWARD_ONLY
        record = self.options.source and self.anomaly_next
        self.anomaly_next = False
        anomaly = torch.autograd.set_detect_anomaly(True, check_nan=False) if record else None
        started = time.perf_counter()
        self._before = (
            _tensor_refs()
        )  # what the call did not make (NOTE [Frozen heap, in a running job])
        self.steps.begin()
        return Opened(mode, anomaly, started)

    def end(self, opened: Opened, target: str, result: object, mode: Mode | None = None) -> None:
        """The micro-batch ``opened`` ends: anomaly mode back as it was, its graph placed (from ``result`` and
        every graph on the heap), recorded as a watched call of ``target``."""
        opened.close()
        evidence = self._end_call(result)
        self.calls.append(
            CallRecord(
                len(self.calls),
                target,
                mode or opened.mode,
                evidence,
                time.perf_counter() - opened.started,
            )
        )

    def warm_up(self, opened: Opened) -> None:
        """The micro-batch ``opened`` was a warm-up, not watched (``--skip``, NOTE [A micro-batch that
        compiles]): the graphs it leaves alive are older than every watched one."""
        opened.close()
        nodes = heap_graph_nodes(self.steps)
        try:
            self.steps.mark_before(nodes)
        finally:
            nodes.clear()

    def restart(self) -> None:
        """Forget the micro-batches watched so far (they were not the job's steps: NOTE [Steps from
        autograd]); the heap stays frozen and the graphs older than the first stay older."""
        self._stop_tracing()
        for call in self.calls:
            call.evidence = None
        self.calls.clear()
        self.looks.clear()
        self.sites.clear()
        self.sources.clear()
        self.steps.restart()
        self.anomaly_next = self.options.source

    def _end_call(self, result: object) -> Any:
        """Place the call's graph, in any thread (NOTE [A step's graph]), and weakref what it keeps."""
        from leakscope.probe.walk import Root, walk

        roots = []
        for hit in walk(
            [Root("output", result, RootKind.OUTPUT)], max_objects=self.options.max_objects
        ):
            node = safe.grad_fn(hit.obj) if safe.is_tensor(hit.obj) else hit.obj
            if node is not None:
                roots.append(node)
        roots.extend(heap_graph_nodes(self.steps))
        index = self.steps.end(roots)

        def other_step(node: Any) -> bool:  # this call's graph only, and what was derived from it
            step = self.steps.step_of(node)
            return step is not None and step != index

        evidence = collect_evidence(roots, [], is_preexisting=self._existed, stop=other_step)
        roots.clear()
        self._before = {}
        self.steps.add_leaves(evidence, index)
        return evidence

    def _existed(self, t: object) -> bool:
        """A tensor alive before the call started (its input, a buffer): not evidence of its graph."""
        for known in (self._before, self._older):
            ref = known.get(id(t))
            if ref is not None and ref() is t:
                return True
        return False

    def _remember(self, args: tuple[object, ...], original: Callable[..., object]) -> None:
        if args and args[0] is not None:
            engine = args[0]
            if not any(ref() is engine for ref in self.engines):
                try:
                    self.engines.append(weakref.ref(engine))
                except TypeError:
                    pass
            for klass in safe.mro(type(engine)):
                self._add_module(safe.type_module(klass))
        self._add_module(getattr(original, "__module__", "") or "")

    def _add_module(self, name: str) -> None:
        from leakscope.probe.library import is_library_module

        if name and name != "builtins" and not is_library_module(name):
            self.modules[name] = None

    # -- the look -----------------------------------------------------------------
    def look(
        self,
        frame: types.FrameType | None,
        args: tuple[object, ...] = (),
        *,
        final: bool = False,
        extra_modules: Sequence[types.ModuleType] = (),
        extra_frames: Sequence[types.FrameType] = (),
    ) -> None:
        """Settle, walk the holders, and let the judge say which earlier call's graph each one keeps
        (NOTE [One look])."""
        from leakscope.harness.observe import Scene, look

        report_phase(
            "looking for held graphs "
            + ("for the last time" if final else f"before watched call #{len(self.calls)}")
        )
        self._stop_tracing()
        scene = Scene(
            self.steps,
            lambda: self._roots(frame, args, extra_modules, extra_frames),
            max_objects=self.options.max_objects,
            modules=self._modules,
            loop_globals=lambda: self._loop_globals,
            cycles=True,
        )
        latest = len(self.calls) - 1
        # Alive, and nothing the job's roots reach explains it: every loaded module, generically
        # (NOTE [Every loaded module], NOTE [Nodes as evidence]), and the tensors that sit in a
        # reference cycle through autograd (NOTE [Cycles through autograd]).
        with look(scene, fallback=self._unexplained) as sight:
            unknown: dict[int, dict[str, int]] = {}
            unknown_nodes: dict[int, int] = {}
            owners: dict[int, str] = {}
            if final:
                unknown, unknown_nodes = self._unknown(sight)
                if unknown or unknown_nodes:  # NOTE [Held from C++]
                    from leakscope.harness.observe import unnamed_owners

                    owners = unnamed_owners(self.steps, {*unknown, *unknown_nodes})
            obs = sight.observe(latest, cuda=True)
        look_found = look_findings(
            obs,
            self._judge_calls(),
            self._context(),
            sites=self.sites,
            sources=self.sources,
            unknown=unknown,
            unknown_nodes=unknown_nodes,
            node_bytes=node_cost().bytes_per_node if unknown_nodes else 0,
            owners=owners,
            final=final,
        )
        self.looks.append(look_found)
        for found_here in look_found.findings.values():
            for f in found_here:
                if f.source is not None:
                    self.sources.setdefault(f.path.shape(), f.source)
                elif f.severity is Severity.LEAK and not final and f.path not in (UNKNOWN, CYCLE):
                    self.anomaly_next = True  # NOTE [Created at, in a running job]
        if not final and frame is not None and self.options.source:
            self._start_tracing(look_found.findings, frame, args)

    def _unexplained(self, sight: Sight) -> bool:
        """Whether a call's graph is alive that no reference found here reaches: its nodes (NOTE [Nodes as
        evidence]), or the tensors its graph kept."""
        from leakscope.harness.observe import unexplained_nodes

        if unexplained_nodes(self.steps, sight.held):
            return True
        touched = {step for h in sight.held for step in h.steps}
        return any(
            sight.alive([c.evidence])
            for c in self.calls
            if c.index not in touched and c.evidence is not None
        )

    def _unknown(self, sight: Sight) -> tuple[dict[int, dict[str, int]], dict[int, int]]:
        """Per call, what its graph keeps that no reference found reaches (an unnamed holder's): the
        bytes by cause of its tensors alive, and its live nodes."""
        from leakscope.harness.observe import unexplained_nodes

        touched = {step for h in sight.held for step in h.steps}
        alive: dict[int, dict[str, int]] = {}
        for c in self.calls:
            if c.index not in touched and c.evidence is not None:
                by_cause = sight.alive([c.evidence])
                if by_cause:
                    alive[c.index] = by_cause
        nodes = {
            step: count
            for step, count in unexplained_nodes(self.steps, sight.held).items()
            if step not in touched
        }
        return alive, nodes

    def _context(self) -> Context:
        return WATCH

    def _judge_calls(self) -> list[Call]:
        return [Call(c.index, c.target, c.mode, c.seconds) for c in self.calls]

    def _start_tracing(
        self,
        findings: Mapping[tuple[str, Mode], Sequence[Finding]],
        frame: types.FrameType,
        args: tuple[object, ...],
    ) -> None:
        """Trace the job until the next look, for the leaks whose stored-at line is not known yet."""
        from leakscope.harness.stored import StoreTracer
        from leakscope.probe.library import is_installed_file, is_library_file

        wanted = [
            f
            for found in findings.values()
            for f in found
            if f.severity is Severity.LEAK
            and f.path.shape() not in self.sites
            and f.path not in (UNKNOWN, CYCLE)
        ]
        if not wanted:
            return
        frames = stack_of(frame)
        roots: dict[str, object] = {}
        for root in self._roots(frame, args, live=True):
            roots.setdefault(root.name, root.obj)
        owners = _owner_files(wanted, frames, args)

        def is_user_file(file: str) -> bool:
            if is_library_file(file):
                return False
            resolved = os.path.realpath(file)
            return not is_installed_file(resolved) or resolved in owners

        try:
            self.tracer = StoreTracer([f.path for f in wanted], roots, is_user_file, growth=True)
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

    def _modules(self) -> list[types.ModuleType]:
        return [
            m
            for m in (safe.as_module(sys.modules.get(name)) for name in self.modules)
            if m is not None
        ]

    def _roots(
        self,
        frame: types.FrameType | None,
        args: tuple[object, ...],
        extra_modules: Sequence[types.ModuleType] = (),
        extra_frames: Sequence[types.FrameType] = (),
        *,
        live: bool = False,
    ) -> list[Root]:
        """The holders a look walks, named as reports show them (NOTE [When watch looks]).

        ``live``: a caller's locals are read when a path is resolved (the stored-at tracer,
        NOTE [Stored at, in a running job]), not copied now. A module-level loop (a script
        that trains at its top level) is its module's globals: those are the loop's variables
        (NOTE [The loop's latest result]).
        """
        from leakscope.harness.observe import module_root
        from leakscope.probe.walk import Root

        roots: list[Root] = []
        engines = (
            [args[0]] if args else [e for e in (ref() for ref in self.engines) if e is not None]
        )
        for engine in engines[:1]:
            if engine is not None:
                roots.append(Root("engine", engine, RootKind.ENGINE))
        for i, value in enumerate(args[1:]):
            roots.append(Root(f"args[{i}]", value, RootKind.ARGUMENT))
        seen_modules: set[str] = set()
        loop_globals: set[str] = set()
        frames = stack_of(frame)
        for frame in [*frames, *extra_frames]:
            if not is_library_frame(frame):
                name = str(frame.f_globals.get("__name__", ""))
                if frame.f_code.co_name == "<module>":
                    module = safe.as_module(sys.modules.get(name))
                    if module is not None and safe.module_dict(module) is frame.f_globals:
                        root = module_root(module)
                        roots.append(root)
                        loop_globals.add(root.name)
                        seen_modules.add(name)
                else:
                    local = _LiveLocals(frame) if live else _locals_of(frame)
                    roots.append(Root(_caller_root_name(frame), local, RootKind.CALLER))
                    self._add_module(name)
        frames.clear()
        frame = None
        self._loop_globals = loop_globals
        for (
            module
        ) in extra_modules:  # the job's own script, once it has ended: its globals were its loop's
            loop_globals.add(module_root(module).name)
        for module in [*extra_modules, *self._modules(), *_project_modules()]:
            name = safe.module_name(module)
            if name and name not in seen_modules:
                seen_modules.add(name)
                roots.append(module_root(module))
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
        self.steps.leaves.clear()
        self._older.clear()
        self._before.clear()

    def results(self) -> list[TargetResult]:
        """One result per watched method and grad mode seen (NOTE [The look that judges])."""
        return watch_results(self.looks, self._judge_calls())

    def call_summaries(self) -> list[dict[str, Any]]:
        """Per watched call: grad mode, graph nodes created in its thread (its sequence range), seconds."""
        out = []
        for c in self.calls:
            start, end = self.steps.ranges[c.index] if c.index < len(self.steps.ranges) else (0, 1)
            out.append(
                {
                    "call": c.index,
                    "method": c.target,
                    "mode": c.mode.value,
                    "graph_nodes_created": max(0, end - start - 1),
                    "seconds": round(c.seconds, 4),
                }
            )
            if c.optimizer_step is not None:
                out[-1]["optimizer_step"] = c.optimizer_step
        return out


def _tensor_refs() -> dict[int, weakref.ref[Any]]:
    """Weakrefs to every tensor the collector tracks (after the first watched call froze the heap:
    every tensor made since)."""
    import torch

    out = {}
    tensor = torch.Tensor
    for obj in gc.get_objects():
        if issubclass(type(obj), tensor):  # by type: never a user object's __class__
            try:
                out[id(obj)] = weakref.ref(obj)
            except TypeError:
                continue
    return out


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


def _owner_files(
    findings: Sequence[Finding], frames: Sequence[types.FrameType], args: tuple[object, ...]
) -> set[str]:
    """The installed files whose lines can be the one to change: those of a caller frame that holds
    a finding (verl's own loop keeping ``output_lst``) and those of the engine's classes (a TRL
    trainer's ``self._metrics``). Other installed code (torchmetrics storing into its own
    ``_forward_cache``) runs untraced, so the stored-at line is the job's line that called it."""
    roots = {f.path.root for f in findings}
    files = {
        os.path.realpath(frame.f_code.co_filename)
        for frame in frames
        if frame.f_code.co_name != "<module>" and _caller_root_name(frame) in roots
    }
    if args and any(f.path.root_kind is RootKind.ENGINE for f in findings):
        from leakscope.probe import safe

        for klass in safe.mro(type(args[0])):
            file = safe.module_file(sys.modules.get(safe.type_module(klass)))
            if file is not None:
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

    def __getitem__(self, name: str) -> object:
        return self._frame.f_locals[name]


def _project_modules() -> list[types.ModuleType]:
    """Every loaded module of the job's own project (NOTE [Every loaded module]: its registries and
    histories are the user's variables, walked at every look)."""
    from leakscope.probe.library import is_project_module

    out = []
    for name, found in list(sys.modules.items()):
        known = _PROJECT.get(name)
        if known is not None and known[0] == id(found):  # asked before, of this very module
            if known[1]:
                out.append(found)
            continue
        module = safe.as_module(found)
        project = type(name) is str and module is not None
        if module is not None and project:
            project = is_project_module(name, safe.module_file(module))
            if project:
                out.append(module)
        _PROJECT[name] = (id(found), project)
    return out


#: per ``sys.modules`` name: the identity of the module last asked about and whether it is the
#: project's (every look asks of every loaded module; a module replaced is asked again)
_PROJECT: dict[Any, tuple[int, bool]] = {}


__all__ = [
    "CallRecord",
    "Observer",
    "ObserverOptions",
    "Opened",
    "WatchStop",
    "is_library_frame",
    "stack_of",
]
