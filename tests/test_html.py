"""The HTML report and `leakscope render`: a real leaky engine's report, drawn and read back.

The renderer tests compare structure (which SVG elements exist, and that their
numbers are the report's); the browser test loads the page in Debian's headless
Chromium and takes screenshots in light and dark.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

import leakscope
from leakscope.cli import app
from leakscope.options import CheckOptions
from leakscope.render import render
from leakscope.render.html import graph_svg
from leakscope.render.json_report import load
from leakscope.results import Finding, Holder, Mode, Report, Source, TargetResult, Verdict
from leakscope.snippets import read_snippets
from tests.conftest import ROOT, holder_path

pytestmark = pytest.mark.integration

runner = CliRunner()
TARGET = "fixtures.verl_bug:Engine"


@pytest.fixture(scope="session")
def report() -> Report:
    """verl 6698 in both modes with three micro-batches: a growing leak and a clean twin mode."""
    return leakscope.check(TARGET, CheckOptions(micro_batches=3))


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text, of an HTML page."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and cls in a.get("class", "").split()]


def test_findings_carry_their_bounded_graph(report: Report) -> None:
    train = report.results[0]
    assert train.verdict is Verdict.LEAK
    for finding in train.findings:
        view = finding.graph
        assert view is not None and view.root == 0 and 0 < len(view.nodes) <= 40
        assert view.nodes[0].name == finding.grad_fn  # the held tensor's grad_fn is the root
        assert view.total_nodes >= len(view.nodes)
    entropy = train.findings[1].graph
    assert entropy is not None
    saved = {s.name for n in entropy.nodes for s in n.slots}
    assert "saved result" in saved and "leaf.grad" in saved


def test_html_shows_verdicts_growth_findings_and_graphs(report: Report) -> None:
    page = render(report, "html")
    doc = _Elements(page)
    text = "".join(doc.text)
    assert "1 leak, 1 clean, 0 error (exit 1)" in text
    # One summary row and one section per target and mode.
    assert len(doc.having("section", "result")) == len(report.results) == 2
    assert [
        a["class"]
        for a in doc.having("span", "badge")
        if a["class"] in ("badge leak", "badge clean")
    ][:2] == [
        "badge leak",
        "badge clean",
    ]
    # The growth plot: one bar per micro-batch, each carrying the report's bytes.
    plots = doc.having("svg", "growth")
    assert len(plots) == 2 and "leak" in plots[0]["class"] and "clean" in plots[1]["class"]
    bars = [int(a["data-bytes"]) for a in doc.having("rect", "bar")]
    assert bars == [b for r in report.results for b in r.growth.retained_bytes]  # type: ignore[union-attr]
    # Each finding: its graph drawn with exactly its described nodes and edges.
    findings = report.results[0].findings
    graphs = doc.having("svg", "graph")
    assert len(graphs) == len(findings) == 2
    for svg, finding in zip(graphs, findings, strict=True):
        assert finding.graph is not None
        assert int(svg["data-nodes"]) == len(finding.graph.nodes)
        assert int(svg["data-total"]) == finding.graph.total_nodes
    assert len(doc.having("g", "node")) == sum(len(f.graph.nodes) for f in findings)  # type: ignore[union-attr]
    edges = sum(len(set(n.children)) for f in findings for n in f.graph.nodes)  # type: ignore[union-attr]
    assert len(doc.having("path", "edge")) == edges
    assert len(doc.having("g", "root")) == 2
    # Created-at snippets: the real line of the engine, marked; and the fix.
    line25 = (ROOT / "fixtures" / "verl_bug.py").read_text(encoding="utf-8").splitlines()[24]
    assert re.search(r'<span class="hl"><span class="ln">25</span>' + re.escape(_esc(line25)), page)
    assert _esc(findings[0].hint) in page
    # Self-contained: no script, no external resource of any kind.
    assert (
        "<script" not in page
        and not re.search(r'(src|href)="(?!#)', page)
        and "@import" not in page
    )


def _esc(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_a_line_not_captured_is_said_not_fatal(report: Report) -> None:
    train = report.results[0]
    gone = dataclasses.replace(
        train.findings[0], source=Source("no/such/file.py", 3, "forward_step"), snippets=()
    )
    page = render(
        dataclasses.replace(report, results=(dataclasses.replace(train, findings=(gone,)),)), "html"
    )
    assert (
        "source not shown: not captured when the check ran" in page and "(no/such/file.py)" in page
    )


def test_stored_at_gets_its_own_snippet(report: Report) -> None:
    train = report.results[0]
    stored = dataclasses.replace(
        train.findings[0], stored_at=Source("fixtures/verl_bug.py", 29, "forward_step")
    )
    changed = dataclasses.replace(report, results=(dataclasses.replace(train, findings=(stored,)),))
    page = render(
        read_snippets(changed, [ROOT]), "html"
    )  # as leakscope.check does when it finishes
    assert "stored at" in page and '<span class="hl"><span class="ln">29</span>' in page


def test_a_huge_graph_is_bounded_and_says_what_it_left_out() -> None:
    import torch

    from leakscope.probe.view import FINDING_GRAPH_NODES, view_of

    x = torch.randn(4, requires_grad=True)
    y = x
    for _ in range(100):
        y = torch.tanh(y) * 2
    view = view_of(y, path="output.y", max_nodes=FINDING_GRAPH_NODES)
    assert view is not None and view.truncated and len(view.nodes) == 40 and view.total_nodes == 201
    svg = graph_svg(view)
    assert svg.count('<g class="node') == 40 and "+1 not drawn" in svg
    finding = Finding(
        holder_path("output", "y"),
        Holder.RETURNED,
        "MulBackward0",
        201,
        0,
        True,
        "detach it",
        graph=view,
    )
    result = TargetResult("pkg:E", Mode.TRAIN, Verdict.LEAK, findings=(finding,))
    page = render(Report((result,), "0", "t", "p"), "html")
    assert "161 left out" in page and "leakscope explain pkg:E --mode train --path output.y" in page


def test_json_round_trip_is_lossless_for_every_format(report: Report) -> None:
    saved = render(report, "json")
    loaded = load(saved)
    assert render(loaded, "json") == saved
    for fmt in ("text", "sarif", "github", "html"):
        assert render(loaded, fmt) == render(report, fmt), fmt


def test_render_command_writes_html_of_a_saved_report(report: Report, tmp_path: Path) -> None:
    saved = tmp_path / "report.json"
    saved.write_text(render(report, "json"), encoding="utf-8")
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["render", str(saved), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == render(report, "html")
    result = runner.invoke(app, ["render", str(saved), "--format", "github"])
    assert result.exit_code == 0 and result.stdout == render(report, "github")


_PROBE = """
import sys
from leakscope.cli import main
sys.argv = ["leakscope", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print("EXIT", code, "TORCH", "torch" in sys.modules, file=sys.stderr)
"""


def test_render_needs_no_torch(report: Report, tmp_path: Path) -> None:
    saved = tmp_path / "report.json"
    saved.write_text(render(report, "json"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "render", str(saved), "--format", "html"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stderr.strip().splitlines()[-1] == "EXIT 0 TORCH False"
    assert done.stdout.startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read {path}: No such file or directory"),
        (
            "not json",
            "{path} is not JSON (Expecting value at line 1, column 1); give a report written by: "
            "leakscope check --format json -o FILE",
        ),
        (
            '{"runs": []}',
            "{path} is not a leakscope JSON report (no schema_version and results); give a report "
            "written by: leakscope check --format json -o FILE",
        ),
        (
            '{"schema_version": 2, "results": []}',
            "{path} has schema_version 2, this leakscope reads 1; render it "
            "with the leakscope version that wrote it",
        ),
        (
            '{"schema_version": 1, "results": [{"mode": "train"}]}',
            "{path} is not a valid leakscope JSON report",
        ),
    ],
)
def test_render_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    result = runner.invoke(app, ["render", str(path), "--format", "html"])
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("leakscope: error: " + message.format(path=path))


# ---------------------------------------------------------------- in a real browser


def _browser() -> str | None:
    for name in ("chromium", "chromium-headless-shell", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    headless_shell = Path("/usr/lib/chromium/chromium-headless-shell")
    return str(headless_shell) if headless_shell.exists() else None


def _first_pixel(png: bytes) -> tuple[int, int, int]:
    """The top-left pixel of an 8-bit RGB(A) PNG (the page background)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        header = data if kind == b"IHDR" else header
        idat += data if kind == b"IDAT" else b""
        pos += 12 + length
    depth, color = header[8], header[9]
    assert depth == 8 and color in (2, 6)
    raw = zlib.decompressobj().decompress(idat, 64)
    # Row 0, filter byte then pixels; filters None, Sub, Up (prior row is zero) and
    # Paeth (= Sub on row 0) leave the first pixel as stored; Average halves nothing left of it.
    return raw[1], raw[2], raw[3]


def test_page_in_headless_chromium_light_and_dark(tmp_path: Path) -> None:
    browser = _browser()
    if browser is None:
        if os.environ.get("LEAKSCOPE_REQUIRE_BROWSER"):
            pytest.fail(
                "LEAKSCOPE_REQUIRE_BROWSER is set but no chromium: apt-get install -y chromium"
            )
        pytest.skip("no chromium (apt-get install -y chromium)")
    page = tmp_path / "report.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakscope",
            "check",
            "fixtures/verl_bug.py:Engine",
            "--micro-batches",
            "3",
            "--format",
            "html",
            "-o",
            str(page),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    url = page.as_uri()
    # --disable-dev-shm-usage: a container's small /dev/shm crashes the renderer on a tall screenshot.
    base = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # No console message of any kind (errors, CSP or resource failures are logged as CONSOLE lines).
    assert not [
        line for line in dom.stderr.splitlines() if "CONSOLE" in line or ":INFO:console" in line
    ]
    parsed = _Elements(dom.stdout)
    assert len(parsed.having("svg", "growth")) == 2 and len(parsed.having("rect", "bar")) == 6
    assert len(parsed.having("svg", "graph")) == 2 and len(parsed.having("g", "node")) > 20
    shots = {}
    for scheme, flags in (
        ("light", []),
        ("dark", ["--force-dark-mode", "--blink-settings=preferredColorScheme=0"]),
    ):
        shot = Path(os.environ.get("LEAKSCOPE_SCREENSHOTS", tmp_path)) / f"report-{scheme}.png"
        done = subprocess.run(
            [*base, *flags, "--window-size=1280,2400", f"--screenshot={shot}", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
        shots[scheme] = _first_pixel(shot.read_bytes())
    assert shots["light"] == (255, 255, 255)  # --bg of the light scheme
    assert shots["dark"] == (
        13,
        17,
        23,
    )  # --bg of the dark scheme: prefers-color-scheme took effect


def test_a_bounded_leak_is_drawn_in_leak_colours() -> None:
    """A bounded leak is flat (slope 0), and still a leak: red bars under the red LEAK heading."""
    report = leakscope.check("fixtures.cached_logits:Engine", CheckOptions(micro_batches=3))
    train, forward_only = report.results
    assert (train.verdict, train.kind, train.growth.slope_bytes) == (Verdict.LEAK, "bounded", 0.0)  # type: ignore[union-attr]
    doc = _Elements(render(report, "html"))
    assert [a["class"] for a in doc.having("svg", "growth")] == [
        "plot growth leak",
        "plot growth clean",
    ]
    assert [a["class"] for a in doc.having("svg", "spark")] == ["spark leak", "spark clean"]
    assert "bounded: a leak that holds the latest step" in "".join(doc.text)


def test_colours_follow_the_gate_under_fail_on_warning() -> None:
    warned = TargetResult("pkg:E", Mode.TRAIN, Verdict.CLEAN, warnings=("the holder walk stopped",))
    report = Report((warned,), "0", "t", "p")
    strict = _Elements(render(report, "html", fail_on="warning"))
    assert [a["class"] for a in strict.having("p", "banner")] == ["banner warning"]
    assert [a["class"] for a in strict.having("section", "result")] == ["result warning"]
    lenient = _Elements(
        render(report, "html", fail_on="leak")
    )  # the look-alike: the default gate passes it
    assert [a["class"] for a in lenient.having("p", "banner")] == ["banner clean"]


def test_the_style_sheet_is_package_data() -> None:
    from importlib import resources

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    css = resources.files("leakscope.render").joinpath("report.css").read_text(encoding="utf-8")
    assert f"<style>{css}</style>" in render(Report((), "0", "t", "p"), "html")
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]
    assert "render/report.css" in package_data["package-data"]["leakscope"]  # so a wheel carries it
