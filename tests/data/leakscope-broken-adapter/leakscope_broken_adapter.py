"""Fails on import, as a half-installed adapter package would."""

raise ImportError("leakscope_broken_adapter needs a framework that is not installed")
