"""Renderers: pure functions from a :class:`~leakscope.results.Report` to a string.

One module per format (``text``, ``json_report``, ``junit``, ``sarif``, ``github``, ``html``; ``tree``
and ``dot`` draw a ``GraphView``); ``summary`` holds what several share, ``escape`` the one escaping
helper per format, ``graph_layout`` lays a graph out for the HTML page (its CSS is
``report.css``), ``progress`` is the live status line on stderr. Writing to stdout or a file is the
caller's job (:mod:`leakscope.commands.common`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

FORMATS = ("text", "json", "junit", "sarif", "github", "html")

_MODULES = {
    "text": "leakscope.render.text",
    "json": "leakscope.render.json_report",
    "junit": "leakscope.render.junit",
    "sarif": "leakscope.render.sarif",
    "github": "leakscope.render.github",
    "html": "leakscope.render.html",
}


def renderer(fmt: str) -> Callable[..., str]:
    """The ``render`` function of format ``fmt``."""
    module = importlib.import_module(_MODULES[fmt])
    fn: Callable[..., str] = module.render
    return fn


def render(report: object, fmt: str, **kwargs: object) -> str:
    """Render ``report`` in ``fmt`` (keyword options are format-specific)."""
    return renderer(fmt)(report, **kwargs)
