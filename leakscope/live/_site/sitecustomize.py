"""leakscope watch: start watching in every Python process of the job (see leakscope/live/processes.py).

Put first on PYTHONPATH by ``leakscope watch`` only; does nothing unless ``site`` imports it as
``sitecustomize`` at start-up and LEAKSCOPE_WATCH is set. Then runs the sitecustomize this one
shadows, if any.

# NOTE [The sitecustomize it shadows]
# ``site`` runs ``import sitecustomize`` at the end of its start-up, when
# ``sys.path`` holds PYTHONPATH's entries (made absolute), the standard library
# and site-packages (with what their ``.pth`` files added), and not yet the
# script's directory or the working directory that becomes ``sys.path[0]``
# afterwards. ``leakscope watch`` put this directory first on PYTHONPATH, so
# the module that ``import sitecustomize`` would have found without it is the
# first ``sitecustomize`` in the entries after this directory, at that moment:
# that one is run, and no other. Imported any other way (by its package name,
# or after start-up, when ``sys.path[0]`` may be the working directory), this
# module does nothing at all.
"""

import os
import sys


def _main() -> None:
    if os.environ.get("LEAKSCOPE_WATCH"):
        try:
            from leakscope.live.processes import activate

            activate()
        except Exception as exc:  # never break the job's start-up
            sys.stderr.write(
                f"leakscope: watch could not start in pid {os.getpid()}: {type(exc).__name__}: {exc}\n"
            )
    _chain()


def _chain() -> None:
    """Run the sitecustomize this one shadows (NOTE [The sitecustomize it shadows])."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    entries = [e for e in sys.path if isinstance(e, str)]
    mine = [
        i
        for i, entry in enumerate(entries)
        if os.path.isabs(entry) and os.path.abspath(entry) == here
    ]
    if not mine:
        return
    # Absolute entries only: a relative one would be looked up from the working directory.
    after = [e for e in entries[mine[0] + 1 :] if os.path.isabs(e) and os.path.abspath(e) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    _main()
