"""Clean engines that record, when their module is imported, how their check process started.

``tests/test_zygote.py`` checks targets from this file with ``LEAKSCOPE_TEST_LAUNCH_LOG``
set: each check process appends one JSON line: its pid and parent pid (a forked
child's parent is the zygote, a spawned one's is the CLI), and the process state
a fresh interpreter has, which a forked child must have too.
"""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import sys
import threading

import torch

from fixtures._common import StepEngine


def _state() -> dict[str, object]:
    return {
        "own_session": os.getsid(0) == os.getpid(),
        "stdin": os.readlink("/proc/self/fd/0"),
        "stdout_is_stderr": os.path.sameopenfile(1, 2),
        "sigint": repr(signal.getsignal(signal.SIGINT)),
        "sigterm": repr(signal.getsignal(signal.SIGTERM)),
        "sigchld": repr(signal.getsignal(signal.SIGCHLD)),
        "sigpipe": repr(signal.getsignal(signal.SIGPIPE)),
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "frozen": gc.get_freeze_count(),
        "gc_enabled": gc.isenabled(),
        "threads": threading.active_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_state_is_initial": bool(
            torch.equal(
                torch.random.get_rng_state(),
                torch.Generator().manual_seed(torch.initial_seed()).get_state(),
            )
        ),
        "cuda_initialized": torch.cuda.is_initialized(),
        "openblas_env": os.environ.get("OPENBLAS_NUM_THREADS"),
        "argv0": os.path.basename(sys.argv[0]),
    }


_log = os.environ.get("LEAKSCOPE_TEST_LAUNCH_LOG")
if _log:
    record = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "state": _state(),
        "random": random.random(),
        "torch_seed": torch.initial_seed(),
    }
    with open(_log, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


class First(StepEngine):
    """A clean engine."""


class Second(StepEngine):
    """Another clean engine, in the same file: a second target, a second process."""
