"""Adapters: how framework engines that cannot be built as ``Engine(model)`` are driven.

``registry`` finds the adapter for a target (built-ins and the ``leakscope.adapters``
entry-point group) and resolves a target to its EngineSpec; ``verl`` drives verl's FSDP
engines. ``Adapter`` and ``AdapterHooks`` are the interface third-party adapters implement
(docs/adapters.md). Nothing here imports torch at module load.
"""

from leakscope.adapters.registry import Adapter, AdapterHooks

__all__ = ["Adapter", "AdapterHooks"]
