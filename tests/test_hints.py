"""Fix hints name the line of code to change, in the engine's own spelling."""

from __future__ import annotations

from leakscope.diagnose.fixes import hint_for


def test_plain_holders_store_a_detached_value() -> None:
    assert "self.history" in hint_for("engine attribute", "activations", "engine.history[2]")
    assert "model.cache = value.detach()" in hint_for("model attribute", "activations", "module.cache")
    assert "verl's fix: entropy.detach()" in hint_for("returned", "activations", "output.model_output.entropy")


def test_tensor_hook_closure() -> None:
    hint = hint_for("model hook", "activations", "module.blocks[0].up.weight._backward_hooks[0].scale")
    assert hint.startswith("a hook registered on model.blocks[0].up.weight keeps scale")
    assert "scale.detach()" in hint and "handle" in hint
    post = hint_for("engine attribute", "activations", "engine.w._post_accumulate_grad_hooks[1].scale")
    assert "self.w" in post and "scale.detach()" in post
    # a module hook that appends to a list gets the model-hook advice instead
    stores = hint_for("model hook", "activations", "module.blocks[1]._backward_hooks[0].store[0]")
    assert stores.startswith("detach inside the hook before storing")


def test_generator_local() -> None:
    hint = hint_for("engine attribute", "activations", "engine.pending[0].gi_frame.f_locals['entropy']")
    assert hint.startswith("the suspended generator self.pending[0] keeps its local entropy")
    assert "close()" in hint
    coroutine = hint_for("engine attribute", "activations", "engine.pending[0].cr_frame.f_locals['entropy']")
    assert coroutine.startswith("the coroutine that was never awaited self.pending[0]") and "await it" in coroutine


def test_exception_traceback_and_dict_key() -> None:
    hint = hint_for(
        "engine attribute", "activations", "engine.last_error.__traceback__.tb_next.tb_frame.f_locals['logits']"
    )
    assert hint.startswith("the exception kept at self.last_error keeps the frames of its traceback")
    assert "logits" in hint and "with_traceback(None)" in hint
    key = hint_for("engine attribute", "activations", "engine.terms[<key Tensor>]")
    assert key.startswith("self.terms uses a tensor of this step as a key")


def test_lru_cache_result() -> None:
    hint = hint_for("module global", "activations", "global:pkg.mod.token_weights.cache[-1]")
    assert hint.startswith("the functools.lru_cache on pkg.mod.token_weights keeps")
    assert "cache_clear()" in hint


def test_a_list_named_cache_is_not_an_lru_cache() -> None:
    hint = hint_for("engine attribute", "activations", "engine.cache[0]")
    assert "lru_cache" not in hint and "self.cache" in hint


def test_very_deep_paths_are_shortened_in_hints_not_in_findings() -> None:
    from leakscope.paths import shorten

    deep = "engine.tree" + ".next" * 3000 + ".val[0]"
    hint = hint_for("engine attribute", "activations", deep)
    assert len(hint) < 400 and " ... " in hint and "self.tree.next" in hint and ".val" in hint
    assert shorten("engine.x") == "engine.x"
    assert len(shorten(deep)) <= 160 and shorten(deep).endswith(".val[0]")


def test_torchmetrics_forward_cache() -> None:
    hint = hint_for("engine attribute", "leaf+grad", "engine.train_loss._forward_cache")
    assert hint.startswith("self.train_loss is a torchmetrics metric")
    assert "loss.detach()" in hint and ".update()" in hint
    logged = hint_for(
        "engine attribute", "leaf+grad", "engine._trainer.fit_loop.epoch_loop._results['training_step.train/loss']._forward_cache"
    )
    assert "Lightning's logged copy" in logged and "loss.detach()" in logged
