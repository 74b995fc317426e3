"""The holder walk on real tensors and real containers: paths, no side effects, bounds."""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
from typing import Any, NamedTuple

import pytest
import torch
from tensordict import TensorDict

from leakscope.probe.release import release
from leakscope.probe.walk import Root, walk

pytestmark = pytest.mark.unit


def _paths(obj: Any, name: str = "output") -> list[str]:
    return [str(hit.path) for hit in walk([Root(name, obj, name)])]


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
        "output.d.k",
        "output.d[3]",
        "output.l[0]",
        "output.tu[1]",
        "output.nt.b",
        "output.dc.x",
        "output.ns.v",
        "output.sl.s",
        "output.dq[0]",
        "output.p.args[0]",
        "output.hook.fn_state[0]",
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


def _released(holder: Any) -> list[str]:
    """Walk ``holder``, release every hit by its detached self, return the paths."""
    hits = list(walk([Root("engine", holder, "engine")]))
    for hit in hits:
        release(hit.link, hit.obj.detach())
    return [str(hit.path) for hit in hits]


def test_weak_key_dictionary_values_are_held_and_released() -> None:
    import weakref

    key = torch.zeros(1)
    t = torch.ones(1, requires_grad=True) * 2
    cache: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary({key: t})
    values: weakref.WeakValueDictionary[Any, Any] = weakref.WeakValueDictionary({"v": t})
    assert _released({"cache": cache, "values": values}) == ["engine.cache[<Tensor>]"]
    assert cache[key].grad_fn is None  # values of a WeakValueDictionary are not holders


def test_suspended_generator_locals_are_held_and_released() -> None:
    t = torch.ones(1, requires_grad=True) * 2

    def deferred(x: torch.Tensor) -> Any:
        y = x + 0  # a local the frame keeps
        yield y.sum().item()

    started = deferred(t)
    unstarted = deferred(t)
    next(started)
    finished = deferred(t)
    list(finished)
    holder = {"started": started, "unstarted": unstarted, "finished": finished}
    assert _released(holder) == [
        "engine.started.gi_frame.f_locals['x']",
        "engine.started.gi_frame.f_locals['y']",
        "engine.unstarted.gi_frame.f_locals['x']",
    ]
    assert [str(h.path) for h in walk([Root("engine", holder, "engine")])] == [
        "engine.started.gi_frame.f_locals['x']",
        "engine.started.gi_frame.f_locals['y']",
        "engine.unstarted.gi_frame.f_locals['x']",
    ]
    assert all(h.obj.grad_fn is None for h in walk([Root("engine", holder, "engine")]))


def test_lru_cache_results_are_named_newest_last_and_released_by_cache_clear() -> None:
    @functools.lru_cache(maxsize=8)
    def bounded(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @functools.cache
    def unbounded(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    a, b = torch.ones(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    first, second = bounded(a), bounded(b)
    third = unbounded(a)
    holder = {"bounded": bounded, "unbounded": unbounded}
    hits = list(walk([Root("engine", holder, "engine")]))
    assert [(str(h.path), h.obj) for h in hits] == [
        ("engine.bounded.cache[-2]", first),
        ("engine.bounded.cache[-1]", second),
        ("engine.unbounded.cache[-1]", third),
    ]
    del first, second, third
    for hit in hits:
        release(hit.link, None)
    assert bounded.cache_info().currsize == 0 and unbounded.cache_info().currsize == 0


def test_tensor_hook_closures_are_walked_on_parameters_and_tensors() -> None:
    model = torch.nn.Linear(2, 2)
    attached = torch.ones(1, requires_grad=True) * 2
    handle = model.weight.register_hook(lambda g: g * attached)
    plain = torch.ones(2, requires_grad=True)
    plain.register_post_accumulate_grad_hook(lambda p: attached.sum())
    paths = [
        str(hit.path)
        for hit in walk([Root("module", model, "module"), Root("engine", [plain], "engine")])
    ]
    assert paths == [
        "module.weight._backward_hooks[0].attached",
        "engine[0]",
        "engine[0]._post_accumulate_grad_hooks[0].attached",
    ]
    handle.remove()
    assert [str(hit.path) for hit in walk([Root("module", model, "module")])] == []


def test_user_modules_named_like_skipped_libraries_are_walked() -> None:
    t = torch.ones(1)
    made = {
        name: type("Holder", (), {"__module__": name})()
        for name in ("reward_model", "replay.buffer", "iox", "re")
    }
    for holder in made.values():
        holder.kept = t  # type: ignore[attr-defined]
    paths = _paths(made)
    assert paths == ["output.reward_model.kept", "output['replay.buffer'].kept", "output.iox.kept"]


def test_tensor_dict_keys_are_held_and_rekeyed_on_release() -> None:
    key = torch.ones(1, requires_grad=True) * 2
    terms = {key: "l2", "plain": 1}
    assert _released({"terms": terms}) == ["engine.terms[<key Tensor>]"]
    (new_key,) = [k for k in terms if isinstance(k, torch.Tensor)]
    assert new_key.grad_fn is None and terms[new_key] == "l2" and key not in terms


def test_exception_args_and_traceback_frames_are_held_and_released() -> None:
    def check(values: torch.Tensor) -> None:
        raise ValueError("bad", values * 1)

    def step() -> Exception:
        kept = torch.ones(1, requires_grad=True) * 2
        try:
            check(kept)
        except ValueError as exc:
            return exc
        raise AssertionError

    error = step()
    paths = _released({"error": error})
    assert paths == [
        "engine.error.args[1]",
        "engine.error.__traceback__.tb_frame.f_locals['kept']",
        "engine.error.__traceback__.tb_next.tb_frame.f_locals['values']",
    ]
    assert error.args[1].grad_fn is None
    assert [h.obj.grad_fn for h in walk([Root("engine", {"error": error}, "engine")])] == [
        None,
        None,
        None,
    ]


def test_public_tensor_attributes_are_walked_private_ones_are_not() -> None:
    model = torch.nn.Linear(2, 2)
    attached = torch.ones(1, requires_grad=True) * 2
    model.weight.kfac_a = attached  # type: ignore[attr-defined]
    model.weight._private = attached  # type: ignore[attr-defined]
    a, b = torch.ones(1), torch.ones(1)
    a.other, b.other = b, a  # type: ignore[attr-defined]  # a cycle through tensor attributes
    paths = [
        str(h.path) for h in walk([Root("module", model, "module"), Root("engine", [a], "engine")])
    ]
    assert paths == [
        "module.weight.kfac_a",
        "engine[0]",
        "engine[0].other",
        "engine[0].other.other",
    ]


def test_references_to_one_tensor_are_named_once_per_slot() -> None:
    """NOTE [Each reference once]: 10^5 list entries or dict keys holding one tensor name it once,
    a 10^5-deep chain of containers holding it MAX_NAMED times; the rest are counted."""
    from leakscope.probe.walk import MAX_NAMED, WalkStats

    t = torch.ones(1, requires_grad=True) * 2
    n = 100_000
    chain: Any = t
    for _ in range(n):
        chain = [t, chain]
    for structure, references, paths in (
        ([t] * n, n, ["engine[0]"]),
        (dict.fromkeys(range(n), t), n, ["engine[0]"]),
        (
            {"a": t, "b": t, 3: t, 4: t},
            4,
            ["engine.a", "engine.b", "engine[3]"],
        ),  # named keys: slots of their own
        (chain, n + 1, ["engine[0]", *("engine" + "[1]" * i + "[0]" for i in range(1, MAX_NAMED))]),
    ):
        stats = WalkStats()
        assert [
            str(h.path) for h in walk([Root("engine", structure, "engine")], stats=stats)
        ] == paths
        assert stats.repeated == references - len(paths)


def test_the_walk_stops_at_its_time_budget_and_says_so() -> None:
    from leakscope.probe.walk import WalkStats

    stats = WalkStats()
    hits = list(
        walk(
            [Root("engine", [[torch.ones(1)] for _ in range(50_000)], "engine")],
            stats=stats,
            max_seconds=0,
        )
    )
    assert stats.truncated and stats.stopped_after == 0 and len(hits) < 50_000


def test_a_path_spelled_as_code_subscripts_mapping_keys_and_keeps_attributes() -> None:
    """The printed path reads ``.loss`` for a dict's key and an attribute alike; the code the fix
    texts quote tells them apart (``["loss"]`` for the dict, ``.loss`` for the object)."""

    class Step:
        def __init__(self, loss: torch.Tensor) -> None:
            self.loss = loss

    class Engine:
        def __init__(self) -> None:
            leaf = torch.ones(2, requires_grad=True)
            self.outputs = [{"loss": leaf * 2, "odd key": leaf * 3}]
            self.steps = [Step(leaf * 4)]

    engine = Engine()
    paths = {str(hit.path): hit.path.code() for hit in walk([Root("engine", engine, "engine")])}
    assert paths["engine.outputs[0].loss"] == 'self.outputs[0]["loss"]'
    assert paths["engine.outputs[0]['odd key']"] == "self.outputs[0]['odd key']"
    assert paths["engine.steps[0].loss"] == "self.steps[0].loss"
