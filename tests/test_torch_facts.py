"""The torch behaviours leakscope's probes build on (docs: ../shared/reference/autograd-retention.md).

If a torch release changes one of these, these tests say which.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from leakscope.probe.autograd import (
    UINT64_MAX,
    graph_tensors,
    saved_values,
    sequence_nr,
    storage_nbytes,
)

pytestmark = pytest.mark.unit


def test_raw_saved_data_is_the_tensor_then_none_after_backward() -> None:
    x = torch.randn(3, requires_grad=True)
    y = x.exp()
    ((slot, data),) = list(saved_values(y.grad_fn))
    assert slot == "result" and isinstance(data, torch.Tensor)
    y.sum().backward()
    assert list(saved_values(y.grad_fn)) == []


def test_checkpoint_saves_holders_not_tensors() -> None:
    x = torch.randn(2, 4, requires_grad=True)
    lin = torch.nn.Linear(4, 4)
    y = checkpoint(lambda a: torch.tanh(lin(a)), x, use_reentrant=False)
    kinds = {type(d).__name__ for _, d in saved_values(y.grad_fn)}
    assert kinds == {"_Holder"}


def test_sequence_numbers_grow_and_accumulate_grad_is_max() -> None:
    x = torch.randn(2, requires_grad=True)
    a = x * 2
    b = a * 3
    assert sequence_nr(b.grad_fn) > sequence_nr(a.grad_fn)
    acc = a.grad_fn.next_functions[0][0]
    assert sequence_nr(acc) == UINT64_MAX


def test_held_output_keeps_leaf_and_grad_after_backward() -> None:
    emb = torch.randn(2, 4)
    x = emb.clone().requires_grad_(True)
    probe = weakref.ref(x)
    lin = torch.nn.Linear(4, 4)
    out = checkpoint(lin, x, use_reentrant=False)
    out.sum().backward()
    del x
    gc.collect()
    assert probe() is not None and probe().grad is not None
    _, found = graph_tensors([out.grad_fn])
    assert {g.slot for g in found} >= {"variable", "variable.grad"}
    del found
    out = out.detach()
    gc.collect()
    assert probe() is None


def test_views_are_sized_by_their_whole_storage() -> None:
    base = torch.zeros(1000)
    assert storage_nbytes(base[:10]) == 4000
