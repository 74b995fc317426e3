"""Whatever a job puts in ``sys.modules`` or its globals is read defensively (issue 24, item 5).

Cython registers plain objects in ``sys.modules`` (``cython.parallel``), and a module subclass can
shadow ``__dict__`` or answer every attribute with ``__getattr__``: the walk, the list of loaded
modules and the look's roots read them through :mod:`leakscope.probe.safe`, run none of their code,
and count what they cannot read instead of raising.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from leakscope.harness.observe import module_roots
from leakscope.probe import safe
from leakscope.probe.walk import Root, WalkStats, walk

pytestmark = pytest.mark.unit


class Hostile(types.ModuleType):
    """A module whose ``__dict__`` property and ``__getattr__`` raise, and count every call."""

    calls = 0

    @property  # type: ignore[misc]
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        type(self).calls += 1
        raise RuntimeError("__dict__ ran")

    def __getattr__(self, name: str) -> Any:
        type(self).calls += 1
        if name.startswith("__"):
            raise AttributeError(name)  # what torch's own ``hasattr(module, "__file__")`` expects
        raise RuntimeError(f"__getattr__ ran for {name}")


@pytest.fixture()
def loaded() -> Iterator[dict[str, Any]]:
    """A plain object, a hostile module and a ``None`` in ``sys.modules``, removed afterwards."""
    # Warm the walk first: its lazy imports (tensordict) run torch's own ``inspect.getmodule``,
    # which asks every module in ``sys.modules`` for ``__file__``; that is torch's code, not ours.
    list(walk([Root("output", [torch.ones(1)], "output")]))
    attached = torch.ones(2, requires_grad=True) * 3
    hostile = Hostile("leakscope_test_hostile")
    types.ModuleType.__setattr__(hostile, "kept", [attached])
    entries: dict[str, Any] = {
        "leakscope_test_plain": object(),
        "leakscope_test_hostile": hostile,
        "leakscope_test_none": None,
    }
    sys.modules.update(entries)
    Hostile.calls = 0
    try:
        yield {"attached": attached, **entries}
    finally:
        for name in entries:
            sys.modules.pop(name, None)


def test_loaded_modules_leave_out_plain_objects_and_read_hostile_modules_without_their_code(
    loaded: dict[str, Any],
) -> None:
    names = dict(safe.loaded_modules())
    assert "leakscope_test_plain" not in names and "leakscope_test_none" not in names
    assert names["leakscope_test_hostile"] is loaded["leakscope_test_hostile"]
    assert safe.module_name(loaded["leakscope_test_hostile"]) == "leakscope_test_hostile"
    assert safe.module_name(loaded["leakscope_test_plain"]) == ""
    assert safe.module_dict(object()) is None
    assert Hostile.calls == 0


def test_every_loaded_module_is_walked_and_the_hostile_one_names_its_graph(
    loaded: dict[str, Any],
) -> None:
    roots = module_roots()
    assert all(safe.module_dict(r.obj) is not None for r in roots)
    mine = [r for r in roots if r.name == "global:leakscope_test_hostile"]
    stats = WalkStats()
    paths = [str(hit.path) for hit in walk(mine, stats=stats)]
    assert paths == ["global:leakscope_test_hostile.kept[0]"]
    assert stats.errors == 0 and Hostile.calls == 0


def test_a_plain_object_given_as_a_module_root_is_counted_not_raised(
    loaded: dict[str, Any],
) -> None:
    stats = WalkStats()
    root = Root("global:leakscope_test_plain", loaded["leakscope_test_plain"], "global")
    after = Root("output", [loaded["attached"]], "output")
    paths = [str(hit.path) for hit in walk([root, after], stats=stats)]
    assert paths == ["output[0]"]  # the walk went on to the next root
    assert stats.errors == 1
    assert stats.first_error is not None and "where a module was expected" in stats.first_error


def test_a_closure_made_in_another_module_is_walked_from_the_global_that_keeps_it() -> None:
    made = types.ModuleType("leakscope_test_maker")
    exec(  # a factory defined in another module: its function's __module__ is not the holder's
        "def accumulator():\n"
        "    total = 0\n"
        "    def add(x):\n"
        "        nonlocal total\n"
        "        total = total + x\n"
        "        return total\n"
        "    return add\n",
        made.__dict__,
    )
    holder = types.ModuleType("leakscope_test_holder")
    holder.add = made.accumulator()  # type: ignore[attr-defined]
    holder.add(torch.ones(1, requires_grad=True) * 2)  # type: ignore[attr-defined]
    holder.plain = made.accumulator  # type: ignore[attr-defined]  # another module's plain function
    paths = [
        str(hit.path) for hit in walk([Root("global:leakscope_test_holder", holder, "global")])
    ]
    assert paths == ["global:leakscope_test_holder.add.total"]


def test_one_naming_rule_for_module_roots() -> None:
    """check's trial, watch's look and the generic walk name a module's globals by one rule
    (NOTE [One look]): a script's own namespace by its file, as the user wrote it; any other
    module as ``global:pkg.mod``. The root kind is the enum, and paths print the same way."""
    from leakscope.harness.observe import module_root
    from leakscope.holders import RootKind

    script = types.ModuleType("__main__")
    script.__file__ = "/job/train.py"
    script.total = torch.ones(2, requires_grad=True) * 2
    library = types.ModuleType("pkg.mod")
    library.cache = [torch.ones(2, requires_grad=True) * 3]
    roots = [module_root(script), module_root(library)]
    assert [(r.name, r.kind) for r in roots] == [
        ("train.py", RootKind.GLOBAL),
        ("global:pkg.mod", RootKind.GLOBAL),
    ]
    paths = sorted(str(hit.path) for hit in walk(roots) if safe.is_tensor(hit.obj))
    assert paths == ["global:pkg.mod.cache[0]", "train.py:total"]
    kinds = {hit.path.root_kind for hit in walk(roots)}
    assert kinds == {RootKind.GLOBAL}
    roots.clear()
