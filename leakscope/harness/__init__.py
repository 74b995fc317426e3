"""The harness: run an engine's step as its real caller would, and observe what the caller keeps.

- :mod:`~leakscope.harness.target` resolves ``pkg.mod:Name``; :mod:`~leakscope.harness.protocol`
  turns it into an ``EngineSpec``;
- :mod:`~leakscope.harness.run` builds the subject and runs one step (running only);
- :mod:`~leakscope.probe.steps`: which step built each graph node, in any thread;
- :mod:`~leakscope.harness.trial`: what a caller keeps after a check's steps;
- :mod:`~leakscope.harness.observe`: the one walk of ``check`` and ``watch``, and its tensor-free
  descriptions (``Held``, ``Observation``);
- :mod:`~leakscope.harness.experiment`: the experiments the judge asks for (step, confirm, release,
  micro-batches, stored-at, graph);
- :mod:`~leakscope.harness.stored`: the tracer that finds the line that stored a holder;
- :mod:`~leakscope.harness.source`: the user's lines (created at, called from);
- :mod:`~leakscope.harness.guard`, :mod:`~leakscope.harness.rng`, :mod:`~leakscope.harness.runtime`:
  the process state a check runs under; :mod:`~leakscope.harness.distributed`: ranks in lockstep.
"""
