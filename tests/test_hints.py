"""Fix hints name the line of code to change, in the engine's own spelling."""

from __future__ import annotations

from leakscope.hints import hint_for


def test_plain_holders_store_a_detached_value() -> None:
    assert "self.history" in hint_for("engine attribute", "activations", "engine.history[2]")
    assert "model.cache = value.detach()" in hint_for("model attribute", "activations", "module.cache")
    assert "verl's fix: entropy.detach()" in hint_for("returned", "activations", "output.model_output.entropy")


def test_tensor_hook_closure() -> None:
    hint = hint_for("model hook", "activations", "module.blocks[0].up.weight._backward_hooks[0].scale")
    assert hint.startswith("a hook registered on model.blocks[0].up.weight (register_hook) keeps scale")
    assert "scale.detach()" in hint and "handle" in hint
    post = hint_for("engine attribute", "activations", "engine.w._post_accumulate_grad_hooks[1].keywords.x")
    assert "self.w" in post and "x.detach()" in post


def test_generator_local() -> None:
    hint = hint_for("engine attribute", "activations", "engine.pending[0].gi_frame.f_locals['entropy']")
    assert hint.startswith("the suspended generator self.pending[0] keeps its local entropy")
    assert "close()" in hint


def test_lru_cache_result() -> None:
    hint = hint_for("module global", "activations", "global:pkg.mod.token_weights.cache[-1]")
    assert hint.startswith("the functools.lru_cache on pkg.mod.token_weights keeps")
    assert "cache_clear()" in hint


def test_a_list_named_cache_is_not_an_lru_cache() -> None:
    hint = hint_for("engine attribute", "activations", "engine.cache[0]")
    assert "lru_cache" not in hint and "self.cache" in hint
