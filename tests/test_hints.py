"""Fix hints name the reference to change, in the engine's own spelling, read from the typed
path the walk found on real objects (never from a hand-written string)."""

from __future__ import annotations

import functools
import types
from typing import Any

import pytest
import torch

from leakscope.diagnose.findings import holder_of
from leakscope.diagnose.fixes import hint_for
from leakscope.holders import HolderPath, shorten
from leakscope.probe.walk import Root, walk
from leakscope.results import Cause, Holder

pytestmark = pytest.mark.unit


def _attached() -> torch.Tensor:
    return torch.ones(2, requires_grad=True) * 2


def path_of(root: str, obj: Any, target: Any) -> HolderPath:
    """The path the holder walk names for ``target`` under ``root``."""
    for hit in walk([Root(root, obj, root.partition(":")[0])]):
        if hit.obj is target:
            return hit.path
    raise AssertionError(f"{target!r} not reached from {root}")


def hint(
    root: str, obj: Any, target: Any, cause: Cause = Cause.ACTIVATIONS, adapter: str | None = None
) -> str:
    path = path_of(root, obj, target)
    return hint_for(holder_of(path), cause, path, adapter=adapter)


def test_plain_holders_store_a_detached_value() -> None:
    t = _attached()
    engine = types.SimpleNamespace(history=[None, None, t])
    assert "put value.detach() into self.history" in hint("engine", engine, t)
    model = torch.nn.Linear(2, 2)
    model.cache = t  # type: ignore[assignment]
    assert "model.cache = value.detach()" in hint("module", model, t)


def test_returned_hint_names_the_path_and_mentions_verl_only_for_verl() -> None:
    t = _attached()
    output = {"model_output": {"entropy": t}}
    plain = hint("output", output, t)
    assert plain.startswith('detach output["model_output"]["entropy"] before it is returned'), plain
    assert "verl" not in plain
    assert "verl's fix" in hint("output", output, t, adapter="verl-fsdp")


def test_tensor_hook_closure() -> None:
    model = torch.nn.Linear(2, 2)
    scale = _attached()
    model.weight.register_hook(lambda g: g * scale)
    text = hint("module", model, scale)
    assert text.startswith("a hook registered on model.weight keeps scale")
    assert "scale.detach()" in text and "handle" in text


def test_module_hook_that_stores_names_the_hook_and_its_store() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    store: list[Any] = []
    model[0].register_forward_hook(lambda m, i, o: store.append(o))
    t = _attached()
    store.append(t)
    path = path_of("module", model, t)
    assert holder_of(path) is Holder.MODEL_HOOK
    text = hint_for(Holder.MODEL_HOOK, Cause.ACTIVATIONS, path)
    assert text.startswith(
        "the hook model[0]._forward_hooks[0] stores a tensor of this step in store"
    )


def test_generator_local() -> None:
    def gen(x: torch.Tensor) -> Any:
        entropy = x * 2
        yield entropy.sum()

    pending = gen(torch.ones(2, requires_grad=True))
    next(pending)
    engine = types.SimpleNamespace(pending=[pending])
    entropy = pending.gi_frame.f_locals["entropy"]
    text = hint("engine", engine, entropy)
    assert text.startswith("the suspended generator self.pending[0] keeps its local entropy")
    assert "close()" in text


def test_exception_traceback_and_dict_key() -> None:
    def fail(x: torch.Tensor) -> None:
        logits = x * 3
        raise ValueError(logits.shape)

    engine = types.SimpleNamespace(last_error=None, terms={})
    try:
        fail(torch.ones(2, requires_grad=True))
    except ValueError as exc:
        engine.last_error = exc
    logits = engine.last_error.__traceback__.tb_next.tb_frame.f_locals["logits"]
    text = hint("engine", engine, logits)
    assert text.startswith(
        "the exception kept at self.last_error keeps the frames of its traceback"
    )
    assert "logits" in text and "with_traceback(None)" in text
    key = _attached()
    engine.terms[key] = 1.0
    engine.last_error = None
    assert hint("engine", engine, key).startswith("self.terms uses a tensor of this step as a key")


def test_lru_cache_result() -> None:
    @functools.lru_cache(maxsize=4)
    def token_weights(n: int) -> torch.Tensor:
        return torch.ones(n, requires_grad=True) * 2

    t = token_weights(3)
    engine = types.SimpleNamespace(token_weights=token_weights)
    text = hint("engine", engine, t)
    assert text.startswith("the functools.lru_cache on self.token_weights keeps")
    assert "cache_clear()" in text
    token_weights.cache_clear()


def test_a_list_named_cache_is_not_an_lru_cache() -> None:
    t = _attached()
    engine = types.SimpleNamespace(cache=[t])
    text = hint("engine", engine, t)
    assert "lru_cache" not in text and "self.cache" in text


def test_very_deep_paths_are_shortened_in_hints_not_in_findings() -> None:
    t = _attached()
    node: Any = types.SimpleNamespace(val=[t])
    for _ in range(3000):
        node = types.SimpleNamespace(next=node)
    engine = types.SimpleNamespace(tree=node)
    path = path_of("engine", engine, t)
    text = hint_for(Holder.ENGINE, Cause.ACTIVATIONS, path)
    assert len(text) < 400 and " ... " in text and "self.tree.next" in text and ".val" in text
    assert str(path).endswith(".val[0]") and len(str(path)) > 3000
    assert shorten("engine.x") == "engine.x"
    assert len(shorten(str(path))) <= 160 and shorten(str(path)).endswith(".val[0]")


class _Metric:
    """Shaped like a torchmetrics metric after ``forward``: it keeps its last value."""

    def __init__(self, value: torch.Tensor) -> None:
        self._forward_cache = value


def test_torchmetrics_forward_cache() -> None:
    t = _attached()
    engine = types.SimpleNamespace(
        train_loss=_Metric(t), _results={"training_step.train/loss": _Metric(t * 1)}
    )
    text = hint("engine", engine, t)
    assert text.startswith("self.train_loss is a torchmetrics metric")
    assert "loss.detach()" in text and ".update()" in text
    logged = hint("engine", engine, engine._results["training_step.train/loss"]._forward_cache)
    assert (
        "Lightning's logged copy" in logged
        and "self._results['training_step.train/loss']" in logged
    )


def test_a_gradient_with_a_graph_says_create_graph_and_how_to_reset_it() -> None:
    w = torch.nn.Parameter(torch.ones(2))
    (w * w).sum().backward(create_graph=True)  # a second-order trick: .grad has a grad_fn
    engine = types.SimpleNamespace(temperature=w)
    assert w.grad is not None and w.grad.grad_fn is not None
    text = hint("engine", engine, w.grad)
    assert text.startswith(
        "self.temperature.grad has a graph of its own: a backward with create_graph=True"
    )
    assert "self.temperature.grad = None, or optimizer.zero_grad(set_to_none=True)" in text
    assert "value.detach()" not in text  # never "store a detached value" into .grad


def test_state_of_an_object_the_loop_holds_is_named_not_the_loop_variable() -> None:
    """A loop's ``self`` whose attribute keeps the graph (neuromancer's ``Variable._value``): the hint
    names that attribute as the object's state, not "rebind self"; a plain loop variable still reads
    as one."""
    t = _attached()
    trainer = types.SimpleNamespace(
        model=types.SimpleNamespace(var=types.SimpleNamespace(_value=t))
    )
    text = hint("caller:trainer.py:Trainer.train", {"self": trainer}, t)
    assert text.startswith("self.model.var._value, state of the object the loop holds in self"), (
        text
    )
    assert "rebind" not in text
    loose = hint("caller:train.py:main", {"hidden": t}, t)
    assert "keeps hidden across calls: rebind it" in loose


def test_a_subscripted_tensor_is_detached_and_a_container_never() -> None:
    """``losses.append(output[key])`` (neuromancer#292's line) is rewritten with the subscript
    detached; a literal container never gets ``.detach()``."""
    from leakscope.diagnose.storefix import StoreSite, rewrite
    from leakscope.results import Source

    where = Source("trainer.py", 257, "train")
    t = _attached()
    path = path_of("caller:trainer.py:Trainer.train", {"losses": [t]}, t)
    stored = rewrite(StoreSite("append", "losses.append(output[self.train_metric])", where), path)
    assert stored == "losses.append(output[self.train_metric].detach())"
    assert rewrite(StoreSite("append", "losses.append([a, b])", where), path) is None
