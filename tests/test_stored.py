"""Stored at, the engine-side call site of helpers, and fixes derived from the storing line."""

from __future__ import annotations

import pytest

import leakscope
from leakscope.diagnose.storefix import StoreSite, fix_for
from leakscope.harness.stored import store_op
from leakscope.options import CheckOptions
from leakscope.results import Cause, Holder, Mode, Source
from tests.conftest import holder_path

pytestmark = pytest.mark.unit

TRAIN = CheckOptions(modes=(Mode.TRAIN,), confirm=False, micro_batches=1)


def _findings(target: str) -> dict[str, object]:
    (result,) = leakscope.check(target, TRAIN).results
    return {str(f.path): f for f in result.findings}


def _line(file: str, line: int) -> str:
    return open(file).read().splitlines()[line - 1].strip()


def test_stored_at_names_the_line_that_kept_each_tensor() -> None:
    found = _findings("fixtures.engine_attributes:Engine")
    want = {
        "engine.meter.sum": ("self.meter.sum = self.meter.sum + loss", "accumulate"),
        "engine.history[0]": ("self.history.append(entropy)", "append"),
        "engine.callback.args[0]": (
            "self.callback = functools.partial(_log, log_probs)",
            "attribute",
        ),
        "engine.last_logits": ("self.last_logits = logits", "attribute"),
    }
    for path, (code, op) in want.items():
        f = found[path]
        assert f.stored_at is not None and f.stored_at.file == "fixtures/engine_attributes.py", f  # type: ignore[attr-defined]
        assert (_line(f.stored_at.file, f.stored_at.line), f.store_op) == (code, op)  # type: ignore[attr-defined]
    assert (
        found["engine.history[0]"].hint.startswith(  # type: ignore[attr-defined]
            "at fixtures/engine_attributes.py:"
        )
        and "self.history.append(entropy.detach())" in found["engine.history[0]"].hint
    )  # type: ignore[attr-defined]


def test_created_at_in_a_shared_helper_shows_the_engine_side_call() -> None:
    f = _findings("fixtures.cached_logits:Engine")["engine.last_logits"]
    assert f.source.function == "logits_of"  # type: ignore[attr-defined]
    (site,) = f.called_from  # type: ignore[attr-defined]
    assert (site.file, site.function) == ("fixtures/_common.py", "forward_step")
    assert "logits_of(" in _line(site.file, site.line)
    assert _line(f.stored_at.file, f.stored_at.line) == "self.last_logits = logits"  # type: ignore[attr-defined]


def test_returned_tree_is_stored_by_the_return_and_names_no_verl_for_other_engines() -> None:
    f = _findings("fixtures.verl_bug:Engine")["output.model_output.entropy"]
    assert (
        f.store_op == "return"
        and _line(f.stored_at.file, f.stored_at.line) == "return loss, output"
    )  # type: ignore[attr-defined]
    assert 'detach output["model_output"]["entropy"] before it is returned' in f.hint  # type: ignore[attr-defined]
    assert "verl's fix" not in f.hint  # type: ignore[attr-defined]


def test_hook_and_global_stores() -> None:
    hook = _findings("fixtures.model_state:Engine")["module.blocks[1]._forward_hooks[0].store[0]"]
    assert hook.store_op == "hook" and "store.append(out.detach())" in hook.hint  # type: ignore[attr-defined]
    assert "detach inside the hook remember" in hook.hint  # type: ignore[attr-defined]


def test_clean_engine_has_nothing_traced() -> None:
    (result,) = leakscope.check("fixtures.cached_logits_clean:Engine", TRAIN).results
    assert result.verdict.value == "clean" and result.findings == ()


def test_fix_for_each_storing_operation() -> None:
    at = Source("e.py", 3, "keep")
    engine, returned = Holder.ENGINE, Holder.RETURNED
    assert (
        fix_for(
            StoreSite("append", "self.history.append(x)", at),
            holder_path("engine", "history", 0),
            engine,
            Cause.LEAF_GRAD,
            None,
        )
        == "at e.py:3 in keep: self.history.append(x.detach())"
    )
    assert (
        fix_for(
            StoreSite("attribute", "self.x = value", at),
            holder_path("engine", "x"),
            engine,
            Cause.LEAF_GRAD,
            None,
        )
        == "at e.py:3 in keep: self.x = value.detach() (or .item() for a scalar)"
    )
    assert "self.metric(loss.detach())" in fix_for(  # type: ignore[operator]
        StoreSite("metric", "self.metric(loss)", at),
        holder_path("engine", "metric", "_forward_cache"),
        engine,
        Cause.ACTIVATIONS,
        None,
    )
    assert fix_for(
        None,
        holder_path("output", "model_output", "log_probs"),
        returned,
        Cause.LEAF_GRAD,
        "verl-fsdp",
    ).endswith(  # type: ignore[union-attr]
        "(verl's fix, verl#6698: detach every model_output tensor that has a grad_fn in forward_step)"
    )
    # A container is stored and the graph is inside it: the fix names the tensor, not the container.
    assert fix_for(
        StoreSite("append", "output_lst.append(output)", at),
        holder_path("caller:t.py:main", "output_lst", 0, "model_output", "log_probs"),
        Holder.CALLER,
        Cause.LEAF_GRAD,
        None,
    ) == (
        'at e.py:3 in keep: output_lst.append(output) keeps output["model_output"]["log_probs"] with its graph:'
        ' detach it before it is stored (output["model_output"]["log_probs"] ='
        ' output["model_output"]["log_probs"].detach()), or store only the detached values needed'
    )
    # The outermost call's last argument, whole; a branch that is already a number stays as it is.
    assert fix_for(
        StoreSite("append", "METRICS.append(mae.item() if keep_item else mae)", at),
        holder_path("global:m", "METRICS", 0),
        Holder.GLOBAL,
        Cause.LEAF_GRAD,
        None,
    ) == ("at e.py:3 in keep: METRICS.append(mae.item() if keep_item else mae.detach())")
    assert fix_for(
        StoreSite("append", "type(self).seen.append(entropy)", at),
        holder_path("engine", "seen", 0),
        engine,
        Cause.LEAF_GRAD,
        None,
    ) == ("at e.py:3 in keep: type(self).seen.append(entropy.detach())")
    assert store_op(holder_path("engine", "x"), "self.register_buffer('x', t)") == "buffer"
    assert store_op(holder_path("engine", "d", "'k k'"), "self.d['k k'] = t") == "item"
    assert (
        store_op(holder_path("output", "model_output"), 'return loss, {"metrics": m}') == "return"
    )
