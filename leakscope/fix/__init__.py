"""``leakscope fix``: edits proposed by the judge, proven in a child process, written only when verified.

One package, one module per part:

- :mod:`leakscope.fix.files` — what an edit does to a file's text (applied, diffed, written
  keeping encoding, line endings, owner and mode), and the edited texts a proof loads;
- :mod:`leakscope.fix.loading` — the edited text imported under the module's own name;
- :mod:`leakscope.fix.prover` — the proof child, both ends, over the one child-process protocol
  of :mod:`leakscope.runner.child` (shared with the isolated check's worker);
- :mod:`leakscope.fix.engine` — an engine's edits proven (``python -m leakscope.fix.engine``);
- :mod:`leakscope.fix.script` — a training script's edits proven by re-running the job
  (``python -m leakscope.fix.script``);
- :mod:`leakscope.fix.verdict` — verified or not, from what a proof saw (torch-free);
- :mod:`leakscope.fix.report` — the fix report: each finding's edit marked, diffs, ``--apply``.

The edits themselves are derived by the judge (:mod:`leakscope.diagnose.storefix`,
:mod:`leakscope.diagnose.safety`); the gradients a proof compares are recorded by
:mod:`leakscope.harness.gradients`, which the judge uses too.

# NOTE [A fix is proven, not worded]
# A sentence can be wrong: detaching a value that feeds the loss silently cuts a
# gradient, detaching a lambda raises, detaching a loss a framework backprops
# later trains nothing. So ``leakscope fix`` runs what it proposes. In a child
# process (:mod:`leakscope.fix.engine`), the edited text of the user's file is
# loaded under the module's own name (:func:`leakscope.fix.loading.edited_modules`: a meta-path finder
# that serves the edited source for that file, nothing written next to it), the
# check is run again, and one train step is run with and without the edit on the
# same fresh tiny model, seed and micro-batch (:func:`leakscope.harness.gradients.record_train_step`,
# :func:`leakscope.harness.gradients.compare`).
# A fix is verified only when the holder is gone and every parameter's gradient
# (and value after the step, for frameworks that step the optimizer inside it)
# is equal within ``rtol``/``atol``; the unedited step is run twice first, so an
# engine that is not deterministic is reported as "cannot verify", never as a
# changed gradient. Between variants every user module loaded since the child
# started is dropped from ``sys.modules``, so module state (a registry list, a
# class attribute) starts empty each time, as in a fresh job.

"""
