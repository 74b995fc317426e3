"""Prove a target's edits in a child process: ``python -m leakscope.fix.engine REQUEST.json``.

The parent (:func:`prove_target`, torch-free) writes the request and reads one
JSON line per proven edit; the child runs the unedited step twice (the gradients
every edit is compared with, and proof that the engine is deterministic), then
for each edit re-runs the check and the step with the edited module loaded
under its own name (NOTE [A fix is proven, not worded] in
``leakscope/fix/__init__.py``), and last, when two or more edits were verified
one by one, all of them together. One process per target, whatever its number
of edits: modules are re-imported between variants, torch only once. The user's
files are read, never written. The child speaks the protocol of every leakscope
child (:mod:`leakscope.runner.child`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from leakscope.fix.files import edited_texts
from leakscope.fix.prover import TargetProof, main, prove_groups, run_prover
from leakscope.fix.verdict import EditGroup, EditProof
from leakscope.options import CheckOptions
from leakscope.phase import report as phase
from leakscope.results import Edit

#: seconds one proof may take per edit (and for the unedited runs), without ``--timeout``
DEFAULT_TIMEOUT_PER_RUN = 600.0


def prove_target(
    target: str,
    groups: Sequence[EditGroup],
    original: Mapping[str, Sequence[str]],
    options: CheckOptions,
) -> TargetProof:
    """Prove each edit group of ``target`` in one child process. ``original``: the check's leak paths by
    mode. A child that dies or times out leaves an error proof for every group it did not finish."""
    from leakscope.serialize import to_data

    phase("proving fixes", target=target)
    request = {
        "target": target,
        "options": to_data(options),
        "groups": [to_data(g) for g in groups],
        "original": {mode: list(paths) for mode, paths in original.items()},
    }
    per_run = options.timeout or DEFAULT_TIMEOUT_PER_RUN
    return run_prover("leakscope.fix.engine", request, len(groups), per_run * (len(groups) + 2))


class _EngineProver:
    """The child's state: the options, the modules loaded before the target, the unedited step."""

    def __init__(self, target: str, options: CheckOptions) -> None:
        from leakscope.adapters.registry import resolve_specs
        from leakscope.errors import LeakscopeError
        from leakscope.harness.gradients import record_train_step, unedited_error

        self.target, self.options = target, options
        self.since = set(sys.modules)
        self.base: Any = None
        self.base_error: str | None = None
        try:
            spec = resolve_specs(target, options)[0]
            phase("the unedited step, twice", target=target)
            self.base = record_train_step(spec, options)
            second = record_train_step(spec, options)
            del spec
            self.base_error = unedited_error(
                self.base, second, what="step", alike="the same seed and micro-batch"
            )
        except LeakscopeError as exc:
            self.base_error = f"the unedited step could not run: {exc.message}"

    def prove(self, edits: Sequence[Edit]) -> EditProof:
        from leakscope.adapters.registry import resolve_specs
        from leakscope.errors import LeakscopeError
        from leakscope.fix.loading import edited_modules
        from leakscope.harness.gradients import (
            GradientCheck,
            compare,
            record_train_step,
            step_error,
        )
        from leakscope.policy import allow_result
        from leakscope.runner.inprocess import check_target

        try:
            texts = edited_texts(edits)
        except LeakscopeError as exc:
            return EditProof(error=exc.message)
        try:
            with edited_modules(texts, since=self.since, target=self.target):
                results = tuple(
                    allow_result(r, self.options.allowlist)
                    for r in check_target(self.target, self.options)
                )
                if self.base_error is not None:
                    return EditProof(results, GradientCheck(error=self.base_error))
                try:
                    spec = resolve_specs(self.target, self.options)[0]
                    grads = compare(self.base, record_train_step(spec, self.options))
                    del spec
                except LeakscopeError as exc:
                    grads = step_error(exc)
                return EditProof(results, grads)
        except LeakscopeError as exc:
            return EditProof(error=exc.message)


def _run(request: dict[str, Any], out: IO[str]) -> None:
    from leakscope.harness.runtime import resolve_device
    from leakscope.serialize import options_from_data

    options = dataclasses.replace(
        options_from_data(request["options"]), isolate=False, timeout=None, jobs=1
    )
    options = resolve_device(options)
    target = request["target"]
    prove_groups(request, out, _EngineProver(target, options).prove, target)


if __name__ == "__main__":
    main(sys.argv[1:], _run)


__all__ = ["DEFAULT_TIMEOUT_PER_RUN", "prove_target"]
