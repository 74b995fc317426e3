"""The child side of an isolated check: ``python -m leakscope._worker REQUEST.json``.

Started by :mod:`leakscope.isolation`, one process per target. It checks the
target mode by mode with :func:`leakscope.api.check_target` and appends one
JSON line per finished result to the results file the request names, so the
parent keeps every mode that finished even if a later one crashes or hangs.

Nothing the engine does can reach the parent's report: file descriptor 1 is
pointed at stderr before any user code runs (C extensions that write to fd 1
included), and the process ends with ``os._exit`` so atexit handlers and
non-daemon threads the engine left behind cannot keep it alive.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import sys
import traceback
from typing import IO, Any


def _write(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def freeze_heap(target: str) -> None:
    """Import torch, tensordict and the target's module, then move every object into gc's permanent generation.

    # NOTE [Frozen heap]
    # A check runs the cyclic GC several times (``liveness.settle``) so that
    # only real holders keep a graph alive. With torch imported the heap holds
    # some 300k objects and each full collection costs ~0.3-0.6 s, most of a
    # check's time. Objects frozen here are never scanned again; everything the
    # check creates afterwards (models, graphs, the engine's outputs, cycles)
    # is still collected normally, so verdicts do not change. Only a throwaway
    # child process may do this: frozen objects are never freed.
    """
    import gc

    import tensordict  # noqa: F401
    import torch  # noqa: F401

    import leakscope.attribution  # noqa: F401
    from leakscope.target import resolve

    try:
        resolve(target)  # import the user's module now, so its objects are frozen too
    except Exception:  # noqa: S110 - check_target reports it as the target's error
        pass
    gc.collect()
    gc.freeze()


def _run(request: dict[str, Any], out: IO[str]) -> None:
    from leakscope.api import check_target, resolve_device
    from leakscope.errors import UsageError
    from leakscope.serialize import options_from_data, to_data

    freeze_heap(request["target"])
    options = dataclasses.replace(options_from_data(request["options"]), isolate=False)
    try:
        options = resolve_device(options)  # as leakscope.check does in process
    except UsageError as exc:
        _write(out, {"usage_error": exc.message})
        return
    check_target(request["target"], options, on_result=lambda result: _write(out, {"result": to_data(result)}))
    torch = sys.modules.get("torch")
    if torch is not None:
        _write(out, {"torch_version": str(torch.__version__)})


def main(argv: list[str]) -> None:
    """Run one request and exit without running anything the engine registered."""
    os.dup2(2, 1)  # engine prints, even from C, land on stderr
    sys.stdout = sys.stderr
    # A segfault in native code prints the Python stack it happened in.
    faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    with open(argv[0], encoding="utf-8") as f:
        request = json.load(f)
    status = 0
    with open(request["results"], "a", encoding="utf-8") as out:
        try:
            _run(request, out)
        except BaseException as exc:  # noqa: B036 - the parent turns this line into an error result
            _write(out, {"fatal": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
            status = 1
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
