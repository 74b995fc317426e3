"""leakscope watch: start watching in every Python process of the job (see leakscope/live/processes.py).

Put first on PYTHONPATH by ``leakscope watch`` only; does nothing unless LEAKSCOPE_WATCH is set.
Then runs the sitecustomize this one shadows, if any.
"""

import os
import sys

if os.environ.get("LEAKSCOPE_WATCH"):
    try:
        from leakscope.live.processes import activate

        activate()
    except Exception as exc:  # never break the job's start-up
        sys.stderr.write(f"leakscope: watch could not start in pid {os.getpid()}: {type(exc).__name__}: {exc}\n")


def _chain() -> None:
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_leakscope_chained_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            return


_chain()
del _chain
