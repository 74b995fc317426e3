"""``graph.graph_tensors``: every saved slot shape, grouped, on real autograd graphs."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from leakscope.probe.autograd import ACTIVATIONS, CTX, LEAF_GRAD, graph_tensors

pytestmark = pytest.mark.unit


def _groups(roots: list[Any], **kwargs: Any) -> tuple[int, dict[tuple[str, str, str], list[Any]]]:
    count, found = graph_tensors(roots, **kwargs)
    return count, {(g.cause, g.node, g.slot): g.tensors for g in found}


def test_one_slot_chain_groups_every_saved_tensor() -> None:
    x = torch.zeros(3, requires_grad=True)
    y = x
    for _ in range(5):
        y = torch.tanh(y)
    count, groups = _groups([y.grad_fn])
    assert count == 6  # five TanhBackward0 and the AccumulateGrad
    saved = groups[(ACTIVATIONS, "TanhBackward0", "result")]
    assert len(saved) == 5
    # the last tanh saves its own output (a handle on the same storage)
    assert y.data_ptr() in {t.data_ptr() for t in saved}
    assert groups[(LEAF_GRAD, "AccumulateGrad", "variable")] == [x]


def test_several_slots_and_leaf_grad() -> None:
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    h = a * 2
    out = h @ b
    out.sum().backward(retain_graph=True)
    _, groups = _groups([out.grad_fn])
    assert set(groups) >= {
        (ACTIVATIONS, "MmBackward0", "self"),
        (ACTIVATIONS, "MmBackward0", "mat2"),
        (LEAF_GRAD, "AccumulateGrad", "variable"),
        (LEAF_GRAD, "AccumulateGrad", "variable.grad"),
    }
    assert groups[(ACTIVATIONS, "MmBackward0", "mat2")] == [b]
    assert {id(g) for g in groups[(LEAF_GRAD, "AccumulateGrad", "variable.grad")]} == {
        id(a.grad),
        id(b.grad),
    }
    _, no_leaves = _groups([out.grad_fn], with_leaves=False)
    assert not any(cause == LEAF_GRAD for cause, _, _ in no_leaves)


def test_tuple_slot_is_indexed() -> None:
    a = torch.zeros(4, 4, requires_grad=True)
    rows, cols = torch.tensor([1, 2]), torch.tensor([0, 3])
    out = torch.index_put(a * 1, (rows, cols), torch.ones(2))
    _, groups = _groups([out.grad_fn])
    (held_rows,) = groups[(ACTIVATIONS, "IndexPutBackward0", "indices[0]")]
    (held_cols,) = groups[(ACTIVATIONS, "IndexPutBackward0", "indices[1]")]
    assert torch.equal(held_rows, rows) and torch.equal(held_cols, cols)


def test_ctx_attributes_of_a_custom_function() -> None:
    class Stash(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.kept = x * 3  # stored on ctx, not via save_for_backward
            ctx.scale = 3.0
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad * 2

    x = torch.ones(2, requires_grad=True)
    out = Stash.apply(x)
    _, groups = _groups([out.grad_fn])
    (kept,) = groups[(CTX, "StashBackward", "ctx.kept")]
    assert torch.equal(kept, torch.full((2,), 3.0))
    assert not any(slot == "ctx.scale" for _, _, slot in groups)


def test_a_stop_predicate_leaves_older_graphs_out() -> None:
    old = torch.ones(2, requires_grad=True).exp()  # built before the "step"
    seq = int(old.grad_fn._sequence_nr())
    new = (old * 5).sin()
    _, everything = _groups([new.grad_fn])
    assert (ACTIVATIONS, "ExpBackward0", "result") in everything
    _, this_step = _groups([new.grad_fn], stop=lambda node: int(node._sequence_nr()) <= seq)
    assert (ACTIVATIONS, "SinBackward0", "self") in this_step
    assert (ACTIVATIONS, "ExpBackward0", "result") not in this_step
    assert not any(cause == LEAF_GRAD for cause, _, _ in this_step)  # behind the older graph


def test_parameters_are_not_reported_and_freed_slots_are_skipped() -> None:
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    out = lin(x).relu().sum()
    _, before = _groups([out.grad_fn])
    for tensors in before.values():
        assert not any(isinstance(t, torch.nn.Parameter) for t in tensors)
    out.backward()  # frees every saved slot
    _, after = _groups([out.grad_fn])
    assert not any(cause == ACTIVATIONS for cause, _, _ in after)
