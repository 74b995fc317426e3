"""Probes: read without side effects. Nothing here knows about engines or verdicts.

- :mod:`~leakscope.probe.autograd`: graph nodes, their saved tensors (never unpacked), leaves, storages;
- :mod:`~leakscope.probe.walk`: the read-only walk over objects, naming each path to a tensor or node;
- :mod:`~leakscope.probe.release`: the one mutating operation, releasing a reference (a trial's only);
- :mod:`~leakscope.probe.liveness`: weakref evidence and settling the collector;
- :mod:`~leakscope.probe.cost`: what a retained graph node costs, measured;
- :mod:`~leakscope.probe.view`: the retained graph as plain data (``GraphView``);
- :mod:`~leakscope.probe.library`: what is library machinery and what is the user's;
- :mod:`~leakscope.probe.stack`: room on the job's stack to free a deep graph a look walked.
"""
