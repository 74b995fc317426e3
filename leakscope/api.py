"""The library entry point: ``check(targets, options) -> Report``.

The CLI and the pytest plugin gather options, call :func:`check` and render the
:class:`~leakscope.results.Report` it returns. No detection logic lives there.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path

from leakscope import __version__
from leakscope.adapters.registry import resolve_spec
from leakscope.errors import UsageError
from leakscope.fix.candidates import (
    explain_carries,
    with_created_line_edits,
    with_no_grad_updates,
)
from leakscope.fix.engine import prove_target
from leakscope.fix.prover import TargetProof
from leakscope.fix.report import fix_report, verdicts_of, what_was_compared
from leakscope.fix.script import DEFAULT_STEPS, prove_script
from leakscope.harness.distributed import gather_report, process_group, session
from leakscope.harness.experiment import Experiment, checking
from leakscope.harness.gradients import tolerance
from leakscope.harness.runtime import resolve_device
from leakscope.harness.target import target_directory
from leakscope.live.job import watch_job
from leakscope.live.session import WatchOptions
from leakscope.options import CheckOptions
from leakscope.policy import allow_result
from leakscope.results import FixReport, GraphView, Mode, Report, TargetResult
from leakscope.runner.inprocess import check_target
from leakscope.snippets import read_snippets


def check(
    targets: Sequence[object] | str | object,
    options: CheckOptions | None = None,
    *,
    on_result: Callable[[TargetResult], None] | None = None,
) -> Report:
    """Check each target in each mode and return the report.

    ``targets`` are target strings (``pkg.mod:Engine``, ``path/file.py:Engine``)
    or the objects themselves (an engine class, a factory, a step function).
    Failures of a target become ``error`` results; nothing here raises for a
    bad target. ``options.allowlist`` marks deliberate findings ``allowed``.
    ``on_result`` is called with each result as soon as it is judged (the
    CLI's progress display; the library itself never draws anything).
    With ``options.isolate`` each target runs in its own child process (see
    ``leakscope.runner.isolation``) and this process never imports torch.
    """
    options = options or CheckOptions()
    if isinstance(targets, (str, bytes)) or not isinstance(targets, Sequence):
        targets = [targets]
    if options.isolate:
        from leakscope.runner.isolation import check_isolated

        # the child resolves the device
        report = check_isolated(targets, options, on_result=on_result)
        return _with_snippets(one_row_per_error(report), targets)
    import torch

    options = resolve_device(options)
    results: list[TargetResult] = []
    # Under torchrun each rank checks its own step; the report merges the ranks.
    with session():
        for target in targets:
            for result in check_target(target, options):
                result = allow_result(result, options.allowlist)
                results.append(result)
                if on_result is not None:
                    on_result(result)
        report = gather_report(
            Report(
                results=tuple(results),
                leakscope_version=__version__,
                torch_version=str(torch.__version__),
                python_version=platform.python_version(),
            )
        )
        return _with_snippets(one_row_per_error(report), targets)


def one_row_per_error(report: Report) -> Report:
    """``report`` with one error result per target and error: a target that cannot be imported
    (or whose process died) fails the same way in every mode, and is one row, counted once, under
    the first mode it was asked in. Errors that differ by mode keep a row each."""

    seen: set[tuple[object, ...]] = set()
    kept = []
    for result in report.results:
        if result.error is not None and not result.findings:
            key = (result.target, result.settings, result.rank, result.verdict, result.error)
            if key in seen:
                continue
            seen.add(key)
        kept.append(result)
    if len(kept) == len(report.results):
        return report
    return dataclasses.replace(report, results=tuple(kept))


def _with_snippets(report: Report, targets: Sequence[object]) -> Report:
    """The report with its source lines, read from the project and the targets' directories only
    (NOTE [Snippets read only the checked project]): renderers never read a file."""

    roots = [Path.cwd(), *filter(None, (target_directory(t) for t in targets))]
    return read_snippets(report, roots)


def explain(
    target: object,
    path: str | None = None,
    options: CheckOptions | None = None,
    mode: Mode | None = None,
    max_nodes: int = 10_000,
) -> GraphView:
    """Run the step once and describe the graph the reference at ``path`` (default: the first holder)
    keeps: a :class:`~leakscope.results.GraphView` (``leakscope explain``; renderers in
    ``leakscope.render.tree`` and ``leakscope.render.dot``). An unknown ``path`` is a
    :class:`~leakscope.errors.UsageError` naming the holders there are."""

    mode = mode or Mode.TRAIN
    options = resolve_device(options or CheckOptions())
    spec = resolve_spec(target, options.factory)
    with process_group(options.device), checking():
        view, paths = Experiment(spec, mode, options).graph(path, max_nodes)
    if view is None:
        if path is not None:
            raise UsageError(
                f"{spec.name} [{mode.value}] has no finding at {path!r}; findings: {', '.join(paths) or 'none'}"
            )
        return GraphView(spec.name, mode.value, "", None, (), 0, False, paths)
    return view


def fix(
    targets: Sequence[object] | str | object,
    options: CheckOptions | None = None,
    *,
    apply: bool = False,
    on_result: Callable[[TargetResult], None] | None = None,
    allow_outside: bool = False,
) -> FixReport:
    """Check each target, then prove every one-line edit its findings carry, and with ``apply`` write
    the verified ones into the user's files.

    A proof re-runs the check and one train step with the edited module, in a child process
    (NOTE [A fix is proven, not worded] in ``leakscope/fix/__init__.py``); nothing is written
    unless ``apply``, and then only verified edits, atomically, and only where the line still reads
    as it did at the check. The returned :class:`~leakscope.results.FixReport` carries the
    check's report with each edit marked verified or not, and one result per leaking finding.
    Only files under the current directory (the project being checked) are edited, unless
    ``allow_outside``.
    """

    options = options or CheckOptions()
    report = with_no_grad_updates(check(targets, options, on_result=on_result))
    root = None if allow_outside else os.getcwd()
    proven: list[TargetProof] = []
    verdicts = verdicts_of(
        report,
        lambda target, groups, original: prove_target(target, groups, original, options),
        root,
        proven,
    )
    compared, any_compared = what_was_compared(proven, FixReport.compared)
    return fix_report(
        report,
        verdicts,
        apply=apply,
        tolerance=tolerance(),
        root=root,
        compared=compared,
        gradients_compared=any_compared,
    )


def fix_script(
    script: str,
    argv: Sequence[str] = (),
    *,
    methods: Sequence[str] = (),
    apply: bool = False,
    allow_outside: bool = False,
    steps: int | None = None,
    timeout: float | None = None,
) -> FixReport:
    """Watch the training script ``script`` (run with ``argv``) as ``leakscope watch`` does, then prove
    every edit its findings carry by running the job again with the edit, for a few backward calls with
    the same seeds (NOTE [A script's fix is proven by re-running it]); with ``apply`` write the verified
    ones. ``methods``: the steps to watch; none: as ``leakscope watch`` with no ``--method`` (the built-in
    adapters' steps, else the steps found from autograd, NOTE [Steps from autograd]).
    """

    chosen = tuple(methods)
    report = watch_job(script, list(argv), WatchOptions(methods=chosen), timeout=timeout).report
    report, carries = with_created_line_edits(with_no_grad_updates(report))
    root = None if allow_outside else os.getcwd()
    n = steps or DEFAULT_STEPS
    proven: list[TargetProof] = []
    verdicts = verdicts_of(
        report,
        lambda _target, groups, original: prove_script(
            script,
            argv,
            chosen,
            groups,
            original,
            steps=n,
            timeout=timeout,
        ),
        root,
        proven,
    )
    compared, any_compared = what_was_compared(
        proven, f"losses and gradients compared over the job's first {n} backward calls, same seeds"
    )
    return fix_report(
        report,
        explain_carries(verdicts, carries),
        apply=apply,
        tolerance=tolerance(),
        root=root,
        compared=compared,
        gradients_compared=any_compared,
    )


__all__ = ["check", "explain", "fix", "fix_script", "one_row_per_error"]
