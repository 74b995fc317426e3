"""A trial: what a real caller keeps after running an engine's step on a fresh tiny model.

A trial keeps exactly what a real caller keeps after a micro-batch (the
returned output, the engine, the micro-batch and the model) and nothing else:
:func:`run_trial` returns only after its own frame, holding the loss and the
step's result, is gone. The trial also records, by weakref and identity only,
what the step built (:class:`~leakscope.probe.steps.StepGraphs`, the
evidence), so :mod:`leakscope.harness.observe` can tell who still holds it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import weakref
from collections.abc import Iterable
from typing import Any

from leakscope.harness.observe import Collection, Scene, module_root
from leakscope.harness.protocol import EngineSpec, build_engine
from leakscope.harness.run import build_subject, make_micro_batch, step_once
from leakscope.holders import RootKind
from leakscope.options import CheckOptions
from leakscope.phase import report
from leakscope.probe import safe
from leakscope.probe.autograd import storage_key
from leakscope.probe.library import is_library_module
from leakscope.probe.liveness import Evidence, collect_evidence
from leakscope.probe.steps import StepGraphs, heap_graph_nodes, loss_graph
from leakscope.probe.walk import Root, walk
from leakscope.results import Mode

ROOT_ORDER = (RootKind.OUTPUT, RootKind.ENGINE, RootKind.MICRO_BATCH, RootKind.MODULE)


@dataclasses.dataclass
class Trial:
    """The objects a real caller keeps after its steps, plus what identifies the steps' graphs."""

    spec: EngineSpec
    mode: Mode
    roots: dict[str, Any]
    modules: tuple[types.ModuleType, ...]
    steps: StepGraphs
    evidence: Evidence
    preexisting: dict[int, weakref.ref[Any]]
    #: storages that existed before the step, each with a weakref to a tensor on it
    #: (NOTE [Reused storage addresses]); Parameters' storages in ``param_storages``
    preexisting_storages: dict[tuple[str, int], weakref.ref[Any]]
    #: ``modules`` plus the project modules they import, whose globals are walked too
    walked_modules: tuple[types.ModuleType, ...]
    param_storages: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    #: identities of the nodes of the (single) step's loss graph
    loss_nodes: frozenset[int] = frozenset()

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
        out = [
            Root(name.value, self.roots[name], name, self.roots)
            for name in ROOT_ORDER
            if name in self.roots
        ]
        seen: set[str] = set()
        for module in self.walked_modules:
            name = safe.module_name(module)
            if not name or name in seen:
                continue
            seen.add(name)
            out.append(module_root(module))
        return out

    def is_preexisting(self, t: object) -> bool:
        """True for tensors the roots already held before the step (inputs, buffers)."""
        ref = self.preexisting.get(id(t))
        return ref is not None and ref() is t

    def reserved_ids(self) -> set[int]:
        return {id(v) for v in self.roots.values()}

    def scene(self, options: CheckOptions) -> Scene:
        """Where a look at this trial looks (NOTE [One look]): the caller's roots, the step's graphs."""
        return Scene(
            self.steps,
            self.root_list,
            excluded=lambda: self.excluded_storages,
            skip_ids=self.reserved_ids,
            max_objects=options.max_objects,
            modules=lambda: self.modules,
            target_modules=self.spec.modules,
            loss_nodes=self.loss_nodes,
        )

    def collect(self, options: CheckOptions) -> Collection:
        """Who holds the steps' graphs now, from the caller's roots (no settling: mid-record)."""
        roots = self.root_list()
        try:
            return self.scene(options).collect(roots)
        finally:
            roots.clear()

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


def run_trial(
    spec: EngineSpec, mode: Mode, options: CheckOptions, *, anomaly: bool = False
) -> Trial:
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


def new_trial(
    spec: EngineSpec,
    mode: Mode,
    options: CheckOptions,
    model: object,
    engine: object,
    micro_batch: object,
) -> Trial:
    """A trial over these objects, with what they hold before any step recorded as pre-existing."""
    roots: dict[str, object] = {"engine": engine, "micro_batch": micro_batch, "module": model}
    modules = tuple(dict.fromkeys([*spec.modules, *_engine_modules(engine)]))
    # ``modules`` are the engine's own (their frames are what ``source`` prefers); the
    # walk also covers the project modules they import (a registry in a helper module).
    trial = Trial(
        spec,
        mode,
        roots,
        modules,
        StepGraphs(),
        Evidence(),
        {},
        {},
        tuple(_with_project_imports(modules)),
    )
    older: list[Any] = []
    for hit in walk(
        trial.root_list(), skip_ids=trial.reserved_ids(), max_objects=options.max_objects
    ):
        t = hit.obj
        if not safe.is_tensor(t):
            older.append(t)  # a graph node held before any step
            continue
        ref = weakref.ref(t)
        trial.preexisting[id(t)] = ref
        key = storage_key(t)
        if key is not None:
            trial.preexisting_storages[key] = ref
        node = safe.grad_fn(t)
        if node is not None:
            older.append(node)
        del node
    older.extend(heap_graph_nodes())  # graphs made before the step, held anywhere
    trial.steps.mark_before(older)  # NOTE [A step's graph]: older graphs are never the step's
    older.clear()
    trial.param_storages = _param_storages(model)
    return trial


def _param_storages(model: Any) -> set[tuple[str, int]]:
    keys = set()
    for p in model.parameters():
        for t in (p, getattr(p, "_local_tensor", None)):
            if t is not None:
                key = storage_key(t)
                if key is not None:
                    keys.add(key)
    return keys


def _with_project_imports(modules: Iterable[types.ModuleType]) -> list[types.ModuleType]:
    """The engine's modules plus the modules of the same project they import.

    A registry in a helper module (``helpers.REGISTRY.append(entropy)``) holds a
    graph as surely as a global of the engine's own module. "Same project": the
    same top-level package (``my_pkg.engines`` imports ``my_pkg.registry``), or,
    for top-level modules, the same directory (a single-file engine and the
    ``helpers.py`` beside it). Library packages are never added.
    """

    out = [m for m in modules if safe.module_dict(m) is not None]
    for module in list(out):
        for value in list((safe.module_dict(module) or {}).values()):
            if safe.is_instance(value, types.ModuleType):
                imported: Any = value
            elif type(value) is types.FunctionType:
                imported = sys.modules.get(
                    value.__module__ if type(value.__module__) is str else ""
                )
            elif safe.is_instance(value, type):
                imported = sys.modules.get(safe.type_module(value))
            else:
                continue
            if (
                safe.module_dict(imported) is None  # a job's plain object in sys.modules
                or any(imported is m for m in out)
                or is_library_module(safe.module_name(imported))
            ):
                continue
            if _same_project(module, imported):
                out.append(imported)
    return out


def _same_project(a: types.ModuleType, b: types.ModuleType) -> bool:

    name_a, name_b = safe.module_name(a), safe.module_name(b)
    top_a, top_b = name_a.partition(".")[0], name_b.partition(".")[0]
    if "." in name_a or "." in name_b:
        return top_a == top_b
    file_a, file_b = safe.module_file(a), safe.module_file(b)
    if not (isinstance(file_a, str) and isinstance(file_b, str)):
        return False
    return os.path.dirname(os.path.abspath(file_a)) == os.path.dirname(os.path.abspath(file_b))


def _engine_modules(engine: object) -> list[types.ModuleType]:

    out = []
    for klass in safe.mro(type(engine)):
        module = safe.as_module(sys.modules.get(safe.type_module(klass)))
        if module is not None and not is_library_module(safe.module_name(module)):
            out.append(module)
    return out


def _step(trial: Trial, model: object, options: CheckOptions, *, anomaly: bool) -> None:
    """Run the step; everything it touches is local and gone when this returns."""

    trial.steps.begin()
    loss, output = step_once(
        trial.spec,
        trial.roots["engine"],
        trial.roots["micro_batch"],
        trial.mode,
        anomaly=anomaly,
        seed=options.size.seed,
    )
    trial.roots["output"] = output
    del output
    record_step(trial, model, loss, options)
    del loss


def record_step(trial: Trial, model: object, loss: object, options: CheckOptions) -> int:
    """The step that began last ended: place its graph (in any thread) and weakref what it keeps.

    Reach every graph the step built that the caller's objects, the loss or the heap
    still touch, while the loss is still held, and record it (NOTE [A step's graph],
    NOTE [Heap evidence]). The step's index.
    """
    roots: list[Any] = []
    loss_node = safe.grad_fn(loss) if safe.is_tensor(loss) else None
    if loss_node is not None:
        roots.append(loss_node)
    roots.extend(heap_graph_nodes(trial.steps))
    index = trial.steps.end(roots)
    if index == 0:
        trial.loss_nodes = loss_graph(loss_node, trial.steps)
    found = trial.collect(options)
    roots.extend(found.nodes())
    found.clear()
    probes = list(getattr(model, "leakscope_probes", ()))
    if hasattr(model, "leakscope_probes"):
        model.leakscope_probes.clear()
    more = collect_evidence(
        roots, probes, is_preexisting=trial.is_preexisting, stop=trial.steps.is_before
    )
    roots.clear()
    known = {id(item.ref()) for item in trial.evidence.items if item.ref() is not None}
    for item in more.items:
        obj = item.ref()
        if obj is not None and id(obj) not in known:
            trial.evidence.items.append(item)
        del obj
    trial.steps.add_leaves(more, index)
    trial.evidence.leaf_ids |= more.leaf_ids
    return index


__all__ = [
    "ROOT_ORDER",
    "Trial",
    "build_engine",
    "build_subject",
    "make_micro_batch",
    "new_trial",
    "record_step",
    "run_trial",
    "step_once",
]
