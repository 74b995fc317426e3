"""Every engine-controlled string is escaped for its format, by one helper per format (render/escape.py).

Hostile engines (fixtures/bad/hostile.py) run through the real CLI, each beside its plain twin;
hand-built reports pin what each format makes of the characters it cannot carry.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

import pytest
from typer.testing import CliRunner

from fixtures.bad.hostile import SPOOF
from leakscope.cli import app
from leakscope.render import FORMATS, render
from leakscope.render.escape import github_data, github_property, html, sarif_uri, terminal, xml
from leakscope.results import Finding, Holder, Mode, Report, Source, TargetResult, Verdict
from tests.conftest import holder_path

pytestmark = pytest.mark.integration

runner = CliRunner()


def test_terminal_shows_control_ansi_and_bidi_characters() -> None:
    assert terminal("a\x1b[31mred\x07\x00") == "a\\x1b[31mred\\x07\\x00"
    assert terminal("abc\u202edef\u2066\u200b") == "abc\\u202edef\\u2066\\u200b"
    assert terminal("line\nnext\r") == "line\\x0anext\\x0d"
    assert terminal("line\nnext\r", newlines=True) == "line\nnext\\x0d"
    assert terminal("lone \udcff \U000e0041") == "lone \\udcff \\U000e0041"
    assert terminal("\x9b31m") == "\\x9b31m"  # the 8-bit CSI
    # The look-alike: printable text, accents, CJK, emoji and backslashes pass unchanged.
    plain = "output.model_output['é'] 数据 🙂 C:\\path [/] ok"
    assert terminal(plain) == plain


def test_html_escapes_every_value_numbers_included() -> None:
    assert (
        html("<script>\"x\"&'y'</script>")
        == "&lt;script&gt;&quot;x&quot;&amp;&#x27;y&#x27;&lt;/script&gt;"
    )
    assert html(12) == "12"


def test_xml_replaces_what_xml_forbids_and_keeps_the_rest() -> None:
    assert xml("a\x00b\x1bc\ud800\ufffe") == "a\\x00b\\x1bc\\ud800\\ufffe"
    assert xml("tab\tnew\nline é <&>") == "tab\tnew\nline é <&>"  # ElementTree escapes <&> itself


def test_sarif_uri_is_percent_encoded() -> None:
    assert sarif_uri("src/engine.py") == "src/engine.py"
    assert sarif_uri("src/my file#1?.py") == "src/my%20file%231%3F.py"
    assert sarif_uri("a:b.py") == "a%3Ab.py"  # would read as the scheme "a"
    assert sarif_uri("100%.py") == "100%25.py"
    assert sarif_uri("/tmp/a b/x.py") == "file:///tmp/a%20b/x.py"
    for uri in (sarif_uri("a:b c.py"), sarif_uri("dir/%zz?#.py")):
        assert (
            urlsplit(uri).scheme == ""
            and urlsplit(uri).query == ""
            and urlsplit(uri).fragment == ""
        )
    assert unquote(sarif_uri("dir/%zz?#.py")) == "dir/%zz?#.py"


def test_github_commands_escape_data_and_properties() -> None:
    assert github_data("50%\r\n::error::pwned") == "50%25\\x0d%0A::error::pwned"
    assert github_property("a,b:c\n") == "a%2Cb%3Ac%0A"
    assert github_data("\x1b[32mCLEAN") == "\\x1b[32mCLEAN"


# --- the text report: rich never parses an engine string as markup ----------------------------------

MARKUP = Report(
    results=(
        TargetResult(
            "pkg:[bold]E[/bold]",
            Mode.TRAIN,
            Verdict.LEAK,
            retained_bytes=4096,
            findings=(
                Finding(
                    holder_path("output", "[/]"),
                    Holder.RETURNED,
                    "[red]Grad[/red]",
                    3,
                    4096,
                    True,
                    "[/]",
                    source=Source("[link=https://example.com]x.py", 3, "[/]"),
                ),
                Finding(
                    holder_path("output", "[link=https://example.com]x[/link]"),
                    Holder.RETURNED,
                    "G",
                    3,
                    4096,
                    True,
                    "fix [b]it",
                    severity="warning",
                ),
            ),
        ),
    ),
    leakscope_version="[/]",
    torch_version="t",
    python_version="p",
)


@pytest.mark.parametrize("color", [False, True])
def test_engine_markup_is_printed_as_written(color: bool) -> None:
    text = render(MARKUP, "text", color=color)
    for literal in (
        "pkg:[bold]E[/bold]",
        "output[[/]]",
        "output[[link=https://example.com]x[/link]]",
        "[red]Grad[/red]",
        "[link=https://example.com]x.py:3 in [/]",
        "fix: fix [b]it",
        "leakscope [/]",
    ):
        assert literal in text, literal
    assert "\x1b]8;" not in text  # no hyperlink escape: [link=...] did not become a link


def test_a_markup_key_engine_and_its_plain_twin(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for target, keys in (
        ("MarkupKeys", ("output['[/]']", "output['[link=https://example.com][green]CLEAN']")),
        ("PlainKeys", ("output.slash", "output.link")),
    ):
        result = runner.invoke(
            app,
            [
                "check",
                f"fixtures.bad.hostile:{target}",
                "--no-isolate",
                "--mode",
                "train",
                "--micro-batches",
                "1",
                "--no-confirm",
            ],
        )
        assert result.exit_code == 1, result.output  # the leak, not a crash
        assert f"fixtures.bad.hostile:{target} [train] LEAK" in result.stdout
        for key in keys:
            assert key in result.stdout


# --- the terminal: an engine cannot print a green CLEAN over its ERROR --------------------------------


def test_an_engine_error_cannot_move_the_cursor_or_recolour_the_report() -> None:
    result = runner.invoke(
        app, ["check", "fixtures.bad.hostile:SpoofingError", "--no-isolate", "--mode", "train"]
    )
    assert result.exit_code == 3
    assert (
        "\x1b" not in result.stdout
        and "\u202e" not in result.stdout
        and "\x1b" not in result.stderr
    )
    assert "fixtures.bad.hostile:SpoofingError [train] ERROR" in result.stdout
    assert (
        terminal(SPOOF) in result.stdout
    )  # shown, visibly: \x1b[1A\x1b[2K\x1b[32m... \u202eKAEL\u202c
    assert result.stdout.rstrip().endswith("0 leak, 0 clean, 1 error (exit 3)")


def test_an_error_in_colour_has_only_leakscope_s_own_escape_codes() -> None:
    report = Report((TargetResult("pkg:E", Mode.TRAIN, Verdict.ERROR, error=SPOOF),), "0", "t", "p")
    coloured = render(report, "text", color=True)
    assert "\x1b[1A" not in coloured and "\x1b[2K" not in coloured and "\u202e" not in coloured
    assert "\x1b[1;33mERROR\x1b[0m" in coloured  # the verdict keeps leakscope's own colour


def test_a_plain_error_reads_as_written() -> None:
    """The look-alike: an ordinary message is shown unchanged."""
    result = runner.invoke(
        app, ["check", "fixtures.bad.hostile:PlainError", "--no-isolate", "--mode", "train"]
    )
    assert result.exit_code == 3
    assert (
        "RuntimeError: cannot open /data/shard-0.bin at fixtures/bad/hostile.py:" in result.stdout
    )


# --- every format, one hostile report ------------------------------------------------------------------

PAYLOAD = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>\x1b[31m\u202e\x00%\r\n::error::x,y:z]]>"


def _hostile_report() -> Report:
    src = Source(f"dir/{PAYLOAD}.py", 3, PAYLOAD)
    finding = Finding(
        holder_path("output", PAYLOAD),
        Holder.RETURNED,
        PAYLOAD,
        3,
        4096,
        True,
        PAYLOAD,
        bytes_by_cause={PAYLOAD: 1, "activations": 2},
        source=src,
        allowed_reason=PAYLOAD,
        stored_at=src,
        store_op=PAYLOAD,
        called_from=(src,),
    )
    result = TargetResult(
        PAYLOAD,
        Mode.TRAIN,
        Verdict.LEAK,
        error=PAYLOAD,
        findings=(finding,),
        retained_bytes=4096,
        warnings=(PAYLOAD,),
        settings=(PAYLOAD,),
        keys_read=(PAYLOAD,),
    )
    return Report((result,), PAYLOAD, PAYLOAD, PAYLOAD)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def test_a_hostile_report_in_every_format() -> None:
    report = _hostile_report()
    for fmt in FORMATS:
        out = render(report, fmt)
        if fmt in ("text", "github"):
            assert "\x1b" not in out and "\u202e" not in out and "\x00" not in out, fmt
        if fmt == "github":
            # one command per line, each message on its line: no injected ::error:: command
            assert all(
                line.startswith(("::error ", "::warning ", "::notice ", "leakscope: "))
                for line in out.splitlines()
            )
            assert "\r" not in out
        if fmt == "junit":
            ET.fromstring(out.encode())
        if fmt in ("json", "sarif"):
            json.loads(out)
        if fmt == "html":
            tags = _Tags()
            tags.feed(out)
            assert {t for t, _ in tags.tags}.isdisjoint(
                {"script", "img", "iframe", "object", "embed"}
            )
            assert not [a for _, attrs in tags.tags for a, _ in attrs if a.startswith("on")]
    sarif = json.loads(render(report, "sarif"))
    uri = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"][
        "uri"
    ]
    assert urlsplit(uri).scheme == "" and "%3Cscript%3E" in uri


def test_numbers_that_are_not_numbers_are_escaped_in_html() -> None:
    """A Report built in Python can carry any object in an int field: the page escapes it as text."""
    import dataclasses

    from leakscope.results import GraphView, ViewNode

    script = "<script>alert(1)</script>"
    view = GraphView(
        "pkg:E", "train", "output.x", 0, (ViewNode(script, "N", (), ()),), script, False
    )  # type: ignore[arg-type]
    finding = Finding(
        holder_path("output", "x"), Holder.RETURNED, "G", script, 0, True, "h", graph=view
    )  # type: ignore[arg-type]
    result = TargetResult("pkg:E", Mode.TRAIN, Verdict.CLEAN, findings=(finding,), rank=script)  # type: ignore[arg-type]
    page = render(Report((dataclasses.replace(result),), "0", "t", "p"), "html")
    assert "<script" not in page and "&lt;script&gt;" in page
