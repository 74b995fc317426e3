"""Prove a fix: run the user's code with an edit applied, and compare one train step's gradients.

# NOTE [A fix is proven, not worded]
# A sentence can be wrong: detaching a value that feeds the loss silently cuts a
# gradient, detaching a lambda raises, detaching a loss a framework backprops
# later trains nothing. So ``leakscope fix`` runs what it proposes. In a child
# process (``leakscope.runner.proof``), the edited text of the user's file is
# loaded under the module's own name (:func:`edited_modules`: a meta-path finder
# that serves the edited source for that file, nothing written next to it), the
# check is run again, and one train step is run with and without the edit on the
# same fresh tiny model, seed and micro-batch (:func:`capture`, :func:`compare`).
# A fix is verified only when the holder is gone and every parameter's gradient
# (and value after the step, for frameworks that step the optimizer inside it)
# is equal within ``rtol``/``atol``; the unedited step is run twice first, so an
# engine that is not deterministic is reported as "cannot verify", never as a
# changed gradient. Between variants every user module loaded since the child
# started is dropped from ``sys.modules``, so module state (a registry list, a
# class attribute) starts empty each time, as in a fresh job.

# NOTE [Every gradient the step's backward reaches]
# A detach that removes a gradient is the one mistake a fix must never make, and
# it can remove the gradient of a model leakscope has no name for: a critic on a
# plain wrapper object (``self.critic.net``), a parameter only an optimizer's
# group holds, a buffer that requires grad. So the leaves compared are found from
# the graph, not from attribute names: each ``torch.autograd.backward`` (and
# ``torch.autograd.grad``) the step calls first walks its roots' graph to the
# ``AccumulateGrad`` nodes and records their ``variable``s (:func:`graph_leaves`).
# Names come from a bounded walk of the model and the engine through modules,
# plain objects, containers and optimizers (:func:`_named_leaves`); a leaf the
# graph reached that no walk names is compared by the order the graph reached it.
# A leaf with a gradient on one side only (the detach cut it off) is a changed
# gradient, never "unchanged".
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import math
import sys
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from leakscope.errors import EngineError, LeakscopeError, TargetError
from leakscope.harness.patch import source_lines
from leakscope.harness.protocol import EngineSpec
from leakscope.options import CheckOptions
from leakscope.probe import safe
from leakscope.results import Mode

#: gradients are equal when ``|a - b| <= ATOL + RTOL * |b|`` elementwise (``torch.allclose``)
RTOL = 1e-5
ATOL = 1e-7


def tolerance() -> str:
    """The tolerance in words, as every report states it."""
    return f"rtol={RTOL:g}, atol={ATOL:g}"


# -- the edited module under its own name ---------------------------------------------------------


class _EditedLoader(importlib.machinery.SourceFileLoader):
    """Loads ``path`` from the edited text in memory: the module keeps its name and ``__file__``."""

    def __init__(self, fullname: str, path: str, text: str) -> None:
        super().__init__(fullname, path)
        self._text = text

    def get_data(self, path: str) -> bytes:
        if path == self.path:  # in the file's own encoding, which its coding cookie still declares
            from leakscope.harness.patch import source_encoding

            return self._text.encode(source_encoding(super().get_data(path)))
        return super().get_data(path)

    def path_stats(self, path: str) -> Mapping[str, Any]:
        # No stats: the bytecode cache of the unedited file is never read, nor a new one written.
        raise OSError("edited in memory")


class _EditedFinder(importlib.abc.MetaPathFinder):
    """Finds modules as the other finders do; for an edited file, serves the edited text."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = dict(texts)
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        # Another finder that asks the finders after it (a watch's import hook) asks this one again:
        # the inner call answers None, so each finder is asked once per lookup.
        if getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            return self._find(fullname, path, target)
        finally:
            self._busy.on = False

    def _find(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            origin = _resolved(spec.origin) if spec.has_location and spec.origin else None
            text = self.texts.get(origin) if origin is not None else None
            if text is None or spec.origin is None:
                return None  # the next finder (the one that found it) loads it as usual
            return importlib.util.spec_from_file_location(
                fullname,
                spec.origin,
                loader=_EditedLoader(fullname, spec.origin, text),
                submodule_search_locations=spec.submodule_search_locations,
            )
        return None


def _resolved(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return str(Path(path).resolve())
    except OSError:
        return None


def in_project(file: str) -> bool:
    """Whether ``file`` is the user's project: not the standard library, not leakscope's own code,
    not an installed package. Only such a file is edited by a fix, and only its modules are imported
    again between a proof's variants (a library that loads lazily, as transformers and TRL do,
    breaks when half of it is imported again)."""
    from leakscope.probe.library import is_library_file

    if is_library_file(file):
        return False
    return not ({"site-packages", "dist-packages"} & set(Path(file).parts))


def outside(file: str, root: str | None) -> bool:
    """Whether ``file`` lies outside the project directory ``root`` (None: no bound, ``--allow-outside``):
    a fix edits only files under the project being checked (NOTE [Files are the user's])."""
    if root is None:
        return False
    try:
        Path(file).resolve().relative_to(Path(root).resolve())
    except (OSError, ValueError):
        return True
    return False


def user_modules(since: set[str]) -> list[str]:
    """Modules loaded after ``since`` whose file is in the user's project (:func:`in_project`)."""
    names = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name not in since and isinstance(file, str) and in_project(file):
            names.append(name)
    return names


def forget(names: Sequence[str]) -> None:
    """Drop modules from ``sys.modules`` (and from their parent package), so the next import runs
    their code again."""
    for name in names:
        sys.modules.pop(name, None)
        parent, _, child = name.rpartition(".")
        package = sys.modules.get(parent) if parent else None
        if package is not None and getattr(package, child, None) is not None:
            with contextlib.suppress(AttributeError):
                delattr(package, child)


def _edited_names(texts: Mapping[str, str]) -> list[str]:
    return [
        name
        for name, module in list(sys.modules.items())
        if _resolved(getattr(module, "__file__", None)) in texts
    ]


@contextlib.contextmanager
def edited_modules(
    texts: Mapping[Path, str], *, since: set[str], target: str | None = None
) -> Iterator[None]:
    """Within the block, importing a module whose file is a key of ``texts`` runs the edited text
    instead (NOTE [A fix is proven, not worded]). User modules loaded since ``since``, and the edited
    ones, are forgotten before and after, so each variant imports afresh. ``target``: a
    ``path/to/file.py:Name`` target whose file is edited is loaded here, under the name the target
    resolver gives it (the resolver loads a file by path, past every finder)."""
    by_path = {str(path.resolve()): text for path, text in texts.items()}
    forget([*user_modules(since), *_edited_names(by_path)])
    finder = _EditedFinder(by_path)
    sys.meta_path.insert(0, finder)
    for path, text in by_path.items():  # tracebacks and stored-at lines read the edited lines
        linecache.cache[path] = (len(text), None, source_lines(text), path)
    try:
        if target is not None:
            _load_file_target(target, by_path)
        yield
    finally:
        sys.meta_path.remove(finder)
        for path in by_path:
            linecache.cache.pop(path, None)
        forget([*user_modules(since), *_edited_names(by_path)])


def _load_file_target(target: str, texts: Mapping[str, str]) -> None:
    from leakscope.harness.target import split_target

    module_part, _ = split_target(target)
    if not (module_part.endswith(".py") or "/" in module_part):
        return
    path = Path(module_part).resolve()
    text = texts.get(str(path))
    if text is None:
        return
    name = (
        path.stem if path.stem.isidentifier() else "leakscope_target"
    )  # as leakscope.harness.target names it
    loader = _EditedLoader(name, str(path), text)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    added = str(path.parent) not in sys.path
    if added:
        sys.path.insert(0, str(path.parent))
    try:
        loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        raise TargetError(
            f"the edited {module_part} does not import: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if added:
            sys.path.remove(str(path.parent))


# -- one train step's gradients -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GradientCheck:
    """One train step with the edit against one without: what was compared and what differed."""

    #: tensors compared (each parameter's gradient, and its value after the step)
    compared: int = 0
    #: the largest ``|a - b|`` over everything compared
    max_diff: float = 0.0
    #: the first thing that differs beyond the tolerance (``gradient of module.blocks.0.up.weight``)
    changed: str | None = None
    #: its largest ``|a - b|``; None: it has a gradient on one side only
    changed_by: float | None = None
    #: the step (with the edit) could not run, or its gradients cannot be compared: why
    error: str | None = None
    rtol: float = RTOL
    atol: float = ATOL
    #: what was compared, in words, as the verdict says it
    subject: str = "one train step's gradients and parameters"

    @property
    def equal(self) -> bool:
        return self.error is None and self.changed is None and self.compared > 0


@dataclasses.dataclass
class StepTensors:
    """What one train step left: each parameter's gradient and value (this process only; tensors)."""

    tensors: dict[str, Any]
    #: parameters with a gradient after the step, or whose value the step's own update changed (a
    #: framework that steps the optimizer and zeroes the gradients inside the step: Lightning)
    with_grad: int


def graph_leaves(roots: Sequence[Any]) -> list[Any]:
    """Every leaf tensor a backward from ``roots`` accumulates into, in the order the graph reaches
    them: the ``variable`` of each ``AccumulateGrad`` node reachable from the roots' ``grad_fn``
    (NOTE [Every gradient the step's backward reaches]). Iterative, each node once."""
    leaves: list[Any] = []
    seen: set[int] = set()
    stack = [safe.grad_fn(t) for t in roots if safe.is_tensor(t)]
    stack.reverse()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = (
            getattr(node, "variable", None) if type(node).__name__ == "AccumulateGrad" else None
        )
        if variable is not None:
            leaves.append(variable)
            continue
        nexts = getattr(node, "next_functions", ()) or ()
        stack.extend(reversed([fn for fn, _ in nexts if fn is not None]))
    return leaves


@contextlib.contextmanager
def _backward_roots(found: list[Any]) -> Iterator[None]:
    """Within the block, each ``torch.autograd.backward`` (``Tensor.backward`` calls it) and
    ``torch.autograd.grad`` first records the leaves its graph reaches into ``found``; the original
    functions are back in place after the block, whatever happens."""
    import torch

    backward, grad = torch.autograd.backward, torch.autograd.grad

    def roots_of(tensors: Any) -> list[Any]:
        return list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]

    def recording_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        found.extend(graph_leaves(roots_of(tensors)))
        return backward(tensors, *args, **kwargs)

    def recording_grad(outputs: Any, *args: Any, **kwargs: Any) -> Any:
        found.extend(graph_leaves(roots_of(outputs)))
        return grad(outputs, *args, **kwargs)

    torch.autograd.backward = recording_backward
    torch.autograd.grad = recording_grad
    try:
        yield
    finally:
        torch.autograd.backward = backward
        torch.autograd.grad = grad


#: how deep the walk from the model and the engine looks for named leaves (``engine.critic.net``)
_NAME_DEPTH = 4


def _named_leaves(model: Any, engine: Any) -> list[tuple[str, Any]]:
    """Leaf tensors that require grad, named by how the model and the engine hold them: the model's
    parameters and buffers, then the engine's, through modules, plain objects (a critic on a wrapper,
    ``engine.critic.net.weight``), dicts, lists and optimizers' parameter groups, each once (read as
    the walk reads: NOTE [Reads that run no user code])."""
    import torch

    seen: set[int] = set()
    visited: set[int] = set()
    out: list[tuple[str, Any]] = []

    def add(name: str, t: Any, *, parameter: bool = False) -> None:
        # A module's parameters are compared whether they require grad or not (a frozen base
        # weight's value after the step); any other tensor only when it is a leaf that requires grad.
        if id(t) not in seen and (
            parameter or (safe.is_tensor(t) and safe.is_leaf(t) and safe.requires_grad(t))
        ):
            seen.add(id(t))
            out.append((name, t))

    def walk(name: str, value: Any, depth: int) -> None:
        if id(value) in visited or depth > _NAME_DEPTH:
            return
        visited.add(id(value))
        if safe.is_tensor(value):
            add(name, value)
        elif safe.is_instance(value, torch.nn.Module):
            for sub, p in value.named_parameters():
                add(f"{name}.{sub}", p, parameter=True)
            for sub, b in value.named_buffers():
                add(f"{name}.{sub}", b)
            for attr, v in (safe.instance_dict(value) or {}).items():
                if attr not in ("_parameters", "_buffers", "_modules"):
                    walk(f"{name}.{attr}", v, depth + 1)
        elif safe.is_instance(value, torch.optim.Optimizer):
            groups = (safe.instance_dict(value) or {}).get("param_groups", [])
            for g, group in enumerate(groups if safe.is_exactly(groups, (list,)) else []):
                params = group.get("params", []) if safe.is_exactly(group, (dict,)) else []
                for i, p in enumerate(params if safe.is_exactly(params, (list, tuple)) else []):
                    add(f"{name}.param_groups[{g}].params[{i}]", p)
        elif safe.is_exactly(value, (dict,)):
            for key, v in list(value.items()):
                if safe.is_exactly(key, (str, int)):
                    walk(f"{name}[{key!r}]", v, depth + 1)
        elif safe.is_exactly(value, (list, tuple)):
            for i, v in enumerate(list(value)):
                walk(f"{name}[{i}]", v, depth + 1)
        elif not safe.is_exactly(value, (str, bytes, int, float, bool, type(None))):
            attrs = safe.instance_dict(value)
            if attrs is not None and not isinstance(value, (type, types.ModuleType)):
                for attr, v in list(attrs.items()):
                    walk(f"{name}.{attr}", v, depth + 1)

    walk("module", model, 0)
    walk("engine", engine, 0)
    return out


def has_data(t: Any) -> bool:
    """Whether ``t``'s storage holds its elements: FSDP2 frees an unsharded parameter's storage after
    the step (the leaf its backward accumulated into), and reading it then crashes."""
    try:
        needed = (t.storage_offset() + t.numel()) * t.element_size()
        return bool(t.untyped_storage().nbytes() >= needed)
    except Exception:
        return False


def plain_copy(t: Any) -> Any:
    """A detached plain copy of ``t`` to compare: a ``DTensor`` (an FSDP2 parameter or its
    gradient) as its local shard, which ``torch.allclose`` can take."""
    t = t.detach()
    if callable(getattr(type(t), "to_local", None)):
        t = t.to_local()
    return t.clone()


def _leaves(model: Any, engine: Any, reached: Sequence[Any]) -> list[tuple[str, Any]]:
    """NOTE [Every gradient the step's backward reaches]: the named leaves, then each leaf the step's
    backward reached that no name was found for, named by the order the graph reached it (a leaf
    whose storage was freed, FSDP2's unsharded parameter, is compared through the sharded one its
    gradient went to)."""
    out = _named_leaves(model, engine)
    named = {id(t) for _, t in out}
    unnamed = 0
    for t in reached:
        if id(t) not in named and has_data(t):
            named.add(id(t))
            out.append(
                (f"leaf {unnamed} the step's backward reached (shape {list(safe.shape(t))})", t)
            )
            unnamed += 1
    return out


def capture(
    spec: EngineSpec, options: CheckOptions, *, detach_stores: Sequence[Any] = ()
) -> StepTensors:
    """Run one train step on a fresh tiny model (seed 0, micro-batch 0) and keep every parameter's
    gradient and value; raises :class:`~leakscope.errors.LeakscopeError` when the step fails.

    ``detach_stores``: holder paths whose store the step's own code makes is replaced, as it is
    made, by a detached copy (the fix "store a detached copy there", tried without editing a file).
    """
    import torch

    from leakscope.harness.distributed import process_group
    from leakscope.harness.guard import torch_state
    from leakscope.harness.run import build_subject, make_micro_batch, step_once
    from leakscope.harness.runtime import single_threaded

    changed: list[
        str
    ] = []  # torch state the engine left changed: restored, and no concern of a proof
    with torch_state(changed), process_group(options.device), single_threaded():
        # The same seed for the engine's own modules too (a critic it builds): both sides of a
        # comparison start from the same weights; the process's generator is left as it was.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model, engine = build_subject(spec, options)
        try:
            micro_batch = make_micro_batch(spec, options, 0)
            before_step = _leaves(model, engine, ())
            initial = {id(p): plain_copy(p) for _, p in before_step}
            reached: list[Any] = []
            if detach_stores:
                from leakscope.harness.stored import StoreTracer
                from leakscope.probe.library import is_library_file

                roots = {"engine": engine, "module": model, "micro_batch": micro_batch}
                tracer = StoreTracer(
                    list(detach_stores), roots, lambda f: not is_library_file(f), detach=True
                )
                tracer.install()
                try:
                    with _backward_roots(reached):
                        step_once(spec, engine, micro_batch, Mode.TRAIN, seed=0)
                finally:
                    tracer.remove()
                    roots.clear()
                if not tracer.detached:
                    raise EngineError("the store could not be replaced by a detached copy")
            else:
                with _backward_roots(reached):
                    step_once(spec, engine, micro_batch, Mode.TRAIN, seed=0)
            tensors: dict[str, Any] = {}
            with_grad = (
                0  # tensors that tell something: a gradient, or a value the step's update moved
            )
            for name, p in _leaves(model, engine, [*(t for _, t in before_step), *reached]):
                before = initial.get(id(p))
                value = plain_copy(p)
                moved = (
                    before is None or before.shape != value.shape or not torch.equal(before, value)
                )
                if p.grad is not None or moved:
                    with_grad += 1
                tensors[f"gradient of {name}"] = None if p.grad is None else plain_copy(p.grad)
                tensors[f"value of {name} after the step"] = value
            initial.clear()
            before_step.clear()
            reached.clear()
            del micro_batch
        finally:
            if spec.close_engine is not None:
                spec.close_engine(engine)
            del engine, model
    return StepTensors(tensors, with_grad)


def compare(
    before: StepTensors, after: StepTensors, *, what: str = "the edited step"
) -> GradientCheck:
    """Every tensor of ``before`` against ``after`` (NOTE [A fix is proven, not worded])."""
    import torch

    if before.with_grad == 0:
        return GradientCheck(
            error="the train step leaves no parameter gradient (nor an updated parameter) to compare"
        )
    worst, compared = 0.0, 0
    changed: str | None = None
    changed_by: float | None = None
    for name, a in before.tensors.items():
        b = after.tensors.get(name)
        compared += 1
        if a is None and b is None:
            continue
        if a is None or b is None or a.shape != b.shape:
            diff = math.inf
        else:
            delta = (a.double() - b.double()).abs()
            if torch.allclose(b, a, rtol=RTOL, atol=ATOL, equal_nan=True):
                worst = max(worst, float(delta.nan_to_num(0.0).max()) if delta.numel() else 0.0)
                continue
            diff = float(delta.nan_to_num(math.inf).max())
        if not math.isinf(diff):
            worst = max(worst, diff)
        if changed is None:
            changed, changed_by = name, None if math.isinf(diff) else diff
    missing = [name for name in after.tensors if name not in before.tensors]
    if changed is None and missing:
        changed = missing[0]
    return GradientCheck(compared=compared, max_diff=worst, changed=changed, changed_by=changed_by)


def step_error(exc: LeakscopeError) -> GradientCheck:
    """A step that could not run: the comparison says why."""
    return GradientCheck(error=exc.message)


__all__ = [
    "ATOL",
    "RTOL",
    "GradientCheck",
    "StepTensors",
    "capture",
    "compare",
    "graph_leaves",
    "has_data",
    "plain_copy",
    "edited_modules",
    "forget",
    "in_project",
    "outside",
    "step_error",
    "tolerance",
    "user_modules",
]
