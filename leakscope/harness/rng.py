"""Seeded random number generators for one engine step, restored afterwards.

An engine that draws random numbers (dropout, sampling a subset, a random
metric name) would otherwise take a different path on each of the runs one
check makes (attribute, confirm, release), and on each check. Seeding torch,
``random`` and numpy (when the engine uses it) before every step makes those
runs identical, so the verdict and paths are stable; the caller's generator
states are put back afterwards.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch (CPU, and CUDA when initialised), ``random`` and numpy; restore them on exit."""
    import torch

    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []  # type: ignore[no-untyped-call]
    py_state = random.getstate()
    numpy = sys.modules.get("numpy")
    np_state = numpy.random.get_state() if numpy is not None else None
    with torch.random.fork_rng(devices=cuda):
        torch.default_generator.manual_seed(seed)
        for device in cuda:
            torch.cuda.default_generators[device].manual_seed(seed)
        random.seed(seed)
        if numpy is not None:
            numpy.random.seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            if numpy is not None:
                numpy.random.set_state(np_state)
