"""Hostile engines: leakscope reads what an engine keeps without running the engine's code.

Each ``fixtures/bad/hostile_*`` module hides its state behind one kind of Python hook (a
``__dict__`` property, a metaclass ``__getattribute__``, a failing descriptor, a tensor
subclass's ``__torch_function__`` or properties, an endless mapping, a failing ``__hash__``).
The hooks record every call made outside the engine's own methods
(``fixtures.bad._hostility.CALLS``) and fail, as a hook that loops would stop a check. Each
module's ``Engine`` must get exactly its ``EXPECTED`` verdicts with no hook run, as its
``Plain`` twin (no hooks) does, and its ``Clean`` look-alike (the same hooks, detached state)
must be clean.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import leakscope
from fixtures.bad import _hostility
from leakscope.options import CheckOptions
from leakscope.results import Report

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = [
    "hostile_dict_property",
    "hostile_metaclass",
    "hostile_descriptor",
    "hostile_torch_function",
    "hostile_tensor_properties",
    "hostile_mapping",
    "hostile_eq_hash",
]
CLEAN = {"train": ("clean", []), "forward-only": ("clean", [])}


def _check(target: str) -> Report:
    _hostility.CALLS.clear()
    report = leakscope.check(target, CheckOptions())
    assert _hostility.CALLS == [], f"{target}: leakscope ran {_hostility.CALLS}"
    return report


def _verdicts(report: Report) -> dict[str, tuple[str, list[str]]]:
    for result in report.results:
        assert result.error is None, result.error
        for finding in result.findings:
            assert finding.confirmed, f"{finding.path} was not confirmed"
    return {
        r.mode.value: (r.verdict.value, [str(f.path) for f in r.findings]) for r in report.results
    }


def _want(expected: dict[str, tuple[str, list[str]]]) -> dict[str, tuple[str, list[str]]]:
    return {mode: (verdict, list(paths)) for mode, (verdict, paths) in expected.items()}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_engine_gets_its_verdict_and_no_hook_runs(name: str) -> None:
    module = importlib.import_module(f"fixtures.bad.{name}")
    hostile = _check(f"fixtures.bad.{name}:Engine")
    plain = _check(f"fixtures.bad.{name}:Plain")
    assert _verdicts(hostile) == _want(module.EXPECTED)
    assert _verdicts(plain) == _want(getattr(module, "PLAIN_EXPECTED", module.EXPECTED))
    # The hooks hide nothing: the same kinds and bytes as the plain twin.
    assert [(r.kind, r.retained_bytes) for r in hostile.results] == [
        (r.kind, r.retained_bytes) for r in plain.results
    ]
    assert _verdicts(_check(f"fixtures.bad.{name}:Clean")) == CLEAN


def test_hostile_metaclass_engine_in_an_isolated_check_exits_1_with_its_findings() -> None:
    """Before: the adapters read ``Engine.__mro__`` through the metaclass, and the child died."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakscope",
            "check",
            "fixtures.bad.hostile_metaclass:Engine",
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert [
        (r["mode"], r["verdict"], [f["path"] for f in r["findings"]]) for r in doc["results"]
    ] == [
        (
            "train",
            "leak",
            ["engine.kept", "global:fixtures.bad.hostile_metaclass.Engine.history[0]"],
        ),
        ("forward-only", "clean", []),
    ]
    assert "Traceback" not in out.stderr


def test_a_million_references_to_one_tensor_are_one_finding_each() -> None:
    """10^5 list entries and 10^5 dict keys holding one tensor each: two findings, confirmed (before:
    one finding per reference, each described and confirmed)."""
    from fixtures.bad import many_references

    assert _verdicts(_check("fixtures.bad.many_references:Engine")) == _want(
        many_references.EXPECTED
    )
    assert _verdicts(_check("fixtures.bad.many_references:Clean")) == CLEAN


def test_the_walk_stops_at_its_time_budget_with_a_warning_in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a child process to kill (``--no-isolate``), the walk's own time budget bounds it."""
    from leakscope.probe import walk

    monkeypatch.setattr(walk, "WALK_SECONDS", 0.0)
    report = leakscope.check(
        "fixtures.bad.many_references:Engine",
        CheckOptions(modes=(leakscope.Mode.TRAIN,), micro_batches=1),
    )
    (result,) = report.results
    assert result.error is None
    assert "the holder walk stopped after 0 s; some holders may be unnamed" in result.warnings


def test_an_error_a_tensor_subclass_raises_names_the_subclass_and_its_path() -> None:
    """What leakscope cannot read without the subclass's code, it names: the subclass, the method
    that raised, and where the engine keeps it (instead of "leakscope failed ... please report it")."""
    from fixtures.bad.hostile_torch_function import Guarded
    from leakscope.probe.walk import Root, walk
    from leakscope.runner.inprocess import unexpected

    kept = torch.ones(2).as_subclass(Guarded)
    engine = {"x": kept}
    assert [str(hit.path) for hit in walk([Root("engine", engine, "engine")])] == ["engine.x"]
    _hostility.CALLS.clear()
    with pytest.raises(_hostility.HostileCall) as raised:
        kept.grad_fn  # noqa: B018 - a plain read runs __torch_function__, as leakscope's own would
    assert _hostility.CALLS == ["Guarded.__torch_function__(__get__)"]
    _hostility.CALLS.clear()
    assert unexpected(raised.value) == (
        "engine.x is a Guarded whose __torch_function__ raised HostileCall: leakscope ran "
        "Guarded.__torch_function__(__get__); leakscope reads tensors without calling it where it can; make "
        "Guarded.__torch_function__ work outside the engine's step, or keep a plain tensor there"
    )
    assert (
        unexpected(ValueError("x"))
        == "leakscope failed while checking: ValueError: x; please report it with --debug output"
    )


def test_reads_of_hostile_objects_run_nothing() -> None:
    """The helpers every stage reads through (leakscope.probe.safe), on the hostile fixtures' objects."""
    from fixtures.bad import (
        hostile_descriptor,
        hostile_dict_property,
        hostile_eq_hash,
        hostile_metaclass,
        hostile_tensor_properties,
    )
    from leakscope.probe import safe

    _hostility.CALLS.clear()
    engine: Any = hostile_dict_property.Engine.__new__(hostile_dict_property.Engine)
    object.__setattr__(engine, "kept", 1)
    assert safe.instance_dict(engine) == {"kept": 1}
    meta = hostile_metaclass.Engine
    assert safe.mro(meta) == (meta, object) and safe.type_name(meta) == "Engine"
    assert safe.type_module(meta) == "fixtures.bad.hostile_metaclass"
    assert (
        type(safe.class_dict(meta)["history"]) is list and safe.class_attr(meta, "detach") is False
    )
    assert safe.is_subtype(meta, object) and not safe.is_instance(engine, dict)
    masked = hostile_descriptor.Masked(1)
    assert not safe.is_instance(masked, hostile_descriptor.Record) and safe.is_instance(
        masked, hostile_descriptor.Masked
    )
    assert safe.plain_hash(hostile_descriptor.Record(1)) and not safe.plain_hash(
        hostile_eq_hash.Touchy("k")
    )
    t = torch.Tensor._make_subclass(hostile_tensor_properties.Prickly, torch.ones(2), True)
    assert safe.is_tensor(t) and not safe.is_parameter(t)
    assert (
        safe.grad_fn(t),
        safe.requires_grad(t),
        safe.shape(t),
        safe.dtype(t),
        safe.device(t),
    ) == (
        None,
        True,
        (2,),
        "float32",
        "cpu",
    )
    assert safe.storage(t) is not None and safe.tensor_hooks(t) == []
    assert _hostility.CALLS == []


def test_the_security_doc_shows_what_leakscope_prints_for_a_hostile_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from leakscope.cli import app

    monkeypatch.setenv("LEAKSCOPE_NODE_BYTES", "746")  # as docs/gen.py makes every example
    doc = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    block = next(
        b for b in re.findall(r"```text\n(.*?)```", doc, re.S) if "hostile_dict_property" in b
    )
    result = CliRunner().invoke(
        app,
        [
            "check",
            "fixtures.bad.hostile_dict_property:Engine",
            "fixtures.bad.hostile_dict_property:Clean",
            "--mode",
            "train",
            "--no-isolate",
        ],
    )
    assert result.exit_code == 1
    shown = "\n".join(
        line.rstrip() for line in result.stdout.split("\n")[2:]
    )  # after the version line
    assert shown == block


def test_tensor_reads_run_no_torch_function_mode_the_engine_left_on() -> None:
    """A torch-function mode still on (an engine that entered one and never left it) sees none of
    leakscope's reads, of plain tensors included."""
    from torch.overrides import TorchFunctionMode

    from leakscope.probe import safe

    seen: list[str] = []

    class Recording(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    leaf = torch.ones(2, requires_grad=True)
    out = leaf * 2
    with Recording():
        reads = (
            safe.grad_fn(out) is not None,
            safe.requires_grad(leaf),
            safe.shape(out),
            safe.storage(out) is not None,
        )
        kept = safe.detached(out)
    assert reads == (True, True, (2,), True) and kept is not None and safe.grad_fn(kept) is None
    assert seen == []
