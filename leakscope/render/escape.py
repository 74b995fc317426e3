"""Untrusted text made safe for each output format: one helper per format, used at its edge.

Engines are arbitrary user code and reports are files anyone can write, so every
string a renderer did not write itself (a target, a holder path, an error
message, a file name, a grad_fn name, a number read from a report) passes through
the helper of the format it is written into, once, where it is written:

- :func:`html`: HTML text and attribute values (``&<>"'``), integers included;
- :func:`terminal`: the text report and stderr lines: control characters, ANSI
  escapes, bidi and other invisible format characters shown as ``\\x1b``, ``\\u202e``,
  so an engine cannot move the cursor, recolour, or reorder what a reader sees;
- :func:`rich_text`: a :class:`rich.text.Text` of :func:`terminal` text, which rich
  never parses as markup (``[/]`` cannot crash it, ``[link=...]`` cannot restyle it);
- :func:`xml`: characters XML 1.0 forbids (NUL, most C0 controls, lone
  surrogates, U+FFFE/U+FFFF) shown the same way, so the document always parses;
- :func:`sarif_uri`: a file path as a percent-encoded URI reference;
- :func:`github_data` and :func:`github_property`: GitHub workflow command
  messages (``%``, CR, LF) and property values (also ``:`` and ``,``);
- :func:`python_string`: a double-quoted Python string literal in printable ASCII (the
  test ``watch --emit-test`` writes), so no bidi control reorders its source.

See docs/security.md for what each format guarantees.
"""

from __future__ import annotations

import html as _html
import json
import os
import re
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from rich.text import Text

# Characters a terminal acts on or that change what a reader sees without being seen:
# C0 and C1 controls and DEL, the soft hyphen, bidi embeddings, overrides, isolates and
# marks, zero-width characters, line and paragraph separators, the BOM, interlinear
# annotations, tag characters, and lone surrogates (which no encoder accepts).
_INVISIBLE = (
    "\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f"
)
_TERMINAL = re.compile(f"[\x00-\x1f{_INVISIBLE}]")
_TERMINAL_LINES = re.compile(f"[\x00-\x09\x0b-\x1f{_INVISIBLE}]")
# XML 1.0 allows TAB, LF, CR, U+0020-U+D7FF, U+E000-U+FFFD and U+10000 and above; C1
# controls are allowed but discouraged, and are shown as well.
_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def visible(char: str) -> str:
    """``\\x1b``, ``\\u202e``, ``\\U000e0041``: how one replaced character is shown."""
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _show(match: re.Match[str]) -> str:
    return visible(match.group())


def terminal(value: object, *, newlines: bool = False) -> str:
    """``value`` as text a terminal shows as it is (newlines kept only when ``newlines``)."""
    return (_TERMINAL_LINES if newlines else _TERMINAL).sub(_show, str(value))


def rich_text(value: object, style: str = "") -> Text:
    """A rich ``Text`` of :func:`terminal` text: never parsed as markup, never a control code."""
    from rich.text import Text

    return Text(terminal(value), style=style)


def html(value: object) -> str:
    """``value`` as HTML text or a quoted attribute value (numbers too: a report may lie about types)."""
    return _html.escape(str(value), quote=True)


def xml(value: object) -> str:
    """``value`` with every character XML 1.0 cannot carry shown as ``\\x00``; ElementTree escapes the rest."""
    return _XML.sub(_show, str(value))


def sarif_uri(file: str) -> str:
    """A SARIF ``artifactLocation.uri``: ``file:///...`` for an absolute path, else a relative reference.

    Percent-encoded, so a space, ``%``, ``#``, ``?`` or a ``:`` in the first segment
    (which would read as a scheme) cannot change what the URI names.
    """
    posix = file.replace(os.sep, "/") if os.sep != "/" else file
    encoded = quote(posix, safe="/", errors="backslashreplace")
    if PurePosixPath(posix).is_absolute():
        return "file://" + ("" if encoded.startswith("/") else "/") + encoded
    return encoded


def github_data(text: object) -> str:
    """A workflow command's message: terminal-safe, with ``%``, CR and LF escaped as the runner requires."""
    safe = terminal(text, newlines=True)
    return safe.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(text: object) -> str:
    """A workflow command's property value: as :func:`github_data`, and ``:`` and ``,`` (the delimiters)."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


def python_string(text: str) -> str:
    """``text`` as a double-quoted Python string literal with the same value, as formatters write
    it: a JSON string is one. Every character outside printable ASCII is escaped (``\\u202e``),
    so an engine's string cannot restyle or reorder the source a reviewer reads."""
    return json.dumps(text)


__all__ = [
    "github_data",
    "github_property",
    "html",
    "python_string",
    "rich_text",
    "sarif_uri",
    "terminal",
    "visible",
    "xml",
]
