"""A process group for the duration of a check, and nothing left behind after it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def process_group(device: str | None = "cpu") -> Iterator[bool]:
    """Create a single-process gloo group if none exists; destroy it afterwards.

    Yields True when the group was created here. Under torchrun (a group
    already exists) the existing group is used and left alone. A ``HashStore``
    avoids binding a TCP port.
    """
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        yield False
        return
    backend = "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"
    store = dist.HashStore()  # type: ignore[attr-defined]
    dist.init_process_group(backend, store=store, rank=0, world_size=1)
    try:
        yield True
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
