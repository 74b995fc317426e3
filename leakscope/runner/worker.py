"""The child side of an isolated check: ``python -m leakscope.runner.worker REQUEST.json``.

Started by :mod:`leakscope.runner.isolation`, one process per target: forked by
the zygote (:mod:`leakscope.runner.zygote`), which then calls
:func:`run_request`, or spawned as this module's ``main``. It checks the
target mode by mode with :func:`leakscope.runner.inprocess.check_target` and appends one
JSON line per finished result to the results file the request names, so the
parent keeps every mode that finished even if a later one crashes or hangs.

Nothing the engine does can reach the parent's report: file descriptor 1 is
pointed at stderr before any user code runs (C extensions that write to fd 1
included), and the process ends with ``os._exit`` so atexit handlers and
non-daemon threads the engine left behind cannot keep it alive.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import IO, NoReturn

from leakscope.errors import UsageError
from leakscope.harness.runtime import resolve_device
from leakscope.policy import allow_result
from leakscope.runner.child import run_child, write_record
from leakscope.serialize import options_from_data, to_data


def _run(request: dict[str, object], out: IO[str]) -> None:
    from leakscope.runner.inprocess import check_target

    options = dataclasses.replace(
        options_from_data(request["options"]), isolate=False, timeout=None, jobs=1
    )
    try:
        options = resolve_device(options)  # as leakscope.check does in process
    except UsageError as exc:
        write_record(out, {"usage_error": exc.message})
        return
    # As leakscope.check does in process: allowlisted findings are marked before they leave.
    check_target(
        request["target"],
        options,
        on_result=lambda result: write_record(
            out, {"result": to_data(allow_result(result, options.allowlist))}
        ),
    )
    torch = sys.modules.get("torch")
    if torch is not None:
        write_record(out, {"torch_version": str(torch.__version__)})


def main(argv: list[str]) -> None:
    """Run one request and exit without running anything the engine registered."""
    run_request(argv[0])


def run_request(request_path: str) -> NoReturn:
    """Check the request in ``request_path``, stream the results, ``os._exit``
    (:func:`leakscope.runner.child.run_child`)."""
    # the parent shows each phase live (NOTE [Phases from the child])
    run_child(request_path, _run, first_phase="importing torch and leakscope")


if __name__ == "__main__":
    main(sys.argv[1:])
