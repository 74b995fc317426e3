"""``leakscope watch``: find graph retention in a real job, on its real model.

One module per concept: :mod:`~leakscope.watch.methods` (which methods),
:mod:`~leakscope.watch.patcher` (patch them, now or on import, and put them
back), :mod:`~leakscope.watch.observer` (record each watched call, judge
before the next), :mod:`~leakscope.watch.session` (one watch: the library API),
:mod:`~leakscope.watch.launcher` (run a script or module as ``__main__``),
:mod:`~leakscope.watch.processes` (every process of the job, merged reports)
and :mod:`~leakscope.watch.job` (what the CLI calls). Importing this package
imports no torch.
"""

from __future__ import annotations

from leakscope.watch.session import Watch, WatchOptions, watch

__all__ = ["Watch", "WatchOptions", "watch"]


# NOTE [A callable package]
# ``leakscope.watch("pkg.mod:Class.method")`` is the library API (issue 14), and
# ``leakscope.watch`` is also this package: once any ``leakscope.watch.*`` module
# is imported, Python binds the package as the ``watch`` attribute of
# ``leakscope``, shadowing a lazily exported function. So the package itself is
# callable: calling it calls :func:`leakscope.watch.session.watch`.
def _install_call() -> None:
    import sys
    import types
    from typing import Any

    class _WatchPackage(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Watch:
            return watch(*args, **kwargs)

    sys.modules[__name__].__class__ = _WatchPackage


_install_call()
del _install_call
