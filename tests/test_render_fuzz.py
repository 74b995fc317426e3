"""Fuzz: generated malformed and hostile reports through the loader, every renderer and headless Chromium.

For every generated document: ``load`` returns a report or raises a one-line
``UsageError`` (never another exception); every format renders without an
exception and opens no file (an audit hook on ``open`` watches); the HTML has only
the page's own elements (no script, no event handler), also as Chromium parses it.
Under ``HYPOTHESIS_PROFILE=ci`` (tests/conftest.py) the inputs are fixed.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from leakscope.cli import app
from leakscope.errors import UsageError
from leakscope.render import FORMATS, render, renderer
from leakscope.render.json_report import load
from tests.conftest import report_validator

pytestmark = pytest.mark.integration

runner = CliRunner()

#: a complete, valid report: every optional part present (the seed every mutation starts from)
BASE: dict[str, Any] = {
    "schema_version": 1,
    "leakscope_version": "0.1.0",
    "torch_version": "2.13.0+cpu",
    "python_version": "3.11.7",
    "results": [
        {
            "target": "pkg.engines:Engine",
            "mode": "train",
            "verdict": "leak",
            "error": None,
            "retained_bytes": 12288,
            "kind": "growing",
            "settings": ["calculate_entropy=true"],
            "warnings": ["the holder walk stopped at 2000000 objects"],
            "keys_read": ["input_ids", "advantages"],
            "rank": 1,
            "growth": {
                "retained_bytes": [4096, 8192, 12288],
                "slope_bytes": 4096.0,
                "cuda_allocated": [1, 2, 3],
                "graph_nodes": [3, 6, 9],
                "nodes_by_micro_batch": [3, 3, 3],
                "storage_bytes": [0, 64, 128],
                "storage_slope_bytes": 64.0,
            },
            "projection": {
                "hidden": 4096,
                "tokens": 17700,
                "dtype": "bf16",
                "micro_batches": 16,
                "gpu_memory": 85899345920,
                "vocab": 151936,
                "layers": 36,
                "batch": 4,
                "bytes_per_micro_batch": 10**9,
                "bytes_per_update": 10**10,
                "oom_micro_batch": 7,
                "coefficients": [2.0, 0.0, 0.5, 0.0, 0.0, 0.0],
                "samples": [[16, 32, 4096]],
                "bounded_bytes": 10**8,
                "bounded_fits": True,
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
                "assumptions": ["layers=36"],
                "fp32_share": {"leaf+grad": 0.5},
            },
            "findings": [
                {
                    "path": "output.model_output.entropy",
                    "holder": "returned",
                    "grad_fn": "NegBackward0",
                    "graph_nodes": 4,
                    "retained_bytes": 12288,
                    "confirmed": True,
                    "hint": "detach it",
                    "cause": "activations",
                    "bytes_by_cause": {"activations": 8192, "leaf+grad": 4096},
                    "source": {"file": "pkg/engines.py", "line": 26, "function": "entropy_of"},
                    "severity": "leak",
                    "allowed_reason": None,
                    "kind": "growing",
                    "stored_at": {"file": "pkg/engines.py", "line": 30, "function": "forward_step"},
                    "store_op": "return",
                    "called_from": [
                        {"file": "pkg/engines.py", "line": 40, "function": "forward_step"}
                    ],
                    "graph": {
                        "root": 0,
                        "total_nodes": 5,
                        "truncated": True,
                        "nodes": [
                            {"id": 0, "name": "NegBackward0", "slots": [], "children": [1, 2]},
                            {
                                "id": 1,
                                "name": "MulBackward0",
                                "children": [3, 9],
                                "slots": [
                                    {
                                        "name": "saved self",
                                        "shape": [2, 8],
                                        "dtype": "float32",
                                        "nbytes": 64,
                                    }
                                ],
                            },
                            {"id": 2, "name": "ExpBackward0", "children": [3], "slots": []},
                            {
                                "id": 3,
                                "name": "AccumulateGrad",
                                "children": [],
                                "slots": [
                                    {
                                        "name": "leaf",
                                        "shape": [2, 8],
                                        "dtype": "float32",
                                        "nbytes": 64,
                                    },
                                    {
                                        "name": "leaf.grad",
                                        "shape": [2, 8],
                                        "dtype": "float32",
                                        "nbytes": 64,
                                    },
                                ],
                            },
                        ],
                    },
                    "snippets": [
                        {
                            "file": "pkg/engines.py",
                            "line": 26,
                            "first_line": 25,
                            "lines": ["def entropy_of(x):", "    return -(x.exp() * x).sum(-1)"],
                        }
                    ],
                }
            ],
        },
        {
            "target": "pkg.engines:Engine",
            "mode": "forward-only",
            "verdict": "error",
            "error": "boom",
            "findings": [],
            "retained_bytes": 0,
            "kind": None,
            "settings": [],
            "warnings": [],
            "traceback": "TB",
        },
    ],
    "watch": {
        "methods": ["pkg.engines:Engine.forward_step"],
        "calls": [{"method": "forward_step", "bytes": 4096}],
        "processes": ["pid 7"],
        "skip": 1,
        "micro_batches": 3,
        "boundary": "backward",
        "loop": "train.py:27 in main",
    },
}

#: string fields whose value is one of a few words: the rest are free text an engine or a writer controls
_WORDS = {"mode", "verdict", "holder", "cause", "severity", "kind", "part"}
#: what an attacker writes into a string: markup, escape codes, bidi, NUL, surrogates, command syntax
_CHARS = st.sampled_from(
    list("<>&\"'`=/[]{}:;,%#?\\ \n\r\tabcXYZ0129")
    + [
        "\x00",
        "\x07",
        "\x1b",
        "\x85",
        "\u202e",
        "\u2066",
        "\ud800",
        "\udcff",
        "\ufeff",
        "\uffff",
        "é",
        "数",
    ]
)
_PAYLOADS = st.sampled_from(
    [
        "<script>document.documentElement.setAttribute('data-pwned','1')</script>",
        "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">",
        '"><svg onload=alert(1)>',
        "</style><script>alert(3)</script>",
        "]]><x>",
        "[/]",
        "[link=https://x]y[/link]",
        "\x1b[2K\x1b[32mCLEAN\x1b[0m",
        "::error file=a,line=1::pwned",
        "%0A::error::x",
        "javascript:alert(1)",
        "/proc/self/environ",
        "../../etc/passwd",
        "{{7*7}}",
    ]
)
HOSTILE_TEXT = st.lists(st.one_of(_CHARS, _PAYLOADS), max_size=12).map("".join)
_HOSTILE_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    HOSTILE_TEXT,
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(HOSTILE_TEXT, st.integers(), max_size=2),
    st.just({}),
    st.just([]),
    st.just([[[[[]]]]]),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a document: keys of objects, indices of lists."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _free_strings(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    for path in _paths(node, prefix):
        value: Any = node
        for step in path:
            value = value[step]
        key = next((p for p in reversed(path) if isinstance(p, str)), "")
        if isinstance(value, str) and key not in _WORDS and path != ("schema_version",):
            yield path


PLACES = [p for p in _paths(BASE) if p]
FREE = list(_free_strings(BASE))


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(doc)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


@st.composite
def hostile_reports(draw: st.DrawFn) -> str:
    """A report with hostile strings in free-text fields, some places replaced by wrong values, or anything at all."""
    kind = draw(st.sampled_from(["strings", "mutated", "anything"]))
    if kind == "anything":
        value = draw(
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_TEXT,
                lambda inner: (
                    st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3)
                ),
                max_leaves=10,
            )
        )
        if draw(st.booleans()):
            value = {"schema_version": 1, "results": [value]}
        return json.dumps(value)
    doc = copy.deepcopy(BASE)
    for path in draw(st.lists(st.sampled_from(FREE), min_size=1, max_size=12)):
        doc = _replaced(doc, path, draw(HOSTILE_TEXT))
    if kind == "mutated":
        for path in draw(st.lists(st.sampled_from(PLACES), min_size=1, max_size=3)):
            try:
                doc = _replaced(doc, path, draw(_HOSTILE_VALUE))
            except (KeyError, IndexError, TypeError):  # an earlier mutation removed its parent
                pass
    text = json.dumps(doc)
    if draw(st.booleans()):  # what json.dumps would never write, but a file can hold
        text = text.replace(
            "4096.0", draw(st.sampled_from(["NaN", "Infinity", "1e400", "-0", "4096"])), 1
        )
    return text


# --- the audit hook: rendering opens no file ------------------------------------------------------------

# Imported now (every renderer, and what each imports on its first call, wide characters
# included): importing reads .py files and package data; rendering itself must read nothing.
for _fmt in FORMATS:
    renderer(_fmt)
    _warm = _replaced(BASE, ("results", 0, "target"), "é 数 🙂 \u202e \x1b")
    render(load(json.dumps(_warm)), _fmt, fail_on="warning", color=True, width=80)
_opened: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # A lazy import inside a library (rich loads a Unicode table for a new script) reads a
    # compiled module; nothing a report names can be one.
    if event == "open" and _opened is not None and not str(args[0]).endswith(".pyc"):
        _opened.append(str(args[0]))


sys.addaudithook(_audit)  # permanent, as every audit hook; it records only while a test watches


def _render_all(report: Any) -> dict[str, str]:
    global _opened
    report_validator()  # the suite's own schema check reads its file once, before the audit
    _opened = []
    try:
        pages = {fmt: render(report, fmt) for fmt in FORMATS}
        pages["text-warning"] = render(report, "text", fail_on="warning", color=True, width=80)
        opened = _opened
    finally:
        _opened = None
    assert opened == [], opened
    return pages


#: every element the page itself writes; anything else came from a report
PAGE_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "header",
    "h1",
    "h2",
    "h3",
    "h4",
    "p",
    "main",
    "section",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "a",
    "code",
    "svg",
    "polyline",
    "span",
    "div",
    "strong",
    "figure",
    "figcaption",
    "line",
    "text",
    "rect",
    "article",
    "dl",
    "dt",
    "dd",
    "pre",
    "ul",
    "li",
    "details",
    "summary",
    "defs",
    "marker",
    "path",
    "g",
    "footer",
}


class _Page(HTMLParser):
    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def assert_only_the_page_s_own_markup(page: str) -> None:
    parsed = _Page(page)
    tags = {tag for tag, _ in parsed.tags}
    assert tags <= PAGE_TAGS, tags - PAGE_TAGS
    for tag, attrs in parsed.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        if tag == "a":
            assert (attrs.get("href") or "").startswith("#result-"), attrs
        assert "data-pwned" not in attrs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_reports())
def test_the_loader_and_every_renderer_hold_against_generated_reports(text: str) -> None:
    try:
        report = load(text, "fuzzed.json")
    except UsageError as exc:
        assert "\n" not in exc.message and exc.message.startswith("fuzzed.json ")
        return
    pages = _render_all(report)
    assert_only_the_page_s_own_markup(pages["html"])
    assert "\x1b" not in pages["text"] and "\x1b" not in pages["github"]
    for line in pages["github"].splitlines():
        assert line.startswith(("::error", "::warning", "::notice", "leakscope: ")), line


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_reports(), st.sampled_from(FORMATS))
def test_the_render_command_exits_0_or_2_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, text: str, fmt: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "report.json"
    path.write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["render", str(path), "--format", fmt])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        assert len(result.stderr.splitlines()) == 1
        if fmt == "json":
            assert json.loads(result.stdout)["error"]
    assert "Traceback" not in result.output


# --- in a real browser: no script runs, whatever the report says ----------------------------------------


def _browser() -> str | None:
    for name in ("chromium", "chromium-headless-shell", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _dom(browser: str, page: Path, profile: Path) -> tuple[str, list[str]]:
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    console = [
        line for line in done.stderr.splitlines() if "CONSOLE" in line or ":INFO:console" in line
    ]
    return done.stdout, console


def _hostile_pages() -> list[str]:
    """The hostile payloads in every free-text field, then a few generated reports, as pages."""
    pages = []
    payload = (
        "<script>document.documentElement.setAttribute('data-pwned','1')</script>"
        "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">"
        "\"'><svg onload=\"document.documentElement.setAttribute('data-pwned','3')\">"
    )
    doc = copy.deepcopy(BASE)
    for path in FREE:
        doc = _replaced(doc, path, payload)
    pages.append(render(load(json.dumps(doc)), "html"))
    # A report built in Python may hold anything in an integer field: the page escapes it too.
    import dataclasses

    report = load(json.dumps(BASE))
    result = dataclasses.replace(report.results[0], rank=payload)  # type: ignore[arg-type]
    pages.append(render(dataclasses.replace(report, results=(result,)), "html"))
    return pages


def test_no_script_runs_in_headless_chromium(tmp_path: Path) -> None:
    browser = _browser()
    if browser is None:
        if os.environ.get("LEAKSCOPE_REQUIRE_BROWSER"):
            pytest.fail(
                "LEAKSCOPE_REQUIRE_BROWSER is set but no chromium: apt-get install -y chromium"
            )
        pytest.skip("no chromium (apt-get install -y chromium)")
    pages = _hostile_pages()
    generated: list[str] = []

    @settings(
        max_examples=3, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(hostile_reports())
    def collect(text: str) -> None:
        try:
            generated.append(render(load(text), "html"))
        except UsageError:
            pass

    collect()
    for i, html in enumerate([*pages, *generated]):
        page = tmp_path / f"page-{i}.html"
        page.write_text(html, encoding="utf-8", errors="backslashreplace")
        dom, console = _dom(browser, page, tmp_path / "profile")
        assert console == [], console  # nothing ran, nothing failed to load
        assert_only_the_page_s_own_markup(
            dom
        )  # no element the report wrote, no data-pwned set by a script
        assert "&lt;script&gt;" in dom or i >= len(pages)  # the payload is there, as text
