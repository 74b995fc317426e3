"""The judge: observations become verdicts, findings, kinds, bytes and fixes (no tensors here).

- :mod:`~leakscope.diagnose.judge`: the one judge, for ``check`` (:func:`~leakscope.diagnose.judge.judge`
  asks :class:`leakscope.harness.experiment.Experiment` for evidence) and for ``watch``
  (:func:`~leakscope.diagnose.judge.look_findings`, :func:`~leakscope.diagnose.judge.watch_results`);
- :mod:`~leakscope.diagnose.findings`: the one place a ``Finding`` is built, and the one accounting of bytes;
- :mod:`~leakscope.diagnose.kinds`: growing or bounded;
- :mod:`~leakscope.diagnose.growth`: the growth curve and storage-growth warnings;
- :mod:`~leakscope.diagnose.safety`: which fix keeps the gradients;
- :mod:`~leakscope.diagnose.fixes` and :mod:`~leakscope.diagnose.storefix`: the fix in words, and the
  stored-at line rewritten;
- :mod:`~leakscope.diagnose.projection`: what a leak costs at the user's scale.

The judge never imports the probes (an import-linter contract): it reads the harness's descriptions.
"""
