"""Room on the main thread's C stack for the job to free a deep graph leakscope has walked.

# NOTE [Freeing a walked chain]
# A retained chain of graph nodes (a running sum ``total = total + loss`` over a
# long epoch: one ``AddBackward0`` per step) is freed by torch iteratively, as
# long as no node has a Python wrapper. Reading ``next_functions`` gives each
# node a wrapper that lives as long as the node (NOTE [Deep graphs after a Python
# walk] in leakscope/probe/autograd.py), and the chain's later free then recurses
# once per node through the wrappers' deallocation, about 160 bytes of C stack
# each: the default 8 MiB main-thread stack overflows near 50,000 nodes, and the
# job, not leakscope, dies of SIGSEGV wherever it drops the chain (``del total``,
# or the interpreter's exit). No walk that names the chain's holder can avoid
# the wrappers, so the job gets the room instead: ``watch`` starts the job's
# process with a larger soft ``RLIMIT_STACK`` (:func:`deep_stack_for_children`;
# the kernel lays the process out for it when it starts), leaving the threads'
# default stack size as glibc would have set it (:func:`keep_thread_stacks`), and
# a job watched in-process raises its own soft limit (:func:`deep_stack_here`),
# which the main thread's stack may use while the address space below it is free.
# DEEP_STACK_BYTES frees a 10^6-node chain with a margin of three.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: the soft stack limit a watched job runs with (bytes): a 10^6-node walked chain needs about 160 MiB
DEEP_STACK_BYTES = 512 << 20
#: the threads' stack size glibc picks when the soft limit is unlimited (and the usual default)
THREAD_STACK_BYTES = 8 << 20


def _raise_soft(limit: int) -> tuple[int, int] | None:
    """Raise the soft ``RLIMIT_STACK`` to ``limit`` (never above the hard limit, never lower it); the
    previous limits, or None when nothing changed."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        if soft == resource.RLIM_INFINITY or soft >= limit:
            return None
        wanted = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        if wanted <= soft:
            return None
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))
    except (OSError, ValueError):
        return None
    return soft, hard


@contextlib.contextmanager
def deep_stack_for_children(limit: int = DEEP_STACK_BYTES) -> Iterator[int | None]:
    """Processes started inside get a soft stack limit of ``limit`` (NOTE [Freeing a walked chain]);
    this process's limit is put back on exit. Yields the soft limit it had (the threads' stack
    size a child keeps: :func:`keep_thread_stacks`), or None when it did not change it."""
    previous = _raise_soft(limit)
    try:
        yield previous[0] if previous is not None else None
    finally:
        if previous is not None:
            import resource

            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_STACK, previous)


def deep_stack_here(limit: int = DEEP_STACK_BYTES) -> None:
    """Let this process's main thread grow its stack up to ``limit`` (NOTE [Freeing a walked chain])."""
    _raise_soft(limit)


def keep_thread_stacks(size: int = THREAD_STACK_BYTES) -> None:
    """New threads keep the usual stack size (glibc sizes them from the soft limit it saw at start):
    a job started with :func:`deep_stack_for_children` makes its threads as it would have."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        setter = libc.pthread_setattr_default_np
        init, destroy, set_size = (
            libc.pthread_attr_init,
            libc.pthread_attr_destroy,
            libc.pthread_attr_setstacksize,
        )
    except (OSError, AttributeError):  # not glibc: its threads are not sized from the limit
        return
    attr = ctypes.create_string_buffer(128)  # pthread_attr_t is 56 bytes on 64-bit glibc
    if init(attr) != 0:
        return
    try:
        if set_size(attr, ctypes.c_size_t(size)) == 0:
            setter(attr)
    finally:
        destroy(attr)


__all__ = [
    "DEEP_STACK_BYTES",
    "THREAD_STACK_BYTES",
    "deep_stack_for_children",
    "deep_stack_here",
    "keep_thread_stacks",
]
