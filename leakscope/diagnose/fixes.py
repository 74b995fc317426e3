"""Fix hints that fit the holder and the cause (pure strings; no torch)."""

from __future__ import annotations

import re

from leakscope.paths import shorten

HOLDERS = {
    "output": "returned",
    "engine": "engine attribute",
    "micro_batch": "micro-batch",
    "module": "model attribute",
    "global": "module global",
    # leakscope watch: the loop that called the step, and the step's arguments
    "caller": "caller's frame",
    "argument": "argument",
}


def holder_kind(root_kind: str, in_hook: bool) -> str:
    """The holder label shown in reports."""
    if root_kind == "module" and in_hook:
        return "model hook"
    return HOLDERS.get(root_kind, root_kind)


def _leaf_name(path: str) -> str:
    tail = path.replace("[", ".[").split(".")[-1]
    return tail if tail.isidentifier() else "value"


_INDEX = re.compile(r"(\[[^\]]*\]|\{\})+$")


def _reference(path: str, root: str, alias: str) -> tuple[str, bool]:
    """``engine.meter.sum`` -> (``self.meter.sum``, False); ``engine.history[0]`` -> (``self.history``, True)."""
    rest = path[len(root):] if path.startswith(root) else path
    container = _INDEX.sub("", rest)
    return shorten(alias + container), container != rest


def _store(path: str, root: str, alias: str) -> str:
    ref, in_container = _reference(path, root, alias)
    if in_container:
        return f"put value.detach() into {ref} instead of the attached tensor (or .item() for scalars)"
    return f"{ref} = value.detach() (or .item() for scalars)"


_ROOT_ALIASES = (("engine", "self"), ("module", "model"), ("micro_batch", "micro_batch"), ("output", "output"))
_TENSOR_HOOK = re.compile(r"^(?P<owner>.*)\.(?:_backward_hooks|_post_accumulate_grad_hooks)\[\d+\](?P<rest>\.\w+)?$")
_FRAME_LOCAL = re.compile(r"^(?P<owner>.*)\.(?P<kind>gi|cr|ag)_frame\.f_locals\['(?P<name>[^']+)'\]")
_TRACEBACK = re.compile(r"^(?P<owner>.*?)\.__traceback__(?:\.tb_next)*\.tb_frame(?:\.f_back)*\.f_locals\['(?P<name>[^']+)'\]")
_LRU_RESULT = re.compile(r"^(?P<owner>.*)\.cache\[-\d+\]")
_DICT_KEY = re.compile(r"^(?P<owner>.*)\[<key \w+>\]$")
_SUSPENDED = {
    "gi": ("suspended generator", "yield detached values, or exhaust or close() it"),
    "cr": ("coroutine that was never awaited", "await it, or close() it"),
    "ag": ("suspended async generator", "yield detached values, or exhaust or aclose() it"),
}


def _code(path: str) -> str:
    """A report path as the engine's code spells it: ``engine.x`` -> ``self.x``."""
    if path.startswith("global:"):
        return shorten(path[len("global:"):])
    for root, alias in _ROOT_ALIASES:
        if path == root or path.startswith((root + ".", root + "[")):
            return shorten(alias + path[len(root):])
    return shorten(path)


def _special_hint(path: str) -> str | None:
    """Holders whose fix is not "store a detached value": hooks, generators, caches."""
    m = _TENSOR_HOOK.match(path)
    if m:
        captured = m.group("rest")[1:] if m.group("rest") else "value"
        return (
            f"a hook registered on {_code(m.group('owner'))} keeps {captured}, a tensor of this "
            f"step, in its closure: give the hook {captured}.detach() (or a float) instead, or "
            "remove the hook through its handle before the step returns"
        )
    m = _TRACEBACK.match(path)
    if m:
        return (
            f"the exception kept at {_code(m.group('owner'))} keeps the frames of its traceback "
            f"and their locals ({m.group('name')}, a tensor of this step): keep str(e), or "
            "e.with_traceback(None), or call traceback.clear_frames(e.__traceback__)"
        )
    m = _FRAME_LOCAL.match(path)
    if m:
        what, fix = _SUSPENDED[m.group("kind")]
        return (
            f"the {what} {_code(m.group('owner'))} keeps its local {m.group('name')} "
            f"(a tensor of this step) alive: {fix} before the step returns"
        )
    m = _DICT_KEY.match(path)
    if m:
        return (
            f"{_code(m.group('owner'))} uses a tensor of this step as a key: key it by something "
            "without a graph (an int, a string, or t.detach())"
        )
    m = _LRU_RESULT.match(path)
    if m:
        return (
            f"the functools.lru_cache on {_code(m.group('owner'))} keeps the tensors it returned, "
            "with their graphs: return a detached value from the cached function (or do not cache "
            "tensors that require grad); cache_clear() frees them"
        )
    return None


def hint_for(holder: str, cause: str, path: str) -> str:
    """One sentence: what to change so the caller stops holding this step's graph.

    Paths inside the sentence are shortened (:func:`shorten`); the finding keeps the full path.
    """
    special = _special_hint(path)
    if special is not None:
        return special
    name = _leaf_name(path)
    if holder == "returned":
        if cause == "activations":
            return (
                f"detach the returned tree after the loss is computed (verl's fix: {name}.detach()); "
                "compute logging-only values like entropy under torch.no_grad()"
            )
        return f"detach the returned tree after the loss is computed (verl's fix: {name}.detach())"
    if holder == "engine attribute":
        return f"keep only detached values on the engine: {_store(path, 'engine', 'self')}; accumulate loss.detach()"
    if holder == "micro-batch":
        return f"write only detached tensors into the micro-batch: micro_batch[{name!r}] = value.detach()"
    if holder == "model hook":
        return "detach inside the hook before storing: store.append(output.detach()), or use torch.no_grad() there"
    if holder == "model attribute":
        return f"keep only detached tensors on the model: {_store(path, 'module', 'model')}"
    if holder == "caller's frame":
        # caller:train.py:main.output_lst[0].x -> output_lst (the file name has dots too)
        head, bracket, _ = path.partition("[")
        ref = head.rsplit(".", 1)[-1] if "." in head.rsplit(":", 1)[-1] else "it"
        if bracket:
            return (
                f"the loop that calls the step keeps every call's result in {ref}: store detached values there "
                "(out.detach(), .item() for metrics), or return detached outputs from the step"
            )
        return f"the loop that calls the step keeps {ref} across calls: rebind it to a detached value (or del it) after backward"
    if holder == "argument":
        return f"the step's argument keeps a tensor of an earlier call: write only detached tensors into it ({shorten(path)})"
    if holder == "module global":
        ref, _ = _reference(path, "global:", "")
        return f"module-level state must hold detached tensors: put value.detach() into {ref or 'it'}, never the attached tensor"
    if cause == "until-gc":
        return "break the reference cycle that holds the graph (often a tensor stored on an object that points back at it)"
    return (
        "something outside the caller's objects holds this step's graph (a C++ hook, a closure in "
        "another module, a thread-local); run `leakscope explain` and look for what stores step tensors"
    )
