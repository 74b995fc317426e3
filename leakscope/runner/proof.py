"""Prove a target's edits in a child process: ``python -m leakscope.runner.proof REQUEST.json``.

The parent (:func:`prove_target`, torch-free) writes the request and reads one
JSON line per proven edit; the child runs the unedited step twice (the gradients
every edit is compared with, and proof that the engine is deterministic), then
for each edit re-runs the check and the step with the edited module loaded
under its own name (NOTE [A fix is proven, not worded] in
``leakscope/harness/proof.py``), and last, when two or more edits were verified
one by one, all of them together. One process per target, whatever its number
of edits: modules are re-imported between variants, torch only once. The user's
files are read, never written. As in the isolated check's worker, the child's
stdout goes to stderr and it ends with ``os._exit``.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from leakscope.diagnose.proof import (
    EditGroup,
    EditProof,
    decide,
    edit_groups,
    leaking,
    no_edit_reason,
)
from leakscope.options import CheckOptions
from leakscope.phase import report as phase
from leakscope.results import Edit, FixReport, FixResult, FixStatus, Report, Severity
from leakscope.runner.isolation import _death_message, _read_records, _stderr_fd
from leakscope.runner.zygote import kill_group

#: seconds one proof may take per edit (and for the unedited runs), without ``--timeout``
DEFAULT_TIMEOUT_PER_RUN = 600.0


@dataclasses.dataclass(frozen=True)
class TargetProof:
    """What the child proved for one target: a proof per edit group, and the verified ones together."""

    proofs: tuple[EditProof, ...]
    #: the indices of the groups proven together, and that proof (None: fewer than two were verified)
    combined: tuple[tuple[int, ...], EditProof] | None = None


def prove_target(
    target: str,
    groups: Sequence[EditGroup],
    original: Mapping[str, Sequence[str]],
    options: CheckOptions,
) -> TargetProof:
    """Prove each edit group of ``target`` in one child process. ``original``: the check's leak paths by
    mode. A child that dies or times out leaves an error proof for every group it did not finish."""
    from leakscope.serialize import from_data, to_data

    phase("proving fixes", target=target)
    with tempfile.TemporaryDirectory(prefix="leakscope-proof-") as tmp:
        request, results = Path(tmp, "request.json"), Path(tmp, "results.jsonl")
        request.write_text(
            json.dumps(
                {
                    "target": target,
                    "options": to_data(options),
                    "groups": [to_data(g) for g in groups],
                    "original": {mode: list(paths) for mode, paths in original.items()},
                    "results": str(results),
                    "cwd": os.getcwd(),
                }
            ),
            encoding="utf-8",
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "leakscope.runner.proof", str(request)],
            stdin=subprocess.DEVNULL,
            stdout=_stderr_fd(),
            start_new_session=True,
        )
        per_run = options.timeout or DEFAULT_TIMEOUT_PER_RUN
        limit = per_run * (len(groups) + 2)
        timed_out = False
        try:
            returncode = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            returncode = proc.wait()
        except BaseException:
            kill_group(proc.pid)
            proc.wait()
            raise
        kill_group(proc.pid)  # whatever the engine left running in the child's group
        records = _read_records(results)
    proofs: dict[int, EditProof] = {}
    combined: tuple[tuple[int, ...], EditProof] | None = None
    for record in records:
        if "group" in record:
            proofs[int(record["group"])] = from_data(EditProof, record["proof"])
        elif "combined" in record:
            combined = (
                tuple(int(i) for i in record["indices"]),
                from_data(EditProof, record["combined"]),
            )
    if len(proofs) < len(groups):
        fatal = next((r["fatal"] for r in records if "fatal" in r), None)
        if timed_out:
            why = f"the proof process timed out after {limit:g} s and was killed"
        elif fatal is not None:
            why = f"leakscope's proof process failed: {fatal}"
        else:
            why = _death_message(returncode)
        for i in range(len(groups)):
            proofs.setdefault(i, EditProof(error=why))
    return TargetProof(tuple(proofs[i] for i in range(len(groups))), combined)


# -- from proofs to a fix report -----------------------------------------------------------------

Verdicts = dict[tuple[str, Edit], tuple[bool, str]]


def verdicts_of(
    report: Report, prove: Callable[[str, list[EditGroup], dict[str, list[str]]], TargetProof]
) -> Verdicts:
    """``(verified, reason)`` for each ``(target, edit)`` of the report, proven target by target with
    ``prove`` (:func:`prove_target`). Edits verified one by one but not together are not verified."""
    groups = edit_groups(report)
    verdicts: Verdicts = {}
    for target in dict.fromkeys(g.target for g in groups):
        mine = [g for g in groups if g.target == target]
        original: dict[str, list[str]] = {}
        for result in report.results:
            if result.target == target:
                original.setdefault(result.mode.value, []).extend(
                    str(f.path) for f in leaking(result)
                )
        proven = prove(target, mine, original)
        for group, proof in zip(mine, proven.proofs, strict=True):
            verdicts[(target, group.edit)] = decide(group, proof, original)
        if proven.combined is not None:
            indices, proof = proven.combined
            joined = EditGroup(
                target, mine[indices[0]].edit, tuple(f for i in indices for f in mine[i].findings)
            )
            ok, why = decide(joined, proof, original)
            if not ok:
                for i in indices:
                    verdicts[(target, mine[i].edit)] = (
                        False,
                        f"verified alone, but not with the other verified edits of {target} applied too: {why}",
                    )
    return verdicts


def fix_report(report: Report, verdicts: Verdicts, *, apply: bool, tolerance: str) -> FixReport:
    """The fix report: the check's report with each edit marked, a diff per edit against the file as it
    reads now, and with ``apply`` the verified edits written (NOTE [An edit applies only to the line it
    was derived from]); one :class:`FixResult` per leaking finding, in report order."""
    from leakscope.atomic import write
    from leakscope.errors import LeakscopeError
    from leakscope.harness.patch import applied, read_source, unified_diff

    diffs: dict[Edit, str] = {}
    for _, edit in verdicts:
        try:
            text = read_source(Path(edit.file))
            diffs[edit] = unified_diff(edit.file, text, applied(text, [edit], name=edit.file))
        except (OSError, LeakscopeError):
            diffs[edit] = ""
    written: dict[Edit, str | None] = {}  # edit -> None when written, else why not
    if apply:
        by_file: dict[str, list[Edit]] = {}
        for (_, edit), (ok, _why) in verdicts.items():
            if ok and edit not in by_file.get(edit.file, []):
                by_file.setdefault(edit.file, []).append(edit)
        for file, edits in by_file.items():
            chosen: dict[int, Edit] = {}
            for edit in edits:
                if edit.line in chosen:
                    written[edit] = (
                        f"not applied: another verified edit rewrites {file}:{edit.line}; apply it, then run fix again"
                    )
                else:
                    chosen[edit.line] = edit
            try:
                path = Path(file)
                write(
                    path,
                    applied(read_source(path), list(chosen.values()), name=file).encode("utf-8"),
                )
                written.update({edit: None for edit in chosen.values()})
            except LeakscopeError as exc:
                written.update({edit: f"not applied: {exc.message}" for edit in chosen.values()})
            except OSError as exc:
                written.update(
                    {
                        edit: f"not applied: cannot write {file}: {exc.strerror or exc}"
                        for edit in chosen.values()
                    }
                )
    fixes: list[FixResult] = []
    results = []
    for result in report.results:
        findings = []
        for finding in result.findings:
            derived = finding.edit
            verdict = verdicts.get((result.target, derived)) if derived is not None else None
            if derived is not None and verdict is not None:
                finding = dataclasses.replace(
                    finding,
                    edit=dataclasses.replace(derived, verified=verdict[0], proof=verdict[1]),
                )
            findings.append(finding)
            if finding.severity is not Severity.LEAK:
                continue
            if derived is None or verdict is None:
                fixes.append(
                    FixResult(
                        result.target,
                        result.mode.value,
                        str(finding.path),
                        FixStatus.NONE,
                        no_edit_reason(finding),
                        finding.hint,
                    )
                )
                continue
            ok, reason = verdict
            not_written = written.get(derived, "not applied") if apply and ok else None
            if not_written:
                reason = f"{reason}; {not_written}"
            fixes.append(
                FixResult(
                    result.target,
                    result.mode.value,
                    str(finding.path),
                    FixStatus.VERIFIED if ok else FixStatus.UNVERIFIED,
                    reason,
                    finding.hint,
                    edit=finding.edit,
                    diff=diffs.get(derived, ""),
                    applied=apply and ok and not not_written,
                )
            )
        results.append(dataclasses.replace(result, findings=tuple(findings)))
    return FixReport(
        dataclasses.replace(report, results=tuple(results)), tuple(fixes), tolerance, apply
    )


# -- the child ------------------------------------------------------------------------------------


def _write(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _edited_texts(edits: Sequence[Edit]) -> dict[Path, str]:
    """Each edited file's text with its edits applied; raises what :func:`applied` raises."""
    from leakscope.harness.patch import applied, read_source

    by_file: dict[str, list[Edit]] = {}
    for edit in edits:
        by_file.setdefault(edit.file, []).append(edit)
    texts = {}
    for file, mine in by_file.items():
        path = Path(file)
        try:
            text = read_source(path)
        except OSError as exc:
            from leakscope.errors import TargetError

            raise TargetError(f"cannot read {file}: {exc.strerror or exc}") from None
        texts[path] = applied(text, mine, name=file)
    return texts


class _Prover:
    """The child's state: the options, the modules loaded before the target, the unedited step."""

    def __init__(self, target: str, options: CheckOptions) -> None:
        from leakscope.adapters.registry import resolve_specs
        from leakscope.errors import LeakscopeError
        from leakscope.harness.proof import capture, compare

        self.target, self.options = target, options
        self.since = set(sys.modules)
        self.base: Any = None
        self.base_error: str | None = None
        try:
            spec = resolve_specs(target, options)[0]
            phase("the unedited step, twice", target=target)
            self.base = capture(spec, options)
            again = compare(self.base, capture(spec, options))
            del spec
            if again.error is not None:
                self.base_error = again.error
            elif again.changed is not None:
                self.base_error = (
                    f"the unedited step's {again.changed} differs between two runs with the same seed and micro-batch:"
                    " the step is not deterministic, so a changed gradient could not be told from noise"
                )
        except LeakscopeError as exc:
            self.base_error = f"the unedited step could not run: {exc.message}"

    def prove(self, edits: Sequence[Edit]) -> EditProof:
        from leakscope.adapters.registry import resolve_specs
        from leakscope.errors import LeakscopeError
        from leakscope.harness.proof import (
            GradientCheck,
            capture,
            compare,
            edited_modules,
            step_error,
        )
        from leakscope.policy import allow_result
        from leakscope.runner.inprocess import check_target

        try:
            texts = _edited_texts(edits)
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
                    grads = compare(self.base, capture(spec, self.options))
                    del spec
                except LeakscopeError as exc:
                    grads = step_error(exc)
                return EditProof(results, grads)
        except LeakscopeError as exc:
            return EditProof(error=exc.message)


def _run(request: dict[str, Any], out: IO[str]) -> None:
    from leakscope.harness.runtime import resolve_device
    from leakscope.serialize import from_data, options_from_data, to_data

    options = dataclasses.replace(
        options_from_data(request["options"]), isolate=False, timeout=None, jobs=1
    )
    options = resolve_device(options)
    target = request["target"]
    groups = [from_data(EditGroup, g) for g in request["groups"]]
    original: dict[str, list[str]] = request["original"]
    prover = _Prover(target, options)
    verified = []
    for i, group in enumerate(groups):
        phase(f"proving fix {i + 1} of {len(groups)}", target=target)
        proof = prover.prove([group.edit])
        _write(out, {"group": i, "proof": to_data(proof)})
        if decide(group, proof, original)[0]:
            verified.append(i)
    if len(verified) >= 2:
        phase("proving the verified fixes together", target=target)
        proof = prover.prove([groups[i].edit for i in verified])
        _write(out, {"combined": to_data(proof), "indices": verified})


def main(argv: list[str]) -> NoReturn:
    """Run one proof request and exit without running anything the engine registered."""
    os.dup2(2, 1)  # engine prints, even from C, land on stderr
    sys.stdout = sys.stderr
    faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    with open(argv[0], encoding="utf-8") as f:
        request = json.load(f)
    os.chdir(request.get("cwd") or os.getcwd())
    status = 0
    with open(request["results"], "a", encoding="utf-8") as out:
        try:
            _run(request, out)
        except BaseException as exc:  # noqa: B036 - the parent turns this line into an error per edit
            import traceback

            _write(
                out, {"fatal": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            )
            status = 1
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])


__all__ = [
    "DEFAULT_TIMEOUT_PER_RUN",
    "TargetProof",
    "Verdicts",
    "fix_report",
    "prove_target",
    "verdicts_of",
]
