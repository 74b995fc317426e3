"""The holder walk on real tensors and real containers: paths, no side effects, bounds."""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
from typing import Any, NamedTuple

import torch
from tensordict import TensorDict

from leakscope.walk import Root, release, walk


def _paths(obj: Any, name: str = "output") -> list[str]:
    return [hit.path for hit in walk([Root(name, obj, name)])]


@dataclasses.dataclass
class DC:
    x: Any


class NT(NamedTuple):
    a: Any
    b: Any


class Slotted:
    __slots__ = ("s",)

    def __init__(self, s: Any) -> None:
        self.s = s


def test_paths_through_every_container_kind() -> None:
    t = torch.ones(1)
    fn_state = [t]

    def hook() -> None:
        fn_state.append(1)

    structure = {
        "d": {"k": t, 3: t},
        "l": [t],
        "tu": (0, t),
        "nt": NT(1, t),
        "dc": DC(t),
        "ns": types.SimpleNamespace(v=t),
        "sl": Slotted(t),
        "dq": collections.deque([t]),
        "p": functools.partial(print, t),
        "hook": hook,
        "td": TensorDict({"a": TensorDict({"b": t}, batch_size=[])}, batch_size=[]),
    }
    assert _paths(structure) == [
        "output.d.k", "output.d[3]", "output.l[0]", "output.tu[1]", "output.nt.b", "output.dc.x",
        "output.ns.v", "output.sl.s", "output.dq[0]", "output.p.args[0]", "output.hook.fn_state[0]",
        "output.td.a.b",
    ]


def test_properties_and_getattr_are_never_called() -> None:
    calls = []

    class Sneaky:
        def __init__(self) -> None:
            self.inner = torch.ones(1)

        @property
        def boom(self) -> Any:
            calls.append("property")
            return torch.ones(1)

        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            raise RuntimeError("no")

        def __eq__(self, other: object) -> bool:
            raise RuntimeError("eq")

        def __hash__(self) -> int:
            raise RuntimeError("hash")

    assert _paths([Sneaky()]) == ["output[0].inner"]
    assert calls == []


def test_cycles_and_deep_nesting_terminate() -> None:
    a: dict[str, Any] = {"t": torch.ones(1)}
    a["self"] = a
    deep: Any = torch.ones(1)
    for _ in range(20_000):
        deep = [deep]
    assert _paths(a) == ["output.t"]
    (path,) = _paths(deep)
    assert path == "output" + "[0]" * 20_000


def test_parameters_are_not_hits_and_max_objects_bounds_the_walk() -> None:
    param = torch.nn.Parameter(torch.ones(1))
    assert _paths([param, torch.ones(1)]) == ["output[1]"]
    wide = [[torch.ones(1)] for _ in range(1000)]
    assert len(list(walk([Root("output", wide, "output")], max_objects=10))) < 10


def test_release_replaces_in_place_and_rebuilds_tuples() -> None:
    t = torch.ones(1, requires_grad=True) * 2
    holder = {"pair": NT(0, t), "lst": [t], "p": functools.partial(print, t)}
    hits = list(walk([Root("output", holder, "output")]))
    for hit in hits:
        release(hit.link, hit.obj.detach())
    assert holder["pair"].b.grad_fn is None and isinstance(holder["pair"], NT)
    assert holder["lst"][0].grad_fn is None
    assert holder["p"].args[0].grad_fn is None
