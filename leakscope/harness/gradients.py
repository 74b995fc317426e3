"""One train step's gradients, recorded and compared: the evidence that an edit keeps training as it was.

Used by the judge (a detached store that keeps every gradient, NOTE [Fixes that never break
training]) and by ``leakscope fix`` (NOTE [A fix is proven, not worded] in ``leakscope/fix/__init__.py``).

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
import math
import types
from collections.abc import Iterator, Sequence
from typing import Any

from leakscope.errors import EngineError, LeakscopeError
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


def record_train_step(
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


def unedited_error(first: StepTensors, second: StepTensors, *, what: str, alike: str) -> str | None:
    """Why no edit can be proven against the unedited ``what`` (``step``, ``job``) run twice with
    ``alike`` (the same seed and micro-batch, the same seeds): the two runs cannot be compared, or
    they differ, so a changed gradient could not be told from noise. None when they agree, or when
    neither ran a backward (a job with nothing to compare: NOTE [A script's fix is proven by
    re-running it])."""
    if not first.tensors and not second.tensors:
        return None
    again = compare(first, second)
    if again.error is not None:
        return again.error
    if again.changed is not None:
        return (
            f"the unedited {what}'s {again.changed} differs between two runs with {alike}: the {what}"
            " is not deterministic, so a changed gradient could not be told from noise"
        )
    return None


def step_error(exc: LeakscopeError) -> GradientCheck:
    """A step that could not run: the comparison says why."""
    return GradientCheck(error=exc.message)


__all__ = [
    "ATOL",
    "RTOL",
    "GradientCheck",
    "StepTensors",
    "record_train_step",
    "compare",
    "graph_leaves",
    "has_data",
    "plain_copy",
    "step_error",
    "tolerance",
    "unedited_error",
]
