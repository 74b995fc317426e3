"""Fuzz the holder walk: arbitrary nesting of every container kind, hostile objects, cycles.

The walk must never raise, never call user code (properties, ``__getattr__``,
``__eq__``, ``__hash__``), terminate on cycles, and find every tensor with a
``grad_fn`` planted anywhere in the structure.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from leakscope.probe.walk import Root, walk

pytestmark = pytest.mark.unit

#: every call into user code the walk makes lands here (it must stay empty)
CALLS: list[str] = []


@dataclasses.dataclass
class DC:
    a: Any
    b: Any = None


class NT(NamedTuple):
    a: Any
    b: Any


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a = a
        self.b = b


class Hostile:
    """Every hook the walk could be tempted to call records itself and raises."""

    def __init__(self, a: Any, b: Any) -> None:
        self.__dict__["a"] = a
        self.__dict__["b"] = b

    @property
    def tensor(self) -> Any:
        CALLS.append("property")
        return torch.ones(1, requires_grad=True) * 3

    def __getattr__(self, name: str) -> Any:
        CALLS.append(f"__getattr__({name})")
        raise RuntimeError("hostile __getattr__")

    def __getattribute__(self, name: str) -> Any:
        if name not in ("__dict__", "__class__"):
            CALLS.append(f"__getattribute__({name})")
        return object.__getattribute__(self, name)

    def __eq__(self, other: object) -> bool:
        CALLS.append("__eq__")
        raise RuntimeError("hostile __eq__")

    def __hash__(self) -> int:
        CALLS.append("__hash__")
        raise RuntimeError("hostile __hash__")

    def __iter__(self) -> Any:
        CALLS.append("__iter__")
        raise RuntimeError("hostile __iter__")

    def __len__(self) -> int:
        CALLS.append("__len__")
        raise RuntimeError("hostile __len__")


class HostileDict(dict):  # type: ignore[type-arg]
    """A dict subclass whose Python-level accessors are booby-trapped."""

    def items(self) -> Any:
        CALLS.append("items")
        raise RuntimeError("hostile items")

    def __iter__(self) -> Any:
        CALLS.append("dict.__iter__")
        raise RuntimeError("hostile __iter__")

    def __getitem__(self, key: Any) -> Any:
        CALLS.append("__getitem__")
        raise RuntimeError("hostile __getitem__")


class HostileList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        CALLS.append("list.__iter__")
        raise RuntimeError("hostile __iter__")


@dataclasses.dataclass
class Built:
    obj: Any
    planted: list[torch.Tensor]
    containers: list[Any]


LEAVES = st.sampled_from(["grad", "plain", "int", "str", "none", "param"])
Tree = Any


def trees() -> st.SearchStrategy[Tree]:
    kinds = st.sampled_from(
        [
            "dict",
            "list",
            "tuple",
            "set",
            "frozenset",
            "td",
            "dc",
            "nt",
            "slots",
            "hostile",
            "hdict",
            "hlist",
        ]
    )
    return st.recursive(
        LEAVES,
        lambda children: st.tuples(kinds, st.lists(children, max_size=4)),
        max_leaves=40,
    )


def _leaf(kind: str, built: Built) -> Any:
    if kind == "grad":
        t = torch.ones(2, requires_grad=True) * 2
        built.planted.append(t)
        return t
    return {
        "plain": lambda: torch.zeros(2),
        "int": lambda: 7,
        "str": lambda: "s",
        "none": lambda: None,
        "param": lambda: torch.nn.Parameter(torch.ones(1)),
    }[kind]()


def _tensor_only(values: list[Any]) -> list[Any]:
    return [
        v
        for v in values
        if isinstance(v, (torch.Tensor, TensorDict)) and not isinstance(v, torch.nn.Parameter)
    ]


def build(tree: Tree, built: Built) -> Any:
    if isinstance(tree, str):
        return _leaf(tree, built)
    kind, kids = tree
    if kind in ("set", "frozenset"):
        # Only hashable-by-identity members (tensors); other planted kids are not built.
        values = [build(k, built) for k in kids if k in ("grad", "plain")]
        return set(values) if kind == "set" else frozenset(values)
    if kind == "td":
        values = _tensor_only(
            [
                build(k, built)
                for k in kids
                if k in ("grad", "plain") or (isinstance(k, tuple) and k[0] == "td")
            ]
        )
        return TensorDict({f"k{i}": v for i, v in enumerate(values)}, batch_size=[])
    values = [build(k, built) for k in kids]
    pair = (values + [None, None])[:2]
    extra = values[2:]
    if kind == "dict":
        obj: Any = (
            {("k" if i % 2 else i): v for i, v in enumerate(values)}
            if len(values) < 3
            else {f"k{i}": v for i, v in enumerate(values)}
        )
        built.containers.append(obj)
        return obj
    if kind == "list":
        built.containers.append(values)
        return values
    if kind == "tuple":
        return tuple(values)
    if kind == "dc":
        return DC(pair[0], [pair[1], *extra])
    if kind == "nt":
        return NT(pair[0], [pair[1], *extra])
    if kind == "slots":
        return Slotted(pair[0], [pair[1], *extra])
    if kind == "hostile":
        return Hostile(pair[0], [pair[1], *extra])
    if kind == "hdict":
        hd = HostileDict({f"k{i}": v for i, v in enumerate(values)})
        built.containers.append(hd)
        return hd
    hl = HostileList(values)
    built.containers.append(hl)
    return hl


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), cycles=st.lists(st.integers(min_value=0, max_value=50), max_size=4))
def test_walk_finds_every_planted_graph_tensor_and_touches_nothing(
    tree: Tree, cycles: list[int]
) -> None:
    built = Built(None, [], [])
    root = build(tree, built)
    # Close cycles back to the root (and to other containers) from some containers.
    for i, n in enumerate(cycles):
        if built.containers:
            holder = built.containers[n % len(built.containers)]
            target = root if i % 2 == 0 else built.containers[(n + 1) % len(built.containers)]
            if isinstance(holder, dict):
                dict.__setitem__(holder, f"cycle{i}", target)
            else:
                list.append(holder, target)
    CALLS.clear()
    hits = list(walk([Root("output", root, "output")]))
    assert CALLS == []
    found = {
        id(h.obj) for h in hits if isinstance(h.obj, torch.Tensor) and h.obj.grad_fn is not None
    }
    assert found == {id(t) for t in built.planted}
    for hit in hits:
        assert str(hit.path).startswith("output")
        assert not isinstance(hit.obj, torch.nn.Parameter)


def test_a_hostile_object_as_the_root_and_deep_hostile_chains() -> None:
    t = torch.ones(1, requires_grad=True) * 2
    chain: Any = Hostile(t, None)
    for _ in range(5_000):
        chain = Hostile(chain, HostileDict(x=chain))
    CALLS.clear()
    paths = [str(h.path) for h in walk([Root("engine", chain, "engine")])]
    assert CALLS == []
    assert paths[0] == "engine" + ".a" * 5_001
