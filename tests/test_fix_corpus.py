"""``leakscope fix --apply`` on every fixture of the suite, on copies: each leaky engine of the fixture
corpus (``fixtures.corpus()``) and each plain training script of ``fixtures/watch/scripts/`` is made
clean with unchanged gradients, or fix says in one line why no edit is safe for what it leaves
(and writes no edit for it); no clean look-alike gets an edit. A fixture added to either catalogue is covered here
without a line changed: it is classified by its own ``EXPECTED`` (engines) or by ``--clean`` (scripts).

Cost: the engines are fixed by one ``fix`` run per mode over all the leaky ones and one over the
clean ones (a second run, on a fresh copy, only for the few whose verified edit shares a line of
``fixtures/_common.py`` with another's: fix writes one and says "run fix again", or with 3
micro-batches for a leak one does not show), re-checked by one ``check`` run per copy, and their
gradients recomputed by one plain script per copy; a script is one ``fix`` run (the job re-run inside it),
one ``watch`` after, and one ``fix --clean``.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leakscope.fix.candidates import CARRY_NOTE
from tests.conftest import FIXTURES, ROOT, fixture_modules, fixture_target

pytestmark = pytest.mark.integration

SCRIPTS = FIXTURES / "watch" / "scripts"
#: the scripts' own step count, kept small (the proof compares the first 3 backward calls)
STEPS = ("--steps", "4")
FAST = ("--no-confirm", "--jobs", "2")
#: the line ``--apply`` adds when another verified edit of the run rewrites the same line first
AGAIN = "not applied: another verified edit rewrites"

#: leaky fixtures where some holder has no safe edit: each fix that is not verified and written
#: says why in one line, containing one of these
NO_SAFE_EDIT: dict[str, tuple[str, ...]] = {
    "critic_wrapper": ("the step's loss is computed from the stored tensor",),
    # stored only in a later micro-batch than the one whose stores are traced: no line to rewrite
    "every_other": ("no line was traced storing it",),
    "periodic_log": ("no line was traced storing it",),
    "gc_off": ("a reference cycle keeps the graph",),
    "grad_graph": ("a leaf's .grad holds a graph",),
    "loss_reads_stored": ("the step's loss is computed from the stored tensor",),
    "lru_cache": ("functools.lru_cache keeps what the cached function returned",),
    "node_holder": ("a graph node itself is kept",),
    "output_containers": (
        "the returned container keeps it inside an object no single expression rebuilds detached",
        AGAIN,
    ),
    "pending_coroutine": ("a suspended generator or coroutine keeps its frame's locals",),
    "pending_generator": ("a suspended generator or coroutine keeps its frame's locals",),
    "stored_exception": ("a stored exception's traceback keeps its frames' locals",),
    "tensor_hook": ("a hook's closure keeps the tensor",),
    "unknown_holder": ("no holder of the graph was found",),
    "weak_key_cache": ("kept under a key that is an object",),
    # scripts: the RNN's carried state, whose detach truncates backpropagation through time, and the
    # loss line's detach, which the proof shows cuts a gradient
    # scripts: a backward(create_graph=True)'s gradients kept into the next step (reset, not detach)
    "second_order": ("a leaf's .grad holds a graph",),
    "rnn_stream": (CARRY_NOTE, "not verified: the edit changes the gradient of "),
}


def _expected(name: str) -> dict[str, tuple[str, list[str]]]:
    expected: dict[str, tuple[str, list[str]]] = importlib.import_module(
        f"fixtures.{name}"
    ).EXPECTED
    return expected


def _mode(name: str) -> str:
    """The mode a fixture is fixed in: the one it leaks in (train when both, or none)."""
    expected = _expected(name)
    return (
        "forward-only" if expected["train"][0] != "leak" == expected["forward-only"][0] else "train"
    )


def _leaky(name: str) -> bool:
    return _expected(name)[_mode(name)][0] == "leak"


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    return env


def _leakscope(*args: str, cwd: Path) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "leakscope", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}")


def _copy(root: Path) -> Path:
    shutil.copytree(FIXTURES, root / "fixtures", ignore=shutil.ignore_patterns("__pycache__"))
    return root


# One train step's gradients of each named fixture, computed in a fresh process from the files as
# they are on disk under ``root`` (the tiny model, seed 0, micro-batch 0).
_GRADIENTS = r"""
import sys
import torch
root, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, root)
from leakscope.adapters.registry import resolve_specs
from leakscope.harness.gradients import record_train_step
from leakscope.options import CheckOptions
import fixtures
grads = {}
for name in names:
    module = __import__(f"fixtures.{name}", fromlist=["_"])
    assert module.__file__.startswith(root), module.__file__
    spec = resolve_specs(fixtures.target(name), CheckOptions())[0]
    step = record_train_step(spec, CheckOptions())
    grads[name] = {k: v for k, v in step.tensors.items() if k.startswith("gradient of ") and v is not None}
torch.save(grads, out)
"""


def _gradients(root: Path, names: list[str], out: Path) -> dict[str, Any]:
    import torch

    script = out.with_suffix(".py")
    script.write_text(_GRADIENTS, encoding="utf-8")
    subprocess.run(
        [sys.executable, str(script), str(root), str(out), *names],
        cwd=root,
        env=_env(),
        check=True,
        timeout=900,
    )
    grads: dict[str, Any] = torch.load(out)
    return grads


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """For each engine fixture: the copy its fix was written into, its fixes, its verdict after, and
    (when an edit was written) its gradients before and after."""
    before_run = {p.name: p.read_bytes() for p in FIXTURES.glob("*.py")}
    base = tmp_path_factory.mktemp("corpus")
    # (mode, micro-batches, leaky) -> names: the clean look-alikes in a copy of their own (an edit of
    # a helper shared with a leaky fixture is not theirs to see)
    todo: dict[tuple[str, str, bool], list[str]] = {}
    for name in fixture_modules():
        todo.setdefault((_mode(name), "1", _leaky(name)), []).append(name)
    outcome: dict[str, dict[str, Any]] = {}
    for again in range(3):
        for (mode, batches, leaky), names in todo.items():
            root = _copy(base / f"{mode}-{batches}-{leaky}-{again}")
            targets = [fixture_target(n) for n in names]
            _, doc, _ = _leakscope(
                "fix", *targets, "--apply", "--format", "json", "--mode", mode,
                "--micro-batches", batches, *FAST, cwd=root,
            )  # fmt: skip
            for name in names:
                fixes = [f for f in doc["fixes"] if f["target"] == fixture_target(name)]
                outcome[name] = {"root": root, "mode": mode, "batches": batches, "fixes": fixes}
        following: dict[tuple[str, str, bool], list[str]] = {}
        for (mode, batches, leaky), names in todo.items():
            for name in names:
                if _again(outcome[name]["fixes"]):
                    following.setdefault((mode, batches, leaky), []).append(name)
                elif leaky and not outcome[name]["fixes"] and batches == "1":
                    # a leak one micro-batch does not show (every other one, a periodic log)
                    following.setdefault((mode, "3", leaky), []).append(name)
        todo = following
        if not todo:
            break
    assert {p.name: p.read_bytes() for p in FIXTURES.glob("*.py")} == before_run
    by_root: dict[tuple[Path, str, str], list[str]] = {}
    for name, seen in outcome.items():
        by_root.setdefault((seen["root"], seen["mode"], seen["batches"]), []).append(name)
    for (root, mode, batches), names in by_root.items():
        targets = [fixture_target(n) for n in names]
        _, doc, _ = _leakscope(
            "check", *targets, "--format", "json", "--mode", mode, "--micro-batches", batches,
            *FAST, cwd=root,
        )  # fmt: skip
        for name in names:
            outcome[name]["after"] = [
                r["verdict"] for r in doc["results"] if r["target"] == fixture_target(name)
            ]
        written = [n for n in names if any(f["applied"] for f in outcome[n]["fixes"])]
        if written:
            before = _gradients(ROOT, written, root / "before.pt")
            after = _gradients(root, written, root / "after.pt")
            for name in written:
                outcome[name]["gradients"] = (before[name], after[name])
    return outcome


def _again(fixes: list[dict[str, Any]]) -> bool:
    """Whether a fixture's verified edit was not written because another fixture's verified edit
    rewrote its line first (a line of the shared ``fixtures/_common.py``): fix it again on a fresh
    copy. Two verified edits of one fixture's own line are the tool's to report (the second waits
    for the next run), not a reason to run it again."""
    own = {(f["edit"]["file"], f["edit"]["line"]) for f in fixes if f["applied"]}
    return any(
        AGAIN in f["reason"] and (f["edit"]["file"], f["edit"]["line"]) not in own for f in fixes
    )


def _assert_written(fix: dict[str, Any], root: Path, texts: dict[str, str] | None = None) -> None:
    """A verified edit is written as proven: its line reads ``after`` at its column, and its diff
    shows exactly that change."""
    assert fix["status"] == "verified" and fix["applied"], fix
    assert "unchanged" in fix["reason"] or "no gradient" in fix["reason"], fix
    edit = fix["edit"]
    text = (texts or {}).get(edit["file"]) or (root / edit["file"]).read_text(encoding="utf-8")
    indent = " " * (edit["column"] - 1)
    after = indent + edit["after"].replace("\n", "\n" + indent)
    assert after in text.splitlines()[edit["line"] - 1] + "\n" + "\n".join(
        text.splitlines()[edit["line"] :]
    ), (fix, text)
    assert f"-{indent}{edit['before']}\n" in fix["diff"]


def _assert_no_safe_edit(name: str, fixes: list[dict[str, Any]]) -> None:
    """Every fix left unwritten says why, in one line that names the reason this fixture has."""
    unwritten = [f for f in fixes if not f["applied"]]
    assert unwritten, f"{name}: every fix was written; drop it from NO_SAFE_EDIT"
    for fix in unwritten:
        assert "\n" not in fix["reason"], fix
        assert any(why in fix["reason"] for why in NO_SAFE_EDIT[name]), fix


@functools.cache
def _script(name: str, tmp: Path) -> dict[str, Any]:
    """One script fixed in its own copy, watched after, and its clean variant fixed."""
    folder = tmp / name
    folder.mkdir()
    shutil.copy(SCRIPTS / f"{name}.py", folder / f"{name}.py")
    shutil.copy(SCRIPTS / "_graph.py", folder / "_graph.py")
    original = (folder / f"{name}.py").read_bytes()
    code, doc, stderr = _leakscope(
        "fix", "--apply", "--format", "json", f"{name}.py", *STEPS, cwd=folder
    )
    fixed = (folder / f"{name}.py").read_bytes()
    watched, _, _ = _leakscope("watch", "--format", "json", f"{name}.py", *STEPS, cwd=folder)
    (folder / f"{name}.py").write_bytes(original)
    clean_code, clean, _ = _leakscope(
        "fix", "--apply", "--format", "json", f"{name}.py", *STEPS, "--clean", cwd=folder
    )
    return {
        "folder": folder,
        "code": code,
        "doc": doc,
        "stderr": stderr,
        "changed": fixed != original,
        "fixed": {f"{name}.py": fixed.decode("utf-8")},
        "watched": watched,
        "clean": (clean_code, clean["fixes"], (folder / f"{name}.py").read_bytes() == original),
    }


def check_script(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Script ``name`` made clean by its verified edits, its gradients unchanged (the proof's), or a
    one-line reason; its ``--clean`` variant gets no edit."""
    ran = _script(name, tmp_path_factory.getbasetemp())
    # the clean look-alike of the same script (``--clean``): nothing to fix, nothing written
    assert ran["clean"] == (0, [], True), ran["clean"]
    fixes = ran["doc"]["fixes"]
    assert fixes, f"scripts/{name} is leaky, and fix found nothing: {ran['stderr'][-3000:]}"
    if name in NO_SAFE_EDIT:
        _assert_no_safe_edit(name, fixes)
        assert ran["code"] == 1 and not ran["changed"]
        return
    for fix in fixes:
        _assert_written(fix, ran["folder"], ran["fixed"])
    assert ran["code"] == 0 and ran["changed"], ran["stderr"][-3000:]
    assert ran["watched"] == 0, f"scripts/{name} still leaks after its fixes"


@pytest.mark.parametrize("name", fixture_modules())
def test_fix_apply_makes_every_leaky_fixture_clean_with_the_same_gradients(
    name: str, request: pytest.FixtureRequest
) -> None:
    seen = request.getfixturevalue("engines")[name]
    root, fixes, after = seen["root"], seen["fixes"], seen["after"]
    own = (root / "fixtures" / f"{name}.py").read_bytes() == (FIXTURES / f"{name}.py").read_bytes()
    if not _leaky(name):
        assert (fixes, own, after) == ([], True, ["clean"])
        return
    assert fixes, f"{name} is leaky, and fix found nothing"
    if name in NO_SAFE_EDIT:
        _assert_no_safe_edit(name, fixes)
        assert after == ["leak"]
        return
    for fix in fixes:
        _assert_written(fix, root)
    assert after == ["clean"], (name, after)
    import torch

    before, edited = seen["gradients"]
    assert before and before.keys() == edited.keys(), name
    for what, grad in before.items():
        assert torch.allclose(edited[what], grad, rtol=1e-5, atol=1e-7), (name, what)
