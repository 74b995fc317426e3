"""leakscope: find autograd graphs a training engine's forward_step keeps alive.

Importing this package imports neither torch nor tensordict: the library entry
points load them on first use, so ``leakscope --help`` and the pytest plugin
stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from leakscope.api import check
    from leakscope.options import CheckOptions, MicroBatchKey, ModelSize
    from leakscope.results import Finding, Mode, Report, Source, TargetResult, Verdict
    from leakscope.watch.session import Watch

_LAZY = {
    "check": "leakscope.api",
    "Watch": "leakscope.watch.session",
    "CheckOptions": "leakscope.options",
    "ModelSize": "leakscope.options",
    "MicroBatchKey": "leakscope.options",
    "Finding": "leakscope.results",
    "Mode": "leakscope.results",
    "Report": "leakscope.results",
    "Source": "leakscope.results",
    "TargetResult": "leakscope.results",
    "Verdict": "leakscope.results",
}

__all__ = [
    "CheckOptions",
    "Finding",
    "MicroBatchKey",
    "Mode",
    "ModelSize",
    "Report",
    "Source",
    "TargetResult",
    "Verdict",
    "Watch",
    "__version__",
    "check",
    "watch",
]


def __dir__() -> list[str]:
    """The public names, the lazy ones (``check``, the result types) included."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name == "watch":  # the package is callable: NOTE [A callable package]
        import importlib

        return importlib.import_module("leakscope.watch")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'leakscope' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
