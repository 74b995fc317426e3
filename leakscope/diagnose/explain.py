"""``leakscope explain``: the retained graph of one finding, as plain data.

A :class:`~leakscope.results.GraphView` describes the graph a held reference keeps
alive: node names, saved slots with shapes and bytes, leaves and their gradients.
The harness runs the step and describes the graph
(:meth:`leakscope.harness.experiment.Experiment.graph`); the renderers in
``leakscope.render.tree`` and ``leakscope.render.dot`` turn it into text.
"""

from __future__ import annotations

from typing import Any

from leakscope.errors import UsageError
from leakscope.options import CheckOptions
from leakscope.results import GraphView, Mode


def explain(target: Any, path: str | None = None, options: CheckOptions | None = None,
            mode: Mode = Mode.TRAIN, max_nodes: int = 10_000) -> GraphView:
    """Run the step once and describe what the reference at ``path`` (default: the first finding) retains."""
    from leakscope.adapters.registry import resolve_spec
    from leakscope.harness.distributed import process_group
    from leakscope.harness.experiment import Experiment
    from leakscope.harness.runtime import resolve_device
    from leakscope.probe.liveness import gc_paused

    options = resolve_device(options or CheckOptions())
    spec = resolve_spec(target, options.factory)
    with process_group(options.device), gc_paused():
        view, paths = Experiment(spec, mode, options).graph(path, max_nodes)
    if view is None:
        if path is not None:
            raise UsageError(
                f"{spec.name} [{mode.value}] has no finding at {path!r}; findings: {', '.join(paths) or 'none'}"
            )
        return GraphView(spec.name, mode.value, "", None, (), 0, False, paths)
    return view


__all__ = ["explain"]
