"""Fix hints derived from the holder path and the cause (pure strings; no torch).

Each hint names the exact reference to change, read from the typed
:class:`~leakscope.holders.HolderPath` (never by re-parsing its string form).
Paths inside a hint are shortened (:func:`~leakscope.holders.shorten`); the
finding keeps the full path.
"""

from __future__ import annotations

from leakscope.holders import SUSPENDED_FRAMES, HolderPath, SegmentKind
from leakscope.results import Cause, Holder

_TENSOR_HOOK_DICTS = ("_backward_hooks", "_post_accumulate_grad_hooks")
_SUSPENDED = {
    "gi": ("suspended generator", "yield detached values, or exhaust or close() it"),
    "cr": ("coroutine that was never awaited", "await it, or close() it"),
    "ag": ("suspended async generator", "yield detached values, or exhaust or aclose() it"),
}


def _named(path: HolderPath, kind: SegmentKind, names: tuple[str, ...]) -> int | None:
    """The index of the last segment of ``kind`` whose name is one of ``names``."""
    for i in range(len(path.segments) - 1, -1, -1):
        segment = path.segments[i]
        if segment.kind is kind and segment.name in names:
            return i
    return None


def grad_hint(path: HolderPath, filled_at: str = "") -> str:
    """A ``.grad`` that keeps a graph (NOTE [A gradient that keeps a graph]): its line is the backward
    itself, so no detach there is a fix (detaching the loss would leave no gradient at all)."""
    owner = path.prefix(len(path.segments) - 1).code()
    if "<" in owner or ":" in owner:  # reached through a key or a caller's frame: no spelling
        slot, reset = "a parameter's .grad", "p.grad = None for each parameter"
    else:
        slot, reset = f"{owner}.grad", f"{owner}.grad = None"
    return (
        f"{slot} has a graph of its own: a backward with create_graph=True{filled_at} made the"
        " gradient differentiable, and it keeps that graph until the slot is reset:"
        f" reset it once the update has used it ({reset}, or"
        " optimizer.zero_grad(set_to_none=True) right after optimizer.step()), or run backward"
        " without create_graph where no second-order gradient is taken (torch.autograd.grad fills"
        " no .grad); never detach the loss there, which would leave no gradient"
    )


def _special_hint(path: HolderPath) -> str | None:
    """Holders whose fix is not "store a detached value": hooks, frames, keys, caches."""
    segments = path.segments
    hook = _named(path, SegmentKind.HOOKS, _TENSOR_HOOK_DICTS)
    if hook is not None:
        rest = segments[hook + 2 :]
        captured = str(rest[0].name) if rest and isinstance(rest[0].name, str) else "value"
        return (
            f"a hook registered on {path.prefix(hook).code()} keeps {captured}, a tensor of this "
            f"step, in its closure: give the hook {captured}.detach() (or a float) instead, or "
            "remove the hook through its handle before the step returns"
        )
    local = path.last(SegmentKind.LOCAL)
    if local is not None:
        name = segments[local].name
        traceback = _named(path, SegmentKind.ATTR, ("__traceback__",))
        if traceback is not None:
            return (
                f"the exception kept at {path.prefix(traceback).code()} keeps the frames of its traceback "
                f"and their locals ({name}, a tensor of this step): keep str(e), or "
                "e.with_traceback(None), or call traceback.clear_frames(e.__traceback__)"
            )
        frame = _named(path, SegmentKind.ATTR, tuple(SUSPENDED_FRAMES))
        if frame is not None:
            what, fix = _SUSPENDED[SUSPENDED_FRAMES[str(segments[frame].name)]]
            return (
                f"the {what} {path.prefix(frame).code()} keeps its local {name} "
                f"(a tensor of this step) alive: {fix} before the step returns"
            )
    if segments and segments[-1].kind is SegmentKind.KEY_OBJECT:
        return (
            f"{path.prefix(len(segments) - 1).code()} uses a tensor of this step as a key: key it by "
            "something without a graph (an int, a string, or t.detach())"
        )
    if (
        segments
        and segments[-1].kind in (SegmentKind.ATTR, SegmentKind.KEY)
        and segments[-1].name == "_forward_cache"
    ):
        # torchmetrics' Metric.forward (and Lightning's logged copy of a metric) keeps its last result here.
        return (
            f"{path.prefix(len(segments) - 1).code()} is a torchmetrics metric (or Lightning's logged copy of "
            "one): calling it keeps the value it computed, graph and all, in _forward_cache until the next "
            "call; feed it a detached value (self.train_loss(loss.detach())), or call .update() instead"
        )
    if path.grad_slot():
        return grad_hint(path)
    cache = path.last(SegmentKind.CACHE)
    if cache is not None:
        return (
            f"the functools.lru_cache on {path.prefix(cache).code()} keeps the tensors it returned, "
            "with their graphs: return a detached value from the cached function (or do not cache "
            "tensors that require grad); cache_clear() frees them"
        )
    if path.root == "global:gc" and segments and segments[0].name == "garbage":
        # NOTE [The collector's own lists] in leakscope/harness/observe.py
        return (
            "gc.garbage keeps what the cyclic collector found unreachable, this step's graph with "
            "it: the job set gc.set_debug(gc.DEBUG_SAVEALL) (turn it off outside a debugging "
            "session, or empty gc.garbage after reading it), or an object the collector cannot "
            "free sits in a reference cycle with a tensor of this step (break the cycle)"
        )
    call = path.last(SegmentKind.CALL)
    if call is not None:
        var = path.prefix(call).code()
        return f"the context variable {var} holds a tensor of this step: {var}.set() a detached value instead"
    return None


def _store(path: HolderPath) -> str:
    """How to store a detached value at ``path``'s reference, as the engine's code spells it."""
    container = path.container()
    if container != path:
        return f"put value.detach() into {container.code()} instead of the attached tensor (or .item() for scalars)"
    return f"{path.code()} = value.detach() (or .item() for scalars)"


def _hook_hint(path: HolderPath) -> str:
    """A forward/backward hook on the model that stores this step's tensors."""
    hooks = path.last(SegmentKind.HOOKS)
    if hooks is None or hooks + 1 >= len(path.segments):
        return f"detach inside the hook that stores into {path.code()}, or run it under torch.no_grad()"
    hook = path.prefix(hooks + 2).code()
    rest = path.segments[hooks + 2 :]
    store = str(rest[0].name) if rest and isinstance(rest[0].name, str) else "its state"
    return (
        f"the hook {hook} stores a tensor of this step in {store}: detach inside the hook before "
        f"storing (put output.detach() into {store}), or run it under torch.no_grad()"
    )


def hint_for(
    holder: Holder, cause: Cause, path: HolderPath, *, adapter: str | None = None, rate: int = 0
) -> str:
    """One sentence: what to change so the caller stops holding this step's graph."""
    special = _special_hint(path)
    if special is not None:
        return special
    name = path.leaf_name()
    if holder is Holder.RETURNED:  # one wording, with or without the stored-at line
        from leakscope.diagnose.storefix import fix_for

        return fix_for(None, path, holder, cause, adapter) or ""
    if holder is Holder.ENGINE:
        return f"keep only detached values on the engine: {_store(path)}; accumulate loss.detach()"
    if holder is Holder.MICRO_BATCH:
        return f"write only detached tensors into the micro-batch: micro_batch[{name!r}] = value.detach()"
    if holder is Holder.MODEL_HOOK:
        return _hook_hint(path)
    if holder is Holder.MODEL:
        return f"keep only detached tensors on the model: {_store(path)}"
    if holder is Holder.GLOBAL:
        return f"module-level state must hold detached tensors: {_store(path)}, never the attached tensor"
    if holder is Holder.CALLER:
        # caller:train.py:main.output_lst[0].x -> output_lst
        name = str(path.segments[0].name) if path.segments else "it"
        if any(s.kind is SegmentKind.INDEX for s in path.segments[1:2]):
            return (
                f"the loop that calls the step keeps every call's result in {name}: store detached values there "
                "(out.detach(), .item() for metrics), or return detached outputs from the step"
            )
        return f"the loop that calls the step keeps {name} across calls: rebind it to a detached value (or del it) after backward"
    if holder is Holder.ARGUMENT:
        return f"the step's argument keeps a tensor of an earlier call: write only detached tensors into it ({path.code()})"
    if holder is Holder.CYCLE and path.segments:  # NOTE [Cycles through autograd]
        attr = str(path.segments[0]).lstrip(".")
        return (
            f"uncollectable reference cycle through autograd: a tensor's attribute {attr} holds a "
            "tensor computed from that tensor, whose graph saved it back; the cyclic garbage "
            "collector cannot free it (the way back runs through autograd's C++ graph), so it lives "
            f"until the process ends: store a detached value (t.{attr} = value.detach()) or "
            f"del t.{attr} after backward"
        )
    if holder is Holder.CYCLE:
        return "break the reference cycle that holds the graph (often a tensor stored on an object that points back at it)"
    if holder is Holder.STORAGE_GROWTH:
        return (
            f"{path.code()} grows by about {rate} bytes per micro-batch without any graph: "
            "bound it (a deque with maxlen, clear it per batch) or keep scalars (.item())"
        )
    return (
        "no reference reachable from what the caller keeps (the output, the engine, the micro-batch, "
        "the model, module globals) holds this graph, so it sits where Python cannot look: a C++ "
        "hook, an extension's state, or another thread's locals; run `leakscope explain` and look "
        "for what stores step tensors"
    )


__all__ = ["hint_for"]
