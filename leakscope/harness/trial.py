"""One trial: build a fresh model and engine, run one step as a real caller would, observe.

A trial keeps exactly what a real caller keeps after a micro-batch (the
returned output, the engine, the micro-batch and the model) and nothing else:
``run_trial`` returns only after its own frame, holding the loss and the step's
result, is gone. ``observe`` then walks those roots to find who still holds
this step's graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import traceback
import types
import weakref
from collections.abc import Iterable
from typing import Any

from leakscope.errors import EngineError, LeakscopeError
from leakscope.harness.protocol import EngineSpec, build_engine, describe_exception
from leakscope.harness.rng import seeded
from leakscope.options import CheckOptions
from leakscope.phase import report
from leakscope.probe.autograd import UINT64_MAX, accumulated_leaf, sequence_nr, storage_key
from leakscope.probe.liveness import Evidence, Item, collect_evidence, settle
from leakscope.probe.walk import Hit, Root, WalkStats, kinds, walk
from leakscope.results import Mode

ROOT_ORDER = ("output", "engine", "micro_batch", "module")


def next_sequence_nr() -> int:
    """The sequence number the next graph node created in this thread will exceed."""
    import torch

    with torch.enable_grad():
        probe = torch.empty(0, requires_grad=True) * 1
    return sequence_nr(probe.grad_fn)


@dataclasses.dataclass
class Trial:
    """The objects a real caller keeps after one step, plus weakref evidence."""

    spec: EngineSpec
    mode: Mode
    roots: dict[str, Any]
    modules: tuple[types.ModuleType, ...]
    seq_start: int
    seq_end: int
    evidence: Evidence
    preexisting: dict[int, weakref.ref[Any]]
    #: storages that existed before the step, each with a weakref to a tensor on it
    #: (NOTE [Reused storage addresses]); Parameters' storages in ``param_storages``
    preexisting_storages: dict[tuple[str, int], weakref.ref[Any]]
    #: ``modules`` plus the project modules they import, whose globals are walked too
    walked_modules: tuple[types.ModuleType, ...]
    param_storages: set[tuple[str, int]] = dataclasses.field(default_factory=set)

    @property
    def excluded_storages(self) -> set[tuple[str, int]]:
        """Storages not counted as the step's: the Parameters', and those that existed before the
        step and still do.

        # NOTE [Reused storage addresses]
        # A storage is known by its address. When a tensor that existed before
        # the step is freed during it (an engine attribute rebound, a cache
        # entry evicted), the allocator may give its address to a tensor the
        # step keeps, which would then not be counted, and a storage-growth
        # warning would come and go from run to run. An address is excluded
        # only while the tensor recorded on it is alive and still on it.
        """
        live = set(self.param_storages)
        for key, ref in self.preexisting_storages.items():
            t = ref()
            if t is not None and storage_key(t) == key:
                live.add(key)
        return live

    def root_list(self) -> list[Root]:
        out = [Root(name, self.roots[name], name, self.roots) for name in ROOT_ORDER if name in self.roots]
        seen: set[str] = set()
        for module in self.walked_modules:
            if module.__name__ in seen:
                continue
            seen.add(module.__name__)
            out.append(Root(f"global:{module.__name__}", module, "global"))
        return out

    def in_step(self, node: Any) -> bool:
        """True for graph nodes this step created (AccumulateGrad: for this step's leaves)."""
        seq = sequence_nr(node)
        if seq == UINT64_MAX:
            leaf = accumulated_leaf(node)
            return leaf is not None and id(leaf) in self.evidence.leaf_ids
        return self.seq_start < seq < self.seq_end

    def only_extends_older_graph(self, node: Any) -> bool:
        """True when this step only added graph-free nodes on top of a graph built before it.

        NOTE [Older graphs]: an accumulator that outlives checks and modes
        (``Engine.total = Engine.total + x``, with ``x`` computed under
        ``no_grad``) gets one new node per step on top of an older graph. That
        older graph is the leak of the step that built it, not of this one;
        counting it here would make a forward-only verdict depend on what ran
        before it in the same process.
        """
        from leakscope.probe.autograd import ctx_values, iter_nodes, saved_values

        older = False
        for current in _bounded(iter_nodes([node]), 10_000):
            seq = sequence_nr(current)
            if seq == UINT64_MAX:
                leaf = accumulated_leaf(current)
                if leaf is not None and id(leaf) in self.evidence.leaf_ids:
                    return False  # reaches this step's leaves
                continue
            if seq <= self.seq_start:
                older = True
                continue
            if self.seq_start < seq < self.seq_end and (
                next(saved_values(current), None) is not None or next(ctx_values(current), None) is not None
            ):
                return False  # this step's own nodes keep tensors
        return older

    def is_preexisting(self, t: Any) -> bool:
        """True for tensors the roots already held before the step (inputs, buffers)."""
        ref = self.preexisting.get(id(t))
        return ref is not None and ref() is t

    def is_node(self, obj: Any) -> bool:
        return kinds().is_node(obj)

    def reserved_ids(self) -> set[int]:
        return {id(v) for v in self.roots.values()}

    def close(self) -> None:
        """End what the adapter started for the engine, then drop every reference to the user's objects."""
        engine = self.roots.get("engine")
        if engine is not None and self.spec.close_engine is not None:
            self.spec.close_engine(engine)
        del engine
        self.roots.clear()
        self.evidence.items.clear()
        self.preexisting.clear()
        self.preexisting_storages.clear()


def _tensor_hits(roots: list[Root], reserved: set[int], max_objects: int) -> list[Any]:
    import torch

    return [h.obj for h in walk(roots, skip_ids=reserved, max_objects=max_objects) if isinstance(h.obj, torch.Tensor)]


def _param_storages(model: Any) -> set[tuple[str, int]]:
    keys = set()
    for p in model.parameters():
        for t in (p, getattr(p, "_local_tensor", None)):
            if t is not None:
                key = storage_key(t)
                if key is not None:
                    keys.add(key)
    return keys


def _validate(result: Any, mode: Mode) -> tuple[Any, Any]:
    import torch

    if not isinstance(result, (tuple, list)) or len(result) != 2:
        shape = f"a {type(result).__name__}" + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        raise EngineError(
            f"forward_step returned {shape}; expected a (loss, output) pair: end it with `return loss, output`"
        )
    loss, output = result
    if mode is Mode.TRAIN:
        if not isinstance(loss, torch.Tensor):
            raise EngineError(
                f"forward_step returned a loss of type {type(loss).__name__}; expected a scalar tensor "
                "that backward() can run on"
            )
        if loss.numel() != 1:
            raise EngineError(
                f"forward_step returned a loss of shape {tuple(loss.shape)}; expected a scalar: reduce it (e.g. .mean())"
            )
        if loss.grad_fn is None:
            raise EngineError(
                "the loss has no grad_fn in train mode: nothing would train; "
                "do not detach the loss or compute it under torch.no_grad()"
            )
    return loss, output


def run_trial(spec: EngineSpec, mode: Mode, options: CheckOptions, *, anomaly: bool = False) -> Trial:
    """Build, step (and backward in train mode), and return what a caller keeps."""
    report(step="building")
    model, engine = build_subject(spec, options)
    micro_batch = make_micro_batch(spec, options, 0)
    trial = new_trial(spec, mode, options, model, engine, micro_batch)
    del engine, micro_batch
    report(step="step")
    try:
        _step(trial, model, options, anomaly=anomaly)
    except BaseException:
        trial.close()  # an adapter's paused framework loop ends here too
        raise
    del model
    return trial


def make_micro_batch(spec: EngineSpec, options: CheckOptions, index: int) -> Any:
    """The ``index``-th micro-batch: the adapter's format when it has one, else leakscope's."""
    from leakscope.models.tiny import build_micro_batch

    if spec.make_micro_batch is not None:
        return spec.make_micro_batch(options.size, index)
    return build_micro_batch(options.size, index, options.device or "cpu", keys=options.micro_batch_keys)


def build_subject(spec: EngineSpec, options: CheckOptions) -> tuple[Any, Any]:
    """A fresh tiny model and the engine built around it."""
    from leakscope.models.tiny import build_model

    model = build_model(spec.model_kind or options.model, options.size, options.device or "cpu")
    return model, build_engine(spec, model)


def new_trial(
    spec: EngineSpec, mode: Mode, options: CheckOptions, model: Any, engine: Any, micro_batch: Any
) -> Trial:
    """A trial over these objects, with what they hold before any step recorded as pre-existing."""
    roots: dict[str, Any] = {"engine": engine, "micro_batch": micro_batch, "module": model}
    modules = tuple(dict.fromkeys([*spec.modules, *_engine_modules(engine)]))
    # ``modules`` are the engine's own (their frames are what ``source`` prefers); the
    # walk also covers the project modules they import (a registry in a helper module).
    trial = Trial(spec, mode, roots, modules, 0, 0, Evidence(), {}, {}, tuple(_with_project_imports(modules)))
    for t in _tensor_hits(trial.root_list(), trial.reserved_ids(), options.max_objects):
        ref = weakref.ref(t)
        trial.preexisting[id(t)] = ref
        key = storage_key(t)
        if key is not None:
            trial.preexisting_storages[key] = ref
    trial.param_storages = _param_storages(model)
    return trial


def _with_project_imports(modules: Iterable[types.ModuleType]) -> list[types.ModuleType]:
    """The engine's modules plus the modules of the same project they import.

    A registry in a helper module (``helpers.REGISTRY.append(entropy)``) holds a
    graph as surely as a global of the engine's own module. "Same project": the
    same top-level package (``my_pkg.engines`` imports ``my_pkg.registry``), or,
    for top-level modules, the same directory (a single-file engine and the
    ``helpers.py`` beside it). Library packages are never added.
    """
    import sys

    from leakscope.probe.library import is_library_module

    out = list(modules)
    for module in list(out):
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                imported: Any = value
            elif isinstance(value, (types.FunctionType, type)):
                imported = sys.modules.get(getattr(value, "__module__", "") or "")
            else:
                continue
            if imported is None or imported in out or is_library_module(imported.__name__):
                continue
            if _same_project(module, imported):
                out.append(imported)
    return out


def _same_project(a: types.ModuleType, b: types.ModuleType) -> bool:
    import os

    top_a, top_b = a.__name__.partition(".")[0], b.__name__.partition(".")[0]
    if "." in a.__name__ or "." in b.__name__:
        return top_a == top_b
    file_a, file_b = getattr(a, "__file__", None), getattr(b, "__file__", None)
    if not (isinstance(file_a, str) and isinstance(file_b, str)):
        return False
    return os.path.dirname(os.path.abspath(file_a)) == os.path.dirname(os.path.abspath(file_b))


def _engine_modules(engine: Any) -> list[types.ModuleType]:
    import sys

    from leakscope.probe.library import is_library_module

    out = []
    for klass in type(engine).__mro__:
        module = sys.modules.get(klass.__module__)
        if module is not None and not is_library_module(module.__name__):
            out.append(module)
    return out


def step_once(
    spec: EngineSpec, engine: Any, micro_batch: Any, mode: Mode, *, anomaly: bool = False, seed: int = 0
) -> tuple[Any, Any]:
    """Call the step as its real caller does (and backward in train mode); validate what it returns.

    With ``spec.runs_backward`` the framework runs backward inside the step: the
    result is ``(None, what the step returned)`` and leakscope calls no backward.
    """
    import torch

    from leakscope.models.batch_keys import find_missing_key, recording
    from leakscope.models.tiny import loss_function

    forward_only = mode is Mode.FORWARD_ONLY
    action = f"the {spec.adapter} step" if spec.runs_backward else "forward_step"
    grad_mode = torch.no_grad() if (forward_only and spec.caller_no_grad_forward_only) else torch.enable_grad()
    anomaly_mode = (
        torch.autograd.set_detect_anomaly(True, check_nan=False) if anomaly else contextlib.nullcontext()
    )
    action = f"the {spec.adapter} step" if spec.runs_backward else "forward_step"
    try:
        with grad_mode, anomaly_mode, seeded(seed), recording():
            result = spec.call_step(engine, micro_batch, spec.loss_function or loss_function, forward_only)
    except LeakscopeError:
        raise  # an adapter's own one-line error (e.g. the factory built the wrong kind of object)
    except Exception as exc:
        missing = find_missing_key(exc)
        if missing is not None:  # leakscope's micro-batch lacks a key: not the engine's fault
            raise EngineError(missing.message, detail=traceback.format_exc()) from None
        raise EngineError(
            describe_exception(exc, action) + "; fix the engine (run with --debug for the traceback)",
            detail=traceback.format_exc(),
        ) from None
    except SystemExit as exc:
        raise EngineError(
            f"{action} called sys.exit({exc.code!r}); an engine must return (loss, output), not exit",
            detail=traceback.format_exc(),
        ) from None
    if spec.runs_backward:
        # NOTE [Framework runs backward]: the framework's own per-micro-batch
        # work (its backward included) ran inside the step; what it returned is
        # what its caller keeps. No loss is held: observe exactly as after backward.
        return None, result
    loss, output = _validate(result, mode)
    del result
    if mode is Mode.TRAIN:
        try:
            loss.backward()
        except Exception as exc:
            raise EngineError(
                describe_exception(exc, "loss.backward()") + "; the returned loss must be differentiable",
                detail=traceback.format_exc(),
            ) from None
    return loss, output


def _step(trial: Trial, model: Any, options: CheckOptions, *, anomaly: bool) -> None:
    """Run the step; everything it touches is local and gone when this returns."""
    import torch

    trial.seq_start = next_sequence_nr()
    loss, output = step_once(
        trial.spec, trial.roots["engine"], trial.roots["micro_batch"], trial.mode, anomaly=anomaly,
        seed=options.size.seed,
    )
    trial.seq_end = next_sequence_nr()
    trial.roots["output"] = output
    del output
    # Reach every graph this step built that the caller's objects still touch,
    # while we still hold the loss, and weakref what those graphs keep.
    graph_roots: list[Any] = []
    if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
        graph_roots.append(loss.grad_fn)
    graph_roots.extend(_step_nodes(trial, options))
    graph_roots.extend(heap_step_nodes(trial))
    trial.evidence = collect_evidence(
        graph_roots, list(getattr(model, "leakscope_probes", ())),
        is_preexisting=trial.is_preexisting, after_seq=trial.seq_start,
    )
    graph_roots.clear()
    del loss


def _bounded(nodes: Any, limit: int) -> Any:
    for i, node in enumerate(nodes):
        if i >= limit:
            return
        yield node


@dataclasses.dataclass
class Collection:
    """What the caller's roots reach of this run's graphs. Holds strong refs: clear it soon.

    ``holders`` are references into a graph this run built: ``(hit, node)`` for a
    tensor whose ``grad_fn`` (or a graph node) this run created, ``(hit, None)``
    for a leaf of this run held directly (a step's input forced to require grad).
    ``plain`` are the other tensors the roots hold.
    """

    holders: list[tuple[Hit, Any]]
    plain: list[Hit]
    stats: WalkStats

    def nodes(self) -> list[Any]:
        """The graph nodes held (graph roots for evidence and node counts)."""
        return [node for _, node in self.holders if node is not None]

    def clear(self) -> None:
        self.holders.clear()
        self.plain.clear()


def collect(trial: Trial, options: CheckOptions, *, generic: bool = False) -> Collection:
    """Walk the caller's roots and sort what they reach: references into this run's graphs, and
    plain tensors. The one rule for "this step's graph reachable from these roots", used by the
    single step, the growth run and the growth curve."""
    import torch

    stats = WalkStats()
    holders: list[tuple[Hit, Any]] = []
    plain: list[Hit] = []
    for hit in walk(
        trial.root_list(), skip_ids=trial.reserved_ids(), max_objects=options.max_objects, stats=stats,
        generic=generic,
    ):
        obj = hit.obj
        if isinstance(obj, torch.Tensor):
            node = obj.grad_fn
            if node is not None and trial.in_step(node):
                holders.append((hit, node))
            elif node is None and obj.requires_grad and id(obj) in trial.evidence.leaf_ids:
                holders.append((hit, None))
            else:
                plain.append(hit)
        elif trial.in_step(obj):
            holders.append((hit, obj))
    return Collection(holders, plain, stats)


def heap_step_nodes(trial: Trial) -> list[Any]:
    """The graphs of every tensor of this run alive anywhere, reachable from the caller or not.

    NOTE [Heap evidence]: the evidence (weakrefs on what a graph keeps) is taken
    from graphs the caller's objects reach, and from these: a tensor held by
    something outside the caller's reach (a C++ hook, another library's state)
    keeps its own branch of the graph (an entropy over the logits), which no
    reachable graph shares; without it, an unnamed holder's bytes would leave
    that branch out. Cheap: during a check the heap that existed before it is
    frozen (NOTE [Frozen heap]) and ``gc.get_objects()`` lists only what the
    check created.
    """
    import gc

    import torch

    out = []
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):
            node = obj.grad_fn
            if node is not None and trial.in_step(node):
                out.append(node)
    return out


def _step_nodes(trial: Trial, options: CheckOptions) -> list[Any]:
    found = collect(trial, options)
    try:
        return found.nodes()
    finally:
        found.clear()


@dataclasses.dataclass
class Observation:
    """Who holds this step's graph, and what is still alive. Holds strong refs: drop it soon."""

    candidates: list[Hit]
    alive: list[tuple[Item, Any]]
    excluded_storages: set[tuple[str, int]]
    stats: WalkStats

    @property
    def truncated(self) -> bool:
        return self.stats.truncated

    def alive_unexplained(self) -> list[tuple[Item, Any]]:
        """Alive evidence when no candidate explains it (used before any release)."""
        return self.alive if not self.candidates else []

    def clear(self) -> None:
        self.candidates.clear()
        self.alive.clear()


def observe(trial: Trial, options: CheckOptions, *, generic: bool = False) -> Observation:
    """Settle, then collect the references into this step's graph that the caller's roots reach.

    ``generic`` walks with the generic fallback (:func:`leakscope.probe.walk.walk`).
    """
    settle()
    found = collect(trial, options, generic=generic)
    candidates: list[Hit] = []
    excluded = set(trial.excluded_storages)
    for hit, node in found.holders:
        if node is not None and trial.only_extends_older_graph(node):  # NOTE [Older graphs]
            found.plain.append(hit)
            continue
        candidates.append(hit)
        if node is not None:
            key = storage_key(hit.obj) if not trial.is_node(hit.obj) else None
            if key is not None:
                excluded.add(key)
    plain_ids: set[int] = set()
    for hit in found.plain:
        plain_ids.add(id(hit.obj))
        key = storage_key(hit.obj) if not trial.is_node(hit.obj) else None
        if key is not None:
            excluded.add(key)
    found.clear()
    alive = trial.evidence.alive(plain_ids)
    return Observation(candidates, alive, excluded, found.stats)
