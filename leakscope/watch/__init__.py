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
