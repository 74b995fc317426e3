"""Process-level settings a check runs under: intra-op threads, and a cheap exit.

Both exist because a check's wall time is dominated by what torch costs the
process, not by leakscope's own work (see docs/performance.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from leakscope.errors import UsageError

if TYPE_CHECKING:
    from leakscope.options import CheckOptions


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run torch's intra-op work on one thread for the check; restore the count afterwards.

    The tiny model's kernels take microseconds, so a second intra-op thread
    gains nothing, and on a small shared CI machine (2 cores, other jobs) its
    spin-waits stalled one training step for 0.2-0.4 s. Retention does not
    depend on the thread count.
    """
    import torch

    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def prepare_exit() -> None:
    """Let a process that imported torch exit without a last full-heap collection.

    # NOTE [Exit cost]
    # At shutdown CPython collects the whole heap; after ``import torch`` (and
    # FSDP, which brings in torch._dynamo and sympy) that heap holds millions of
    # container objects and the collection took 2 s on the 2-core CI machine,
    # a third of a whole check. ``gc.freeze()`` moves every object to the
    # permanent generation, which collections skip. atexit handlers and module
    # teardown still run; only ``__del__`` of objects in reference cycles is
    # skipped, which CPython never promises at exit anyway. Call it only when
    # the process is about to exit; without torch loaded it does nothing.
    """
    if "torch" in sys.modules:
        gc.freeze()


def resolve_device(options: CheckOptions) -> CheckOptions:
    """``device=None`` means CUDA when available, else CPU."""
    import torch

    if options.device is None:
        return dataclasses.replace(options, device="cuda" if torch.cuda.is_available() else "cpu")
    if options.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available here; use --device cpu")
    return options


__all__ = ["prepare_exit", "resolve_device", "single_threaded"]
