"""The real-bug suite (realbugs/bugs.toml, docs/real-bugs.md): historical graph-retention bugs of
public projects, each run on its real buggy and its real fixed release.

For every release, two subprocesses on the repository's interpreter with the release's overlay
(``PYTHONPATH=realbugs/.envs/<bug>-<version>:<root>``, from .ci/setup-realbugs.sh):

- ``confirm.py --expect leak|clean``: the leakscope-free confirmation (leaf probes and a graph
  walk from the upstream holder, realbugs/common/probe.py) concludes leak on the buggy release
  and clean on the fixed one: the suite's ground truth does not rest on leakscope;
- ``leakscope watch --method <M> driver.py``: on the buggy release a leak, with a finding at
  the upstream holder (bugs.toml's path, exactly as leakscope prints it), of the bug's kind,
  retaining bytes; on the fixed release clean. A bug bugs.toml marks ``no_flag`` is watched with
  plain ``leakscope watch driver.py`` and judged the same way (``test_watch_with_no_flags``).

A release where leakscope is known to be wrong today carries ``watch_xfail`` in bugs.toml: its
watch test expects the right answer and is marked xfail (strict), so that the fix shows up as
an XPASS failure and the mark is removed with it.

The four runs of a bug go two at a time (two cores; each process has one intra-op thread):
about 3 minutes of CPU time for the whole file, 8 to 10 minutes of wall time on a 2-core machine
shared with other jobs.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from realbugs.suite import (
    SIDES,
    base_packages,
    confirm_command,
    load,
    overlay_problem,
    run,
    watch_command,
)
from tests.conftest import ROOT, framework_missing

pytestmark = pytest.mark.frameworks

BUGS = {bug.name: bug for bug in load()}
#: a run past this is a hang (each takes 5 to 25 s on a loaded 2-core machine)
TIMEOUT = 600


@functools.cache
def _base() -> dict[str, str]:
    return base_packages()


@functools.cache
def outcomes(name: str) -> dict[tuple[str, str], subprocess.CompletedProcess[str]]:
    """(``confirm`` | ``watch``, side) -> the finished run, for the bug ``name``; its four runs
    go two at a time, once per test session."""
    bug = BUGS[name]
    for side in SIDES:
        problem = overlay_problem(bug.release(side), _base())
        if problem:
            framework_missing(problem, ("LEAKSCOPE_REQUIRE_FRAMEWORKS",))
    jobs = {
        (what, side): (
            confirm_command(bug.release(side)) if what == "confirm" else watch_command(bug)
        )
        for what in ("confirm", "watch")
        for side in SIDES
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            key: pool.submit(run, bug, bug.release(key[1]), command, TIMEOUT)
            for key, command in jobs.items()
        }
        return {key: future.result() for key, future in futures.items()}


def _cases(what: str, no_flag: bool | None = None) -> list[Any]:
    """(bug, side) of every bug, or, with ``no_flag``, of the bugs whose bugs.toml ``no_flag`` is that."""
    cases = []
    for bug in BUGS.values():
        if no_flag is not None and bug.no_flag != no_flag:
            continue
        for side in SIDES:
            reason = bug.release(side).watch_xfail if what == "watch" else ""
            marks = (
                [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)]
                if reason
                else []
            )
            cases.append(pytest.param(bug.name, side, marks=marks, id=f"{bug.name}-{side}"))
    return cases


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}"


@pytest.mark.parametrize(("name", "side"), _cases("confirm"))
def test_confirmation_without_leakscope(name: str, side: str) -> None:
    bug = BUGS[name]
    proc = outcomes(name)[("confirm", side)]
    expect = bug.release(side).expect
    assert proc.returncode == 0, _explain(proc)
    assert re.search(rf"observed: {expect}\b", proc.stdout), _explain(proc)


@pytest.mark.parametrize(("name", "side"), _cases("watch", no_flag=False))
def test_watch(name: str, side: str) -> None:
    """``leakscope watch --method <the bug's method> driver.py``."""
    _judge_watch(name, side)


@pytest.mark.parametrize(("name", "side"), _cases("watch", no_flag=True))
def test_watch_with_no_flags(name: str, side: str) -> None:
    """``leakscope watch driver.py``, no --method (bugs.toml ``no_flag``): leakscope finds the steps
    itself. The transformers Trainer's running sum (#6939) must read growing at Trainer.train's
    ``tr_loss`` on 3.1.0 and clean on 3.2.0; Lightning's ``_minimize`` (#9343) bounded on 1.4.5,
    where the previous step's graph is alive when the next step's forward begins, and clean on
    1.4.6, which drops it before (confirm.py measures both at that moment)."""
    _judge_watch(name, side)


def _judge_watch(name: str, side: str) -> None:
    bug = BUGS[name]
    proc = outcomes(name)[("watch", side)]
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"leakscope watch printed no JSON:\n{_explain(proc)}")
    if bug.no_flag:
        # leakscope chose the steps: whatever it names them, one result per kind of step, all train
        results = doc["results"]
        assert results and all(r["mode"] == "train" for r in results), _explain(proc)
        result = _merged(results)
    else:
        (result,) = doc["results"]
        assert result["target"] == bug.method and result["mode"] == "train"
    release = bug.release(side)
    leaks = [f for f in result["findings"] if f["severity"] == "leak"]
    if side == "fixed":
        # The bug is gone: nothing grows. What the release keeps besides it, one step's graph at a
        # time and in both releases, is reported bounded, exactly where bugs.toml's also_bounded says.
        assert not [f for f in leaks if f["kind"] != "bounded"], _findings(result)
        assert sorted(f["path"] for f in leaks) == sorted(release.also_bounded), _findings(result)
        expected = (1, "leak") if release.also_bounded else (0, "clean")
        assert (proc.returncode, result["verdict"]) == expected, _findings(result)
        return
    assert (proc.returncode, result["verdict"]) == (1, "leak"), _findings(result)
    holder = bug.watch_holder or bug.holder
    at_holder = [f for f in result["findings"] if f["path"] == holder]
    assert at_holder, f"no finding at {holder}:\n{_findings(result)}"
    if not bug.no_flag:
        assert len(at_holder) == 1, _findings(result)
    for finding in at_holder:
        assert finding["kind"] == bug.kind, _findings(result)
        assert finding["retained_bytes"] > 0 and finding["graph_nodes"] > 0
        assert finding["severity"] == "leak"


@pytest.mark.parametrize(("name", "side"), _cases("docs"))
def test_the_docs_show_the_watch_report(name: str, side: str) -> None:
    """docs/real-bugs.md shows what `leakscope watch` prints on the release today: the text report of
    the same run test_watch judges (rendered from its JSON report, as `leakscope render` does)."""
    import os
    import sys
    import tempfile
    from pathlib import Path

    from docs.gen import COLUMNS
    from realbugs.gen_docs import shown_report

    bug = BUGS[name]
    proc = outcomes(name)[("watch", side)]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "report.json")
        report.write_text(proc.stdout, encoding="utf-8")
        text = subprocess.run(
            [sys.executable, "-m", "leakscope", "render", str(report)],
            env=dict(os.environ, COLUMNS=COLUMNS),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert text.returncode == 0, _explain(text)
    doc = (ROOT / "docs" / "real-bugs.md").read_text(encoding="utf-8")
    assert shown_report(bug, bug.release(side), text.stdout) in doc, (
        "docs/real-bugs.md is stale: run python -m realbugs.gen_docs"
    )


def _merged(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The results of one watch as one: every finding, verdict leak if any is, error if any is."""
    verdicts = [r["verdict"] for r in results]
    verdict = "leak" if "leak" in verdicts else "error" if "error" in verdicts else verdicts[0]
    return {
        "verdict": verdict,
        "error": "; ".join(str(r["error"]) for r in results if r.get("error")),
        "findings": [f for r in results for f in r["findings"]],
    }


def _findings(result: dict[str, Any]) -> str:
    rows = [
        f"{f['path']}  kind={f['kind']} bytes={f['retained_bytes']} nodes={f['graph_nodes']}"
        for f in result["findings"]
    ]
    return f"verdict {result['verdict']}, error {result['error']}:\n" + "\n".join(rows)


def test_every_bug_has_its_files_and_distinct_releases() -> None:
    assert len(BUGS) >= 8
    for bug in BUGS.values():
        for file in ("driver.py", "confirm.py", "NOTES.md"):
            assert (bug.folder / file).is_file(), f"{bug.name} has no {file}"
        notes = (bug.folder / "NOTES.md").read_text(encoding="utf-8")
        assert bug.holder in notes or bug.method in notes
        assert bug.buggy.version != bug.fixed.version
        for release in (bug.buggy, bug.fixed):
            assert f"{_canonical(bug.package)}=={release.version}" in release.lock
            assert not any(pin.startswith(("torch==", "pip==")) for pin in release.lock)
        assert bug.kind in ("growing", "bounded")
        assert bug.upstream and all(link.startswith("https://github.com/") for link in bug.upstream)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_docs_table_is_bugs_toml() -> None:
    from realbugs.gen_docs import table

    doc = (ROOT / "docs" / "real-bugs.md").read_text(encoding="utf-8")
    assert table(list(BUGS.values())) in doc, (
        "docs/real-bugs.md is stale: run python -m realbugs.gen_docs"
    )
    for bug in BUGS.values():
        holder = bug.watch_holder or bug.holder
        assert holder in doc or bug.buggy.watch_xfail, (
            f"docs/real-bugs.md shows no output at {holder}"
        )


def test_the_confirmations_import_nothing_of_leakscope() -> None:
    import ast

    sources = [ROOT / "realbugs" / "common" / "probe.py"]
    sources += [bug.folder / name for bug in BUGS.values() for name in ("confirm.py", "driver.py")]
    for source in sources:
        tree = ast.parse(source.read_text(encoding="utf-8"))
        imported = [
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        ]
        imported += [
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        ]
        assert not [name for name in imported if name.split(".")[0] == "leakscope"], source


def test_an_overlay_hides_what_its_reference_venv_lacked() -> None:
    """TRL 0.4 imports peft whenever ``find_spec("peft")`` finds it; .venv's peft 0.21 needs a newer
    accelerate than the release's 0.17, so the overlay must hide it (realbugs/hide.py)."""
    bug = BUGS["trl-ppo-minibatch-stats"]
    release = bug.buggy
    problem = overlay_problem(release, _base())
    if problem:
        framework_missing(problem, ("LEAKSCOPE_REQUIRE_FRAMEWORKS",))
    code = (
        "import importlib.util, importlib.metadata as m, torch, leakscope\n"
        "print(importlib.util.find_spec('peft'), m.version('transformers'), m.version('numpy'), torch.__version__)\n"
    )
    proc = run(bug, release, [*confirm_command(release)[:1], "-c", code], timeout=120)
    assert proc.returncode == 0, _explain(proc)
    assert proc.stdout.split() == ["None", "4.27.4", "1.26.4", "2.13.0+cpu"]
