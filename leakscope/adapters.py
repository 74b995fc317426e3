"""Adapters: how targets that cannot be built as ``Engine(model)`` are driven.

Filled in by the adapter interface (see docs/adapters.md).
"""

from __future__ import annotations

from typing import Any


def find_adapter(resolved: Any) -> Any:
    """The adapter that recognises ``resolved``, or None for the plain protocol."""
    return None
