"""Reports are data, never code or file access (docs/security.md).

A saved report is a file anyone can write. ``leakscope render`` and
``leakscope.render.json_report.load`` check every field's type and range and fail
with one line and exit 2 for anything else; they import nothing a report names;
source snippets travel in the report, captured when the check ran from the checked
project only, so rendering reads no file.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import leakscope
from leakscope.cli import app
from leakscope.errors import UsageError
from leakscope.options import CheckOptions
from leakscope.render import FORMATS, render
from leakscope.render.json_report import MAX_GRAPH_NODES, load
from leakscope.results import Finding, Holder, Mode, Report, Source, TargetResult, Verdict
from leakscope.serialize import SchemaError, from_data, to_data
from leakscope.snippets import MAX_FILE_BYTES, read_snippets
from tests.conftest import ROOT, holder_path

pytestmark = pytest.mark.integration

runner = CliRunner()


@pytest.fixture(scope="session")
def saved() -> dict[str, Any]:
    """A real report with every optional part: growth, graphs, snippets, a projection and a watch summary."""
    report = leakscope.check(
        "fixtures.verl_bug:Engine",
        CheckOptions(modes=(Mode.TRAIN,), micro_batches=3, isolate=True),
    )
    doc: dict[str, Any] = json.loads(render(report, "json"))
    finding = doc["results"][0]["findings"][0]
    assert finding["graph"]["nodes"] and finding["snippets"] and doc["results"][0]["growth"]
    doc["results"][0]["projection"] = {
        "hidden": 4096,
        "tokens": 17700,
        "dtype": "bf16",
        "micro_batches": 16,
        "gpu_memory": 85899345920,
        "vocab": None,
        "bytes_per_micro_batch": 10**9,
        "bytes_per_update": 16 * 10**9,
        "oom_micro_batch": None,
        "coefficients": [1.5, -0.25, 0.0, 0.0, 0.0, 0.0],
        "samples": [[16, 32, 4096]],
        "layers": None,
        "batch": None,
        "bounded_bytes": 0,
        "bounded_fits": None,
        "terms": [
            {
                "cause": "leaf+grad",
                "part": "growing",
                "monomial": "tokens x hidden",
                "elements": 2.0,
                "element_bytes": 2.0,
                "bytes": 10**9,
                "text": "leaf+grad: 2 x tokens x hidden x 2 B",
            }
        ],
        "assumptions": ["vocab=64 (the tiny model's)"],
        "fp32_share": {"leaf+grad": 0.5},
    }
    doc["watch"] = {
        "methods": ["pkg.mod:Engine.forward_step"],
        "calls": [{"method": "forward_step", "bytes": 1}],
        "processes": ["pid 1"],
        "skip": 0,
        "micro_batches": 3,
        "boundary": "backward",
        "loop": "train.py:27 in main",
    }
    return doc


def _render(tmp_path: Path, doc: Any, *args: str) -> Any:
    path = tmp_path / "report.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return runner.invoke(app, ["render", str(path), *args])


def test_a_complete_report_loads_whole_and_renders_in_every_format(
    saved: dict[str, Any], tmp_path: Path
) -> None:
    """The clean look-alike of every malformed report below."""
    report = load(json.dumps(saved))
    assert json.loads(render(report, "json")) == saved  # lossless: every field came back
    assert report.results[0].projection.scale.hidden == 4096
    assert report.watch is not None and report.watch.calls == (
        {"method": "forward_step", "bytes": 1},
    )
    for fmt in FORMATS:
        result = _render(tmp_path, saved, "--format", fmt)
        assert result.exit_code == 0, (fmt, result.output)


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``doc`` with the value at ``results.0.findings.0.graph.root`` replaced (or deleted for ``...``)."""
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = out
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return out


#: (what, JSON path, hostile value, where the message says it is)
MALFORMED = [
    (
        "null mode",
        "results.0.mode",
        None,
        "results[0].mode is null, not one of 'train', 'forward-only'",
    ),
    ("unknown verdict", "results.0.verdict", "pass", "results[0].verdict is 'pass', not one of"),
    (
        "bytes as a string",
        "results.0.retained_bytes",
        "12 KiB",
        "results[0].retained_bytes is a string, not an integer",
    ),
    (
        "negative bytes",
        "results.0.retained_bytes",
        -1,
        "results[0].retained_bytes is -1, not an integer from 0",
    ),
    (
        "bytes past 2**63",
        "results.0.retained_bytes",
        2**70,
        "results[0].retained_bytes is 1180591620717411303424",
    ),
    (
        "a boolean count",
        "results.0.findings.0.graph_nodes",
        True,
        "graph_nodes is a boolean, not an integer",
    ),
    (
        "a float id",
        "results.0.findings.0.graph.nodes.0.id",
        0.5,
        "graph.nodes[0].id is 0.5, not an integer",
    ),
    (
        "script in the rank",
        "results.0.rank",
        "<script>alert(1)</script>",
        "results[0].rank is a string",
    ),
    (
        "script in a node id",
        "results.0.findings.0.graph.nodes.0.id",
        "<img src=x onerror=alert(1)>",
        "nodes[0].id is",
    ),
    (
        "unknown severity",
        "results.0.findings.0.severity",
        "fatal",
        "severity is 'fatal', not one of 'leak'",
    ),
    (
        "unknown kind",
        "results.0.findings.0.kind",
        "exploding",
        "kind is 'exploding', not one of 'growing', 'bounded'",
    ),
    (
        "unknown holder",
        "results.0.findings.0.holder",
        "the void",
        "holder is 'the void', not one of",
    ),
    ("findings not a list", "results.0.findings", {"a": 1}, "results[0].findings is not a list"),
    (
        "a missing required field",
        "results.0.findings.0.hint",
        ...,
        "results[0].findings[0].hint is missing",
    ),
    ("a source without a line", "results.0.findings.0.source.line", ..., "source.line is missing"),
    (
        "a string snippet",
        "results.0.findings.0.snippets.0.lines",
        "x",
        "snippets[0].lines is a string, not a list",
    ),
    (
        "a growth of strings",
        "results.0.growth.retained_bytes",
        ["1"],
        "growth.retained_bytes[0] is a string",
    ),
    ("an error that is a number", "results.0.error", 3, "results[0].error is 3, not a string"),
    ("a version that is a list", "torch_version", [], "torch_version is a list, not a string"),
    ("a negative skip in the watch summary", "watch.skip", -3, "watch.skip is -3"),
    (
        "a projection without a scale",
        "results.0.projection.hidden",
        ...,
        "projection.scale.hidden is missing",
    ),
    (
        "a projection of 3 samples each",
        "results.0.projection.samples",
        [[1, 2]],
        "samples[0] has 2 items, not 3",
    ),
    (
        "a term of no known part",
        "results.0.projection.terms.0.part",
        "both",
        "terms[0].part is 'both'",
    ),
]


@pytest.mark.parametrize(
    ("what", "path", "value", "where"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_a_malformed_report_is_one_line_and_exit_2(
    saved: dict[str, Any], tmp_path: Path, what: str, path: str, value: Any, where: str
) -> None:
    result = _render(tmp_path, _set(saved, path, value), "--format", "html")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"leakscope: error: {tmp_path / 'report.json'} is not a valid leakscope JSON report: "
    )
    assert where in line, line
    assert line.endswith("; give a report written by: leakscope check --format json -o FILE")


#: documents that are not even well-formed reports, and what the one line says
UNREADABLE = [
    (
        "NaN slope",
        '"slope_bytes": NaN',
        "is not a leakscope JSON report (NaN is not a number JSON allows)",
    ),
    ("Infinity", '"slope_bytes": -Infinity', "(-Infinity is not a number JSON allows)"),
    ("1e400 bytes", '"retained_bytes": 1e400', "retained_bytes is inf, not an integer"),
    (
        "a 5000-digit integer",
        '"retained_bytes": ' + "9" * 5000,
        "is not a leakscope JSON report (Exceeds the limit",
    ),
]


@pytest.mark.parametrize(
    ("what", "replacement", "message"), UNREADABLE, ids=[u[0] for u in UNREADABLE]
)
def test_numbers_json_allows_but_a_report_does_not(
    saved: dict[str, Any], tmp_path: Path, what: str, replacement: str, message: str
) -> None:
    key = replacement.split(":")[0]
    text = json.dumps(saved, indent=1)
    start = text.index(key)
    end = text.index("\n", start)
    tail = "," if text[end - 1] == "," else ""
    text = text[:start] + replacement + tail + text[end:]
    result = _render(tmp_path, text, "--format", "text")
    assert result.exit_code == 2 and result.stdout == "", result.output
    [line] = result.stderr.splitlines()
    assert message in line, line


def test_json_nested_100000_deep_is_one_line(tmp_path: Path) -> None:
    deep = '{"schema_version": 1, "results": [' + "[" * 100_000 + "]" * 100_000 + "]}"
    result = _render(tmp_path, deep, "--format", "json")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.endswith(
        "nests deeper than any leakscope report; give a report written by: "
        "leakscope check --format json -o FILE"
    )
    assert json.loads(result.stdout)["error"]  # JSON was asked for: a JSON document, still


def test_a_report_larger_than_any_real_one_is_refused_unread(tmp_path: Path) -> None:
    from leakscope.render.json_report import MAX_REPORT_CHARS

    with pytest.raises(UsageError, match="characters long, more than a leakscope report"):
        load(" " * (MAX_REPORT_CHARS + 1))


def test_a_graph_larger_than_a_report_draws_is_refused(saved: dict[str, Any]) -> None:
    graph = saved["results"][0]["findings"][0]["graph"]
    many = {
        **graph,
        "nodes": [
            {"id": i, "name": "N", "slots": [], "children": []} for i in range(MAX_GRAPH_NODES + 1)
        ],
    }
    with pytest.raises(
        UsageError,
        match=f"graph.nodes has {MAX_GRAPH_NODES + 1} nodes, more than {MAX_GRAPH_NODES}",
    ):
        load(json.dumps(_set(saved, "results.0.findings.0.graph", many)))


def test_schema_version_true_is_not_1(saved: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="has schema_version True, this leakscope reads 1"):
        load(json.dumps({**saved, "schema_version": True}))


# --- nothing a report names is imported ------------------------------------------------------------

_NO_IMPORT = """
import json, sys
from leakscope.render import render
from leakscope.render.json_report import load
report = load(open(sys.argv[1], encoding="utf-8").read())
for fmt in ("text", "json", "html", "junit", "sarif", "github"):
    render(report, fmt)
print(sorted(m for m in ("leakscope.models.tiny", "leakscope.runner.zygote", "torch") if m in sys.modules))
"""


def test_a_class_tag_in_a_report_imports_nothing(saved: dict[str, Any], tmp_path: Path) -> None:
    """``__dataclass__`` named the module to import; now the schema alone decides (the tag is ignored)."""
    tagged = copy.deepcopy(saved)
    tagged["results"][0]["projection"]["__dataclass__"] = (
        "leakscope.models.tiny:TinyModel"  # imports torch
    )
    tagged["results"][0]["findings"][0]["__dataclass__"] = "leakscope.runner.zygote:Zygote"
    path = tmp_path / "tagged.json"
    path.write_text(json.dumps(tagged), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", _NO_IMPORT, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_private_encoding_decodes_by_the_schema_too() -> None:
    """serialize: the isolated check's and the watch's process boundary; rank reports live in shared directories."""
    result = TargetResult("pkg:E", Mode.TRAIN, Verdict.LEAK, retained_bytes=4096)
    data = to_data(result)
    assert "__dataclass__" not in json.dumps(data)
    assert from_data(TargetResult, data) == result
    with pytest.raises(SchemaError, match="projection is a string, not an object"):
        from_data(TargetResult, {**data, "projection": "leakscope.models.tiny:TinyModel"})
    with pytest.raises(SchemaError, match="projection.scale is missing"):
        from_data(
            TargetResult,
            {**data, "projection": {"__dataclass__": "leakscope.models.tiny:TinyModel"}},
        )
    with pytest.raises(SchemaError, match="retained_bytes is nan, not an integer"):
        from_data(TargetResult, {**data, "retained_bytes": float("nan")})


# --- snippets: captured from the project when the check runs; rendering reads no file -----------------


def _finding_at(source: Source) -> Report:
    finding = Finding(
        holder_path("output", "x"),
        Holder.RETURNED,
        "MulBackward0",
        3,
        4096,
        True,
        "detach it",
        source=source,
    )
    return Report(
        (
            TargetResult(
                "pkg:E", Mode.TRAIN, Verdict.LEAK, findings=(finding,), retained_bytes=4096
            ),
        ),
        "0",
        "t",
        "p",
    )


def _captured(report: Report) -> tuple[tuple[str, ...], ...]:
    return tuple(s.lines for s in report.results[0].findings[0].snippets)


def test_snippets_are_read_only_from_python_files_under_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "engine.py").write_text("a = 1\nb = 2\nsecret_free = 3\n", encoding="utf-8")
    outside = tmp_path / "outside.py"
    outside.write_text("TOKEN = 'hunter2'\n", encoding="utf-8")
    (project / "link.py").symlink_to(outside)
    (project / "notes.txt").write_text("TOKEN = 'hunter2'\n", encoding="utf-8")
    os.mkfifo(project / "fifo.py")  # reading it would block the check forever
    (project / "huge.py").write_text("x = 1\n" * (MAX_FILE_BYTES // 6 + 1), encoding="utf-8")
    (project / "dir.py").mkdir()
    roots = [project]
    hostile = [
        "/proc/self/environ",
        "/proc/self/cmdline",
        "/etc/passwd",
        str(outside),
        "../outside.py",
        str(project / "link.py"),
        str(project / "notes.txt"),
        str(project / "fifo.py"),
        str(project / "huge.py"),
        str(project / "dir.py"),
        str(project / "engine.py") + "\x00.py",
        str(project / "missing.py"),
    ]
    for file in hostile:
        assert _captured(read_snippets(_finding_at(Source(file, 1, "f")), roots)) == (), file
    # The look-alike: a plain file of the project, by absolute and by relative name.
    assert _captured(
        read_snippets(_finding_at(Source(str(project / "engine.py"), 2, "f")), roots)
    ) == (("a = 1", "b = 2", "secret_free = 3"),)
    monkeypatch.chdir(project)
    assert (
        _captured(read_snippets(_finding_at(Source("engine.py", 1, "f")), roots))[0][0] == "a = 1"
    )
    assert (
        _captured(read_snippets(_finding_at(Source("engine.py", 9, "f")), roots)) == ()
    )  # past the end


def _check_json(*args: str, cwd: Path = ROOT) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "leakscope", "check", *args, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1, done.stderr
    return dict(json.loads(done.stdout))


def test_an_engine_cannot_make_the_report_carry_a_file_outside_the_project(tmp_path: Path) -> None:
    """FakeSource's code says it lives in /proc/self/environ; RealSource is the same leak in a real file."""
    doc = _check_json(
        "fixtures.bad.hostile:FakeSource",
        "fixtures.bad.hostile:RealSource",
        "--mode",
        "train",
        "--micro-batches",
        "1",
    )
    fake, real = (r["findings"][0] for r in doc["results"])
    assert fake["source"]["file"] == "/proc/self/environ" and "snippets" not in fake
    assert real["source"]["file"] == "fixtures/bad/hostile.py"
    assert [s["file"] for s in real["snippets"]] == ["fixtures/bad/hostile.py"] * 2
    line = (
        (ROOT / "fixtures/bad/hostile.py")
        .read_text(encoding="utf-8")
        .splitlines()[real["source"]["line"] - 1]
    )
    snippet = real["snippets"][0]
    assert snippet["lines"][real["source"]["line"] - snippet["first_line"]] == line
    # Rendered elsewhere, with a secret in the environment: the page shows the captured
    # lines (it read no file) and nothing of /proc/self/environ.
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "leakscope", "render", str(path), "--format", "html"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "LEAKSCOPE_TEST_SECRET": "s3cr3t-t0ken", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert "s3cr3t-t0ken" not in done.stdout
    assert "source not shown: not captured when the check ran" in done.stdout  # FakeSource's
    assert (
        f'<span class="ln">{real["source"]["line"]}</span>' in done.stdout
    )  # RealSource's, from the report


def test_a_module_target_outside_the_working_directory_still_gets_its_snippets(
    tmp_path: Path,
) -> None:
    """The target's own directory is a root too: leakscope's engines checked from another project."""
    doc = _check_json(
        "leakscope.models.engines:LeakyFSDPEngine",
        "--mode",
        "train",
        "--micro-batches",
        "1",
        cwd=tmp_path,
    )
    finding = doc["results"][0]["findings"][0]
    assert finding["source"]["file"].endswith("leakscope/models/engines.py")
    assert finding["snippets"] and finding["snippets"][0]["file"] == finding["source"]["file"]
