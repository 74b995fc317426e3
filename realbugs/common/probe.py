"""Leakscope-free evidence of graph retention, used by every ``realbugs/<bug>/confirm.py``.

Nothing here imports leakscope: the suite's verdicts must stand on their own.

- :class:`LeafProbe` ties a step's autograd graph to a Python object whose lifetime can be
  watched. A forward pre-hook (or a wrapped instance ``forward``, for modules whose ``__call__``
  skips nn.Module hooks, as gpytorch's do) multiplies the module's first floating-point input by
  a fresh scalar leaf ``torch.ones((), requires_grad=True)`` on every grad-enabled call: the
  value is unchanged (x * 1), but every graph built from that forward now reaches the leaf
  through its AccumulateGrad node. Only a weakref to the leaf is kept, so it dies as soon as
  the last graph node that reaches it is freed; a leaf of an earlier step still alive after
  ``gc.collect()`` means something still holds part of that step's graph (its root, a side
  branch, or any tensor derived from its loss).
- :func:`graph_nodes` and :func:`saved_bytes` walk ``grad_fn.next_functions`` from the tensors
  of the holder named in the bug's NOTES.md: how many autograd nodes it keeps, and the bytes
  those nodes still pin (tensors saved for backward that backward has not freed, read through
  the ``_raw_saved_*`` handles without unpacking them, and non-Parameter leaves with their
  grads). 0 saved bytes with nodes > 0 is a *nodes-only* retention: backward freed the saved
  tensors but every node (and every leaf it reaches) stays.
- :func:`live_graph_nodes`: the same walk from every live tensor, whoever holds it.
- :func:`verdict`: ``leak`` when the probe series grows about one per step, ``clean`` when it
  never exceeds one (the previous step's graph, which a framework may hold until the next step).
- :func:`bounded_verdict`: the same question asked when the next step's forward begins, where
  even the previous step's graph counts (bounded retention: it raises the peak by one step's
  graph) and ``clean`` means none is alive.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import torch


class LeafProbe:
    """A fresh scalar leaf multiplied into one module's input on every grad-enabled forward."""

    def __init__(self, module: torch.nn.Module, patch_forward: bool = False) -> None:
        self.refs: list[weakref.ref[torch.Tensor]] = []
        self._handle = None
        if patch_forward:
            original = module.forward

            def forward(*args: Any, **kwargs: Any) -> Any:
                changed = self._hook(module, args, kwargs)
                if changed is not None:
                    args, kwargs = changed
                return original(*args, **kwargs)

            module.forward = forward  # type: ignore[method-assign]
        else:
            self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        if not torch.is_grad_enabled():
            return None
        for i, arg in enumerate(args):
            if isinstance(arg, torch.Tensor) and arg.is_floating_point():
                leaf = torch.ones((), dtype=arg.dtype, device=arg.device, requires_grad=True)
                self.refs.append(weakref.ref(leaf))
                return (*args[:i], arg * leaf, *args[i + 1:]), kwargs
        return None

    def alive(self, upto: int | None = None) -> int:
        """How many probe leaves (of the first ``upto`` forwards, default all) are still alive
        once the garbage collector has run."""
        gc.collect()
        refs = self.refs if upto is None else self.refs[:upto]
        return sum(1 for ref in refs if ref() is not None)


def _tensors(obj: Any, depth: int = 0, seen: set[int] | None = None) -> Iterator[torch.Tensor]:
    """The tensors in ``obj`` and the dicts, lists, tuples, sets and deques nested in it."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in list(obj.values()):
            yield from _tensors(value, depth + 1, seen)
    elif isinstance(obj, (list, tuple, set)) or type(obj).__name__ == "deque":
        for value in list(obj):
            yield from _tensors(value, depth + 1, seen)


def _walk(obj: Any) -> Iterator[Any]:
    """Every distinct autograd node reachable from the tensors in ``obj``, once each."""
    seen: set[int] = set()
    keep = []  # the node wrappers stay alive during the walk, so that ids stay unique
    stack = [t.grad_fn for t in _tensors(obj) if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        keep.append(node)
        seen.add(id(node))
        yield node
        stack.extend(nxt for nxt, _ in node.next_functions if nxt is not None)


def graph_nodes(obj: Any) -> int:
    """Distinct autograd nodes reachable from the tensors in ``obj`` (nested containers)."""
    return sum(1 for _ in _walk(obj))


def live_graph_nodes() -> int:
    """Distinct autograd nodes reachable from every tensor the garbage collector tracks, after a
    collection: what the whole process keeps of every graph, whoever holds it."""
    gc.collect()
    tensors = [obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor) and obj.grad_fn is not None]
    try:
        return graph_nodes(tensors)
    finally:
        tensors.clear()


def _storage(t: torch.Tensor) -> tuple[int, int]:
    """(data_ptr, nbytes) of a tensor's storage; (0, numel * itemsize) where it has none that
    can be read (functorch wrappers, sparse, meta)."""
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return 0, t.numel() * t.element_size()


def saved_bytes(obj: Any) -> dict[str, int]:
    """Bytes still pinned by the graph reachable from ``obj``: ``saved_activation_bytes`` (tensors
    saved for backward and not freed) and ``leaf_bytes`` (non-Parameter leaves and their grads,
    held by AccumulateGrad nodes), storage-deduplicated, with the node count."""
    activations = leaves = nodes = 0
    ptrs: set[int] = set()

    def count(t: torch.Tensor) -> int:
        ptr, nbytes = _storage(t)
        if ptr and ptr in ptrs:
            return 0
        ptrs.add(ptr)
        return nbytes

    for node in _walk(obj):
        nodes += 1
        if node.name() == "torch::autograd::AccumulateGrad":
            variable = getattr(node, "variable", None)
            if variable is not None and not isinstance(variable, torch.nn.Parameter):
                leaves += sum(count(t) for t in (variable, variable.grad) if t is not None)
            continue
        for attr in dir(node):
            if not attr.startswith("_raw_saved_"):
                continue
            try:
                handles = getattr(node, attr)
            except RuntimeError:  # a saved variable released by backward
                continue
            for handle in handles if isinstance(handles, (list, tuple)) else [handles]:
                data = getattr(handle, "data", None)
                if isinstance(data, torch.Tensor) and not isinstance(data, torch.nn.Parameter):
                    activations += count(data)
    return {"nodes": nodes, "saved_activation_bytes": activations, "leaf_bytes": leaves}


def attr_tensors(obj: Any, depth: int = 5, seen: set[int] | None = None) -> list[torch.Tensor]:
    """The tensors with a ``grad_fn`` reachable from ``obj`` through attributes, dicts, lists,
    tuples, sets and deques, ``depth`` levels deep."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.grad_fn is not None else []
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
        items = list(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = list(vars(obj).values())
    else:
        return []
    return [t for item in items for t in attr_tensors(item, depth - 1, seen)]


def verdict(series: list[int], steps: int) -> str:
    """``series[k]``: probe leaves of earlier steps alive at the start of step k + 1 (and once
    after the last step). ``leak``: never falls and ends at ``steps - 1`` or more (at least 2);
    ``clean``: never above 1; ``unknown`` otherwise."""
    if not series:
        return "unknown"
    if max(series) <= 1:
        return "clean"
    if series[-1] >= max(2, steps - 1) and all(b >= a for a, b in zip(series, series[1:])):
        return "leak"
    return "unknown"


def bounded_verdict(series: list[int]) -> tuple[str, str]:
    """(verdict, kind) from ``series[k]``: probe leaves of earlier steps alive when step k + 2's
    forward begins (a forward pre-hook), the moment a retained graph adds to the peak. ``leak``,
    ``bounded``: the previous step's graph, and only it, is alive every time; ``leak``,
    ``growing``: one more every step; ``clean``: none ever is; ``unknown`` otherwise."""
    if not series:
        return "unknown", "-"
    if max(series) == 0:
        return "clean", "-"
    if min(series) == 1 and max(series) == 1:
        return "leak", "bounded"
    if series == list(range(1, len(series) + 1)):
        return "leak", "growing"
    return "unknown", "-"


def report(name: str, series: list[int], extra: dict[str, Any], expect: str | None, steps: int) -> int:
    """Print the evidence and the verdict; exit status 0 when the verdict is ``expect`` (or none
    was asked for), 1 otherwise."""
    observed = verdict(series, steps)
    print(f"[{name}] probe leaves of earlier steps still alive, per step: {series}")
    for key, value in extra.items():
        print(f"[{name}] {key}: {value}")
    print(f"[{name}] observed: {observed}" + (f"  (expected: {expect})" if expect else ""))
    return 0 if expect is None or observed == expect else 1
