"""Prove the edits of a training script: ``python -m leakscope.fix.script REQUEST.json``.

# NOTE [A script's fix is proven by re-running it]
# ``leakscope fix train.py [ARGS]`` watches the job (as ``leakscope watch`` does),
# takes the edits its findings carry, and proves each in this child process by
# running the job again, from the start, with the edited files loaded in memory
# (the script's own text through the launcher, its imported modules through the
# finder of NOTE [A fix is proven, not worded]); nothing is written. For each
# edit: the job runs under a watch (the holder must be gone, and no new one
# found), and the job runs for the first ``steps`` backward calls, with the
# random generators seeded alike, recording each backward's loss values and the
# gradient of every leaf its graph reaches (NOTE [Every gradient the step's
# backward reaches]); the job is stopped after the last. The unedited job is
# run that way twice first: a job that is not deterministic is "cannot verify".
# An edit is verified when the losses and gradients match within the tolerance.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from leakscope.phase import report as phase
from leakscope.results import Edit, TargetResult

#: backward calls of the job compared, with and without an edit
DEFAULT_STEPS = 3
#: seconds one run of the job may take in a proof, without ``--timeout``
DEFAULT_TIMEOUT_PER_RUN = 600.0


#: what a proof of a job that runs no backward compares: nothing an edit could change
NO_BACKWARD = (
    "the job runs no backward, with the edit as without: there is no gradient the edit could change"
)


class _Enough(BaseException):
    """Ends the job once the steps it is compared on have run (a BaseException: the job's own
    ``except Exception`` does not swallow it)."""


def _seed() -> None:
    """Every generator a job commonly draws from, seeded alike for each run."""
    import torch

    random.seed(0)
    torch.manual_seed(0)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        with contextlib.suppress(Exception):
            numpy.random.seed(0)


def _drop_process_group() -> None:
    """Destroy the default process group a run of the job left (a run stopped after its compared
    steps never reaches the job's own ``destroy_process_group()``), so the next run can create its own."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


@contextlib.contextmanager
def _job_source(script: str, texts: Mapping[Path, str], since: set[str]) -> Iterator[bytes | None]:
    """The edited modules in place for a run; yields the script's edited text as bytes (None: as on disk)."""
    from leakscope.fix.files import source_encoding
    from leakscope.fix.loading import edited_modules

    path = Path(script).resolve()
    text = next((t for p, t in texts.items() if p.resolve() == path), None)
    try:
        with edited_modules(texts, since=since):
            yield None if text is None else text.encode(source_encoding(path.read_bytes()))
    finally:
        _drop_process_group()


def _steps(
    script: str, argv: Sequence[str], texts: Mapping[Path, str], steps: int, since: set[str]
) -> Any:
    """Run the job until ``steps`` backward calls have run; their losses and gradients (StepTensors;
    none when the job ends with no backward, an evaluation job)."""
    import torch

    from leakscope.errors import EngineError
    from leakscope.harness.gradients import StepTensors, graph_leaves, has_data, plain_copy
    from leakscope.live import launcher

    tensors: dict[str, Any] = {}
    calls = [0]
    with_grad = [0]
    backward = torch.autograd.backward

    def recording(roots: Any, *args: Any, **kwargs: Any) -> Any:
        i = calls[0]
        listed = list(roots) if isinstance(roots, (list, tuple)) else [roots]
        leaves = graph_leaves(listed)
        for j, root in enumerate(listed):
            tensors[f"loss of backward {i + 1}" + (f" ({j})" if j else "")] = plain_copy(root)
        result = backward(roots, *args, **kwargs)
        for j, leaf in enumerate(leaves):
            if has_data(leaf):
                grad = leaf.grad
                with_grad[0] += grad is not None
                tensors[f"gradient of leaf {j} of backward {i + 1} (shape {list(leaf.shape)})"] = (
                    None if grad is None else plain_copy(grad)
                )
        leaves.clear()
        calls[0] += 1
        if calls[0] >= steps:
            raise _Enough
        return result

    with _job_source(script, texts, since) as source:
        _seed()
        torch.autograd.backward = recording  # type: ignore[assignment]
        try:
            outcome = launcher.run(script, list(argv), as_module=False, source=source)
        finally:
            torch.autograd.backward = backward
    failed = outcome.error is not None and calls[0] < steps
    outcome.module = None
    outcome.frames.clear()
    if failed:
        raise EngineError(f"{outcome.error}, after {calls[0]} of {steps} backward calls")
    return StepTensors(tensors, with_grad[0])  # no tensors: the job ran to its end with no backward


def _watched(
    script: str,
    argv: Sequence[str],
    texts: Mapping[Path, str],
    methods: Sequence[str],
    since: set[str],
) -> tuple[TargetResult, ...]:
    """The job run under a watch of ``methods`` (NOTE [A script's fix is proven by re-running it])."""
    from leakscope.live import launcher
    from leakscope.live.session import Watch, WatchOptions

    with _job_source(script, texts, since) as source:
        _seed()
        session = Watch(WatchOptions(methods=tuple(methods)))
        session.job_name = script
        session.start()
        try:
            outcome = launcher.run(script, list(argv), as_module=False, source=source)
        finally:
            session.patcher.restore()
        if outcome.error is not None:
            session.job_error = outcome.error
            session.job_traceback = outcome.traceback
        report = session.stop(
            extra_modules=[outcome.module] if outcome.module is not None else [],
            frames=outcome.frames,
        )
        outcome.module = None
        outcome.frames.clear()
    return report.results


class _ScriptProver:
    """The child's state: the job, the modules loaded before it, the unedited steps."""

    def __init__(self, request: dict[str, Any]) -> None:
        from leakscope.errors import LeakscopeError
        from leakscope.harness.gradients import unedited_error

        self.script = str(request["script"])
        self.argv = [str(a) for a in request["argv"]]
        self.methods = [str(m) for m in request["methods"]]
        self.steps = int(request["steps"])
        import torch  # noqa: F401  (before ``since``: torch is never one of the job's modules to forget)

        self.since = set(sys.modules)
        self.base: Any = None
        self.base_error: str | None = None
        try:
            phase("the unedited job, twice", target=self.script)
            self.base = _steps(self.script, self.argv, {}, self.steps, self.since)
            second = _steps(self.script, self.argv, {}, self.steps, self.since)
            self.base_error = unedited_error(self.base, second, what="job", alike="the same seeds")
        except LeakscopeError as exc:
            self.base_error = f"the unedited job could not run: {exc.message}"

    def prove(self, edits: Sequence[Edit]) -> Any:
        from leakscope.errors import LeakscopeError
        from leakscope.fix.files import edited_texts
        from leakscope.fix.verdict import EditProof
        from leakscope.harness.gradients import GradientCheck, compare, step_error

        try:
            texts = edited_texts(edits)
            results = _watched(self.script, self.argv, texts, self.methods, self.since)
        except LeakscopeError as exc:
            return EditProof(error=exc.message)
        if self.base_error is not None:
            return EditProof(results, GradientCheck(error=self.base_error))
        try:
            edited = _steps(self.script, self.argv, texts, self.steps, self.since)
            if not self.base.tensors:
                grads = (
                    GradientCheck(subject=NO_BACKWARD)
                    if not edited.tensors
                    else GradientCheck(changed="job's backward calls (the unedited job runs none)")
                )
            else:
                grads = dataclasses.replace(
                    compare(self.base, edited),
                    subject=f"the job's losses and gradients over its first {self.steps} backward calls",
                )
        except LeakscopeError as exc:
            grads = step_error(exc)
        return EditProof(results, grads)


def _run(request: dict[str, Any], out: IO[str]) -> None:
    from leakscope.fix.prover import prove_groups

    prover = _ScriptProver(request)
    prove_groups(request, out, prover.prove, prover.script)


def prove_script(
    script: str,
    argv: Sequence[str],
    methods: Sequence[str],
    groups: Sequence[Any],
    original: Mapping[str, Sequence[str]],
    *,
    steps: int = DEFAULT_STEPS,
    timeout: float | None = None,
) -> Any:
    """Prove each edit group of the job ``script`` in one child process (TargetProof)."""
    from leakscope.fix.prover import run_prover
    from leakscope.serialize import to_data

    phase("proving fixes", target=script)
    request = {
        "script": script,
        "argv": list(argv),
        "methods": list(methods),
        "steps": steps,
        "groups": [to_data(g) for g in groups],
        "original": {mode: list(paths) for mode, paths in original.items()},
    }
    per_run = timeout or DEFAULT_TIMEOUT_PER_RUN
    return run_prover("leakscope.fix.script", request, len(groups), per_run * (2 * len(groups) + 3))


if __name__ == "__main__":
    from leakscope.fix.prover import main

    main(sys.argv[1:], _run)


__all__ = ["DEFAULT_STEPS", "prove_script"]
