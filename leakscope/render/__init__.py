"""Renderers: pure functions from a :class:`~leakscope.results.Report` to a string.

One module per format. Writing the string to stdout or a file is the caller's job.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

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


def render(report: Any, fmt: str, **kwargs: Any) -> str:
    """Render ``report`` in ``fmt`` (keyword options are format-specific)."""
    return renderer(fmt)(report, **kwargs)
