"""The experiments a judge asks of a check's target: the harness's API to :mod:`leakscope.diagnose`.

Each method runs the engine's real step on a fresh tiny model and engine (a
step costs milliseconds) and answers with plain data
(:class:`~leakscope.harness.observe.Observation` and friends), never tensors:

- :meth:`Experiment.step`: run one step and observe who holds its graph;
- :meth:`Experiment.holds_alone`: re-run, release every other holder the way the
  fix would, and say whether this one still keeps the graph;
- :meth:`Experiment.after_release`: re-run, release every holder, and say what
  is still alive (held by something the typed walk cannot see);
- :meth:`Experiment.micro_batches`: run N steps the way ``forward_backward_batch``
  does and observe after each (or drive the framework's own loop);
- :meth:`Experiment.store_sites`: re-run traced, for the line that stored each holder;
- :meth:`Experiment.graph`: the graph one holder keeps (``leakscope explain``).

``leakscope watch`` observes a running job through the same
:mod:`leakscope.harness.observe` walk and descriptions; only a check can re-run.
"""

from __future__ import annotations

import dataclasses
import dataclasses as dc
import sys
from typing import TYPE_CHECKING, Any

from leakscope.errors import EngineError, LeakscopeError
from leakscope.harness.gradients import compare, record_train_step
from leakscope.harness.observe import (
    Collection,
    Held,
    Observation,
    Scene,
    Sight,
    evidence_alive,
    look,
)
from leakscope.harness.protocol import EngineSpec, describe_exception
from leakscope.harness.rng import seeded
from leakscope.harness.run import build_subject, make_micro_batch, step_once
from leakscope.harness.stored import trace_stores
from leakscope.harness.trial import Trial, new_trial, record_step, run_trial
from leakscope.holders import HolderPath, RootKind
from leakscope.options import CheckOptions, ModelSize
from leakscope.phase import report
from leakscope.probe import safe
from leakscope.probe.autograd import INSPECTION, sequence_nr, storage_map
from leakscope.probe.library import is_user_file_of
from leakscope.probe.liveness import freed_by_gc, gc_paused, gc_turned_off
from leakscope.probe.release import ReleaseFailed, release
from leakscope.probe.view import view_of
from leakscope.probe.walk import Hit
from leakscope.results import GraphView, Mode

if TYPE_CHECKING:
    from leakscope.harness.stored import Stored

#: roots whose graph-free tensors are measured for storage growth
STORAGE_ROOTS = frozenset({RootKind.ENGINE, RootKind.MODULE, RootKind.GLOBAL})


@dataclasses.dataclass(frozen=True)
class FirstStep:
    """What the single step showed."""

    observation: Observation
    #: bytes by cause alive right after the step that only the cyclic collector then freed
    until_gc: dict[str, int]
    #: the engine turned the cyclic collector off (NOTE [An engine that turns the collector off])
    gc_off: bool = False


@dataclasses.dataclass(frozen=True)
class MicroBatches:
    """What a ``--micro-batches N`` run observed after each micro-batch."""

    #: one per micro-batch; the last also describes every reference still holding a graph
    observations: tuple[Observation, ...]
    #: bytes of graph-free tensors the engine, the model and globals hold, after each micro-batch
    storage_bytes: tuple[int, ...] = ()
    #: where those tensors sit, after the last micro-batch
    storage_paths: tuple[HolderPath, ...] = ()
    #: the framework's own loop ran the micro-batches (no point between them to look at)
    through_loop: bool = False


class Experiment:
    """Experiments on one target in one mode (see the module docstring)."""

    def __init__(self, spec: EngineSpec, mode: Mode, options: CheckOptions) -> None:
        self.spec = spec
        self.mode = mode
        self.options = options

    # -- the single step ------------------------------------------------------------------
    def step(self, *, source: bool = False) -> FirstStep:
        """Run one step (with created-at traces when ``source``) and observe its holders; when the
        typed walk names none but the graph is alive, the generic walk looks again."""
        INSPECTION.reset()
        trial = run_trial(self.spec, self.mode, self.options, anomaly=source)
        try:
            gc_off = gc_turned_off()
            until_gc = freed_by_gc(trial.evidence, trial.excluded_storages)
            report(step="walking")

            def unexplained(sight: Sight) -> bool:  # NOTE [Generic fallback]
                INSPECTION.add(sight.found.stats)
                return not sight.found.holders and bool(sight.alive([trial.evidence]))

            with look(self._scene(trial), fallback=unexplained) as sight:
                if sight.generic:
                    INSPECTION.add(sight.found.stats)
                alive = sight.alive([trial.evidence])
                obs = sight.observe(
                    len(trial.steps.ranges) - 1,
                    unexplained=alive if not sight.found.holders else {},
                    alive=alive,
                    cuda=self._cuda,
                )
            return FirstStep(obs, until_gc, gc_off)
        finally:
            trial.close()

    def _scene(self, trial: Trial) -> Scene:
        return trial.scene(self.options)

    @property
    def _cuda(self) -> bool:
        return self.options.device == "cuda"

    # -- confirmation and release ---------------------------------------------------------
    def holds_alone(self, path: HolderPath, *, nodes_only: bool) -> bool:
        """Re-run, release every other holder as the fix would, and see whether the graph is still
        alive and held at ``path`` (for a nodes-only graph: still held)."""
        trial = run_trial(self.spec, self.mode, self.options)
        scene = self._scene(trial)
        try:
            # a holder only the generic walk names (NOTE [Generic fallback])
            with look(
                scene, describe_all=False, fallback=lambda s: not _matching(s.found, path)
            ) as sight:
                generic = sight.generic
                mine = _matching(sight.found, path)
                if not mine:
                    return False
                my_paths = {h.path for h in mine}
                others = [
                    h
                    for h, _, _ in sight.found.holders
                    if h.path not in my_paths and all(h.obj is not m.obj for m in mine)
                ]
                released = _release_all(others)
                mine.clear()
                others.clear()
            if not released:
                return False
            with look(scene, generic=generic, describe_all=False) as sight:
                still_held = any(h.path in my_paths for h, _, _ in sight.found.holders)
                if nodes_only:
                    return still_held
                return still_held and bool(
                    evidence_alive([trial.evidence], sight.plain_ids(), trial.excluded_storages)
                )
        finally:
            trial.close()

    def after_release(self, known: set[HolderPath]) -> tuple[list[Held], dict[str, int], bool]:
        """Holders only the generic walk names (other than ``known``), the bytes still alive once every
        named holder is released (held by something unnamed), and whether the generic walk ran."""
        report("releasing every holder")
        trial = run_trial(self.spec, self.mode, self.options)
        scene = self._scene(trial)
        more: list[Held] = []
        try:
            with look(scene, describe_all=False) as sight:
                released = _release_all([h for h, _, _ in sight.found.holders])
            with look(scene, describe_all=False) as sight:
                if sight.found.holders or not released:
                    return more, {}, False
                alive = sight.alive([trial.evidence])
            if not alive:
                return more, {}, False
            # NOTE [Generic fallback]: something the typed walk does not enter (a library
            # object the user owns: a logging handler's records, a threading.local, a
            # torch.distributions object, a library's module state) holds the rest.
            with look(scene, generic=True) as sight:
                INSPECTION.add(sight.found.stats)
                more = [h for h in sight.held if h.path not in known]
                released = _release_all([h for h, _, _ in sight.found.holders])
            if not released:
                return more, {}, True
            with look(scene, generic=True, describe_all=False) as sight:
                return more, sight.alive([trial.evidence]), True
        finally:
            trial.close()

    # -- several micro-batches ------------------------------------------------------------
    def micro_batches(self) -> MicroBatches:
        """Run ``options.micro_batches`` steps as ``forward_backward_batch`` does (every output kept in a
        list, the latest loss alive until the next step returns) and observe after each; the last
        observation describes every reference still holding a graph (NOTE [Held after the last
        micro-batch]). Through the framework's own loop when the adapter drives one."""
        if self.spec.run_micro_batches is not None:
            return self._through_loop()
        spec, mode, options = self.spec, self.mode, self.options
        report(step="building")
        model, engine = build_subject(spec, options)
        batches = [make_micro_batch(spec, options, i) for i in range(options.micro_batches)]
        trial = new_trial(spec, mode, options, model, engine, batches)
        del engine
        trial.roots["output"] = []
        observations: list[Observation] = []
        storage: list[int] = []
        paths: tuple[HolderPath, ...] = ()
        try:
            loss: object = None
            for i, micro_batch in enumerate(batches):
                report(step=f"micro-batch {i + 1} of {len(batches)}")
                trial.steps.begin()
                # `loss` is rebound only after the step returns: the previous
                # micro-batch's loss is alive during this step, as in a real loop.
                loss, output = step_once(spec, trial.roots["engine"], micro_batch, mode)
                trial.roots["output"].append(output)
                del output
                record_step(trial, model, loss, options)
                last = i == len(batches) - 1
                obs, stored, paths = self._after_micro_batch(trial, loss, describe_all=last)
                observations.append(obs)
                storage.append(stored)
            del loss, micro_batch
            return MicroBatches(tuple(observations), tuple(storage), paths)
        finally:
            batches.clear()
            trial.close()
            del model

    def _after_micro_batch(
        self, trial: Trial, loss: object, *, describe_all: bool
    ) -> tuple[Observation, int, tuple[HolderPath, ...]]:
        """Observe after a micro-batch (NOTE [Held after the last micro-batch]): every walked
        reference to a graph of the run is a holder; the caller keeps only the latest loss (a local
        of the loop, never walked), whose graph counts in the curve but names no holder."""
        with look(self._scene(trial), describe_all=describe_all) as sight:
            INSPECTION.add(sight.found.stats)
            stored = [
                hit
                for hit in sight.found.plain
                if hit.root.kind in STORAGE_ROOTS
                and not trial.is_preexisting(hit.obj)
                and _maxlen(hit) is None
            ]
            paths = tuple(hit.path for hit in stored)
            storage = sum(
                n
                for _, n in storage_map(
                    [("storage", hit.obj) for hit in stored], trial.excluded_storages
                ).values()
            )
            stored.clear()
            loss_node = safe.grad_fn(loss) if safe.is_tensor(loss) else None
            obs = sight.observe(
                len(trial.steps.ranges) - 1,
                also=[loss_node] if loss_node is not None else [],
                alive=sight.alive([trial.evidence]),
                held_nodes=trial.steps.count_nodes(sight.found.nodes()),
                cuda=self._cuda,
            )
            del loss_node
            return obs, storage, paths

    def _through_loop(self) -> MicroBatches:
        """Through the framework's own loop: run it over 1, 2, ..., N micro-batches.

        The loop runs step and backward for each micro-batch inside the framework,
        so nothing can be measured between its micro-batches; a fresh engine driven
        over the first k micro-batches gives the point after micro-batch k. What
        the loop returns is what its caller keeps (the ``output`` root).
        """
        import torch

        from leakscope.models.tiny import loss_function as default_loss

        spec, mode, options = self.spec, self.mode, self.options
        assert spec.run_micro_batches is not None
        forward_only = mode is Mode.FORWARD_ONLY
        observations: list[Observation] = []
        storage: list[int] = []
        paths: tuple[HolderPath, ...] = ()
        for k in range(1, options.micro_batches + 1):
            report(
                step=f"{spec.adapter or 'framework'} loop over micro-batches 1-{k} of {options.micro_batches}"
            )
            model, engine = build_subject(spec, options)
            batches = [make_micro_batch(spec, options, i) for i in range(k)]
            trial = new_trial(spec, mode, options, model, engine, batches)
            del engine
            try:
                grad_mode = (
                    torch.no_grad()
                    if (forward_only and spec.caller_no_grad_forward_only)
                    else torch.enable_grad()
                )
                trial.steps.begin()
                try:
                    with grad_mode, seeded(0):
                        result = spec.run_micro_batches(
                            trial.roots["engine"],
                            batches,
                            spec.loss_function or default_loss,
                            forward_only,
                        )
                except Exception as exc:
                    raise EngineError(
                        describe_exception(exc, f"{spec.adapter or 'the framework'} loop")
                    ) from None
                trial.roots["output"] = result
                del result
                record_step(trial, model, None, options)
                obs, stored, paths = self._after_micro_batch(trial, None, describe_all=False)
                observations.append(dataclasses.replace(obs, nodes_by_step=()))
                storage.append(stored)
            finally:
                batches.clear()
                trial.close()
                del model
        return MicroBatches(tuple(observations), tuple(storage), paths, through_loop=True)

    # -- where a holder was stored --------------------------------------------------------
    def store_sites(self, paths: list[HolderPath]) -> dict[HolderPath, Stored]:
        """Re-run the step traced: the line that stored each holder (NOTE [Stored at])."""
        report("tracing where each holder was stored")
        report(step="building")

        model, engine = build_subject(self.spec, self.options)
        # An installed package's line is traced only when it defines the engine (a framework
        # trainer a user subclasses); a library the engine calls (torchmetrics storing into its own
        # cache) runs untraced, so the stored-at line is the user's line that called it.
        owners = [sys.modules.get(safe.type_module(k)) for k in safe.mro(type(engine))] + list(
            self.spec.modules
        )

        def is_user_file(file: str) -> bool:
            return is_user_file_of(file, owners)

        roots = {
            "engine": engine,
            "module": model,
            "micro_batch": make_micro_batch(self.spec, self.options, 0),
        }
        del model, engine
        result: list[Any] = []

        def run() -> None:
            report(step="step")
            result.append(step_once(self.spec, roots["engine"], roots["micro_batch"], self.mode))

        try:
            try:
                sites = trace_stores(paths, roots, is_user_file, run)
            except Exception:
                return {}  # the untraced verdict stands; stored-at is an extra
            loss_node = getattr(result[0][0], "grad_fn", None) if result else None
            loss_seq = sequence_nr(loss_node) if loss_node is not None else None
            del loss_node
            # NOTE [Fixes that never break training]: stored after this run's loss was computed?
            return {
                path: dc.replace(site, detach_safe=True)
                if site.seq is not None and loss_seq is not None and site.seq > loss_seq
                else site
                if site.seq is not None and loss_seq is not None
                else site
                for path, site in sites.items()
            }
        finally:
            result.clear()
            if (
                self.spec.close_engine is not None
            ):  # end what the adapter started (a paused framework loop)
                self.spec.close_engine(roots["engine"])
            roots.clear()

    def detach_keeps_gradients(self, path: HolderPath) -> bool | None:
        """Whether storing a detached copy where the step stores the holder at ``path`` leaves every
        gradient of one train step as it was (NOTE [Fixes that never break training]): two runs,
        the second replacing the store, as it is made, by a detached copy. None: not told (not a
        train step, the store could not be replaced, or the step cannot be compared)."""
        if self.mode is not Mode.TRAIN:
            return None
        try:
            before = record_train_step(self.spec, self.options)
            after = record_train_step(self.spec, self.options, detach_stores=[path])
        except LeakscopeError:
            return None
        check = compare(before, after)
        return None if check.error is not None else check.equal

    # -- at other sizes (the projection) ---------------------------------------------------
    def at_size(self, size: ModelSize, micro_batches: int) -> Experiment:
        """The same experiment on a tiny model of another size."""
        return Experiment(
            self.spec,
            self.mode,
            dataclasses.replace(self.options, size=size, micro_batches=micro_batches),
        )

    # -- the graph one holder keeps -------------------------------------------------------
    def graph(self, path: str | None, max_nodes: int) -> tuple[GraphView | None, tuple[str, ...]]:
        """The graph the holder at ``path`` keeps (default: the first), and every holder's path."""
        trial = run_trial(self.spec, self.mode, self.options)
        try:
            with look(self._scene(trial), describe_all=False) as sight:
                holders = sight.found.holders
                paths = tuple(str(h.path) for h, _, _ in holders)
                chosen = [h for h, _, _ in holders if path is None or str(h.path) == path][:1]
                del holders
            if not chosen:
                return None, paths
            hit = chosen[0]
            chosen.clear()
            obj, view_path = hit.obj, str(hit.path)
            del hit
            view = view_of(
                obj,
                target=self.spec.name,
                mode=self.mode.value,
                path=view_path,
                max_nodes=max_nodes,
            )
            del obj
            if view is None:
                return GraphView(
                    self.spec.name, self.mode.value, view_path, None, (), 0, False, paths
                ), paths
            return dataclasses.replace(view, paths=paths), paths
        finally:
            trial.close()

    @staticmethod
    def inspection_warning() -> str | None:
        """ "3 objects could not be inspected; first: ..." for everything this process's experiments
        could not read since the last :meth:`step`."""
        return INSPECTION.warning()


def checking() -> Any:
    """The collector as a check needs it (paused mid-step, the older heap frozen; NOTE [Frozen heap])."""
    return gc_paused()


def _replacement(obj: object) -> object:
    return safe.detached(obj) if safe.is_tensor(obj) else None


def _release_all(hits: list[Hit]) -> bool:
    """Release every hit as the fix would; False if one could not be released. Neither runs the
    engine's code (a tensor subclass's ``__torch_function__``, a container's ``__setitem__``)."""
    ok = True
    for hit in hits:
        try:
            release(hit.link, _replacement(hit.obj))
        except (ReleaseFailed, Exception):
            # An immutable holder (frozenset, tuple root), a key that hashes itself: detach the
            # tensor in place instead, which cuts the same reference.
            if not (safe.is_tensor(hit.obj) and safe.detach_in_place(hit.obj)):
                ok = False
    return ok


def _matching(found: Collection, path: HolderPath) -> list[Hit]:
    """The holders at ``path``; else at the same slot by shape (state that outlives trials, a
    module-level registry, puts this run's entry at another index)."""
    mine = [h for h, _, _ in found.holders if h.path == path]
    if not mine:
        shape = path.shape()
        mine = [h for h, _, _ in found.holders if h.path.shape() == shape]
    return mine


def _maxlen(hit: Hit) -> int | None:
    return safe.maxlen(hit.link.container)


__all__ = ["Experiment", "FirstStep", "MicroBatches", "STORAGE_ROOTS", "checking"]
