"""The proof child, both ends: the parent starts ``python -m MODULE REQUEST.json`` and reads one record
per proven edit group (:func:`run_prover`); the child proves each group alone, then the verified ones
together (:func:`prove_groups`). The process protocol is the one every leakscope child speaks
(:mod:`leakscope.runner.child`). Torch-free.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from leakscope.fix.verdict import EditGroup, EditProof, decide
from leakscope.phase import report as phase
from leakscope.results import Edit
from leakscope.runner.child import (
    Work,
    death_message,
    read_records,
    run_child,
    stderr_fd,
    write_record,
)
from leakscope.runner.zygote import kill_group


@dataclasses.dataclass(frozen=True)
class TargetProof:
    """What the child proved for one target: a proof per edit group, and the verified ones together."""

    proofs: tuple[EditProof, ...]
    #: the indices of the groups proven together, and that proof (None: fewer than two were verified)
    combined: tuple[tuple[int, ...], EditProof] | None = None


def run_prover(module: str, request: dict[str, Any], groups: int, limit: float) -> TargetProof:
    """Run ``python -m MODULE REQUEST.json`` (a proof child: :mod:`leakscope.fix.engine` or
    :mod:`leakscope.fix.script`) and read its records; a child that dies or runs past
    ``limit`` seconds leaves an error proof for every one of the ``groups`` it did not finish."""
    from leakscope.serialize import from_data

    with tempfile.TemporaryDirectory(prefix="leakscope-proof-") as tmp:
        path, results = Path(tmp, "request.json"), Path(tmp, "results.jsonl")
        path.write_text(
            json.dumps({**request, "results": str(results), "cwd": os.getcwd()}), encoding="utf-8"
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(path)],
            stdin=subprocess.DEVNULL,
            stdout=stderr_fd(),
            start_new_session=True,
        )
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
        records = read_records(results)
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
    if len(proofs) < groups:
        fatal = next((r["fatal"] for r in records if "fatal" in r), None)
        if timed_out:
            why = f"the proof process timed out after {limit:g} s and was killed"
        elif fatal is not None:
            why = f"leakscope's proof process failed: {fatal}"
        else:
            why = death_message(returncode)
        for i in range(groups):
            proofs.setdefault(i, EditProof(error=why))
    return TargetProof(tuple(proofs[i] for i in range(groups)), combined)


def prove_groups(
    request: dict[str, Any], out: IO[str], prove: Callable[[Sequence[Edit]], EditProof], target: str
) -> None:
    """The child's loop: prove each edit group alone, then the verified ones together, writing one
    record each as it goes (a child that dies keeps what it wrote)."""
    from leakscope.serialize import from_data, to_data

    groups = [from_data(EditGroup, g) for g in request["groups"]]
    original: dict[str, list[str]] = request["original"]
    verified = []
    lines: set[tuple[str, int]] = set()
    for i, group in enumerate(groups):
        phase(f"proving fix {i + 1} of {len(groups)}", target=target)
        proof = prove([group.edit])
        write_record(out, {"group": i, "proof": to_data(proof)})
        line = (group.edit.file, group.edit.line)
        # a second verified edit of a line already taken waits for the next run (``--apply`` writes
        # the first and says so), so it is not proven together with the first
        if decide(group, proof, original)[0] and line not in lines:
            verified.append(i)
            lines.add(line)
    if len(verified) >= 2:
        phase("proving the verified fixes together", target=target)
        proof = prove([groups[i].edit for i in verified])
        write_record(out, {"combined": to_data(proof), "indices": verified})


def main(argv: list[str], work: Work) -> NoReturn:
    """A proof child's ``main``: run the request in ``argv[0]`` with ``work`` (:func:`run_child`)."""
    run_child(argv[0], work)


__all__ = ["TargetProof", "main", "prove_groups", "run_prover"]
