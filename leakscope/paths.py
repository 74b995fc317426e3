"""Holder paths: how a finding names the reference that keeps a graph alive.

Torch-free: renderers and the gate use it.
"""

from __future__ import annotations

MAX_SHOWN = 160


def shorten(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` with its middle elided when longer than ``limit`` (a 3000-deep path stays readable)."""
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"


__all__ = ["MAX_SHOWN", "shorten"]
