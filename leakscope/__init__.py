"""leakscope: find autograd graphs a training engine's forward_step keeps alive.

Importing this package imports neither torch nor tensordict: the library entry
points load them on first use, so ``leakscope --help`` and the pytest plugin
stay fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.4.0"

if TYPE_CHECKING:
    from leakscope.api import check
    from leakscope.live.session import Watch, watch
    from leakscope.options import CheckOptions, MicroBatchKey, ModelSize
    from leakscope.results import Finding, Mode, Report, Source, TargetResult, Verdict

_LAZY = {
    "check": "leakscope.api",
    "Watch": "leakscope.live.session",
    "watch": "leakscope.live.session",
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
    """The public names, the lazy ones (``check``, ``watch``, the result types) included."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'leakscope' has no attribute {name!r}")

    return getattr(importlib.import_module(module), name)
