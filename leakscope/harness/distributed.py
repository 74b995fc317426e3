"""Process groups for a check: a private one for a single process, torchrun's for many ranks.

# NOTE [Ranks in lockstep]
# Under ``torchrun`` every rank checks its own step of the real (FSDP-sharded)
# engine, and every step runs collectives (all-gather in forward,
# reduce-scatter in backward) that must pair across ranks. But how many steps a
# rank runs depends on what it finds: a rank that finds a holder re-runs the
# step to confirm it, a clean rank does not. So before each step every rank
# votes (all-reduce MAX) on whether it has a real step to run; a rank that has
# finished the mode keeps voting 0 and runs a throw-away step on a fresh
# subject for as long as another rank still votes 1 (see :class:`Lockstep`).
# Engine construction runs no collectives (measured with FSDP2), so only steps
# are paired. A rank whose engine raises in the middle of a step leaves its
# peers waiting in a collective until the group's timeout (5 minutes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from leakscope.harness.trial import build_subject, make_micro_batch, step_once
from leakscope.results import Mode, Report, TargetResult

if TYPE_CHECKING:
    from leakscope.harness.protocol import EngineSpec
    from leakscope.options import CheckOptions

#: how long a rank waits in a collective for its peers
GROUP_TIMEOUT_S = 300

_session_depth = 0


def launcher_env() -> tuple[int, int] | None:
    """``(rank, world_size)`` when a launcher such as torchrun started this process, else None.

    Reads only the environment (``RANK``, ``WORLD_SIZE``), so it costs nothing
    and imports no torch: the CLI uses it to decide not to isolate targets in
    child processes, since under torchrun the ranks must be the processes
    torchrun started.
    """
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    return rank, world


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Under a launcher, the default process group for the whole check; nothing otherwise.

    Initialises it from the environment (gloo, ``env://``) when the caller has
    not, and destroys it when the outermost session ends: the process is left
    as it was found. Without a launcher this imports nothing.
    """
    global _session_depth
    if launcher_env() is None:
        yield
        return
    import torch.distributed as dist

    created = False
    if _session_depth == 0 and dist.is_available() and not dist.is_initialized():
        import datetime

        dist.init_process_group(
            "gloo", init_method="env://", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S)
        )
        created = True
    _session_depth += 1
    try:
        yield
    finally:
        _session_depth -= 1
        if created and dist.is_initialized():
            dist.destroy_process_group()


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size of the default group, ``(0, 1)`` without one."""
    if launcher_env() is None:
        return 0, 1
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def multi_rank() -> bool:
    """True inside a session with more than one rank."""
    return rank_and_world()[1] > 1


def is_reporting_rank() -> bool:
    """Rank 0 prints the merged report; the other ranks print nothing on stdout."""
    return rank_and_world()[0] == 0


def barrier() -> None:
    """Wait for every rank (so no rank exits while rank 0 still writes the report)."""
    if multi_rank():
        import torch.distributed as dist

        dist.barrier()


@contextlib.contextmanager
def process_group(device: str | None = "cpu") -> Iterator[bool]:
    """Create a single-process gloo group if none exists; destroy it afterwards.

    Yields True when the group was created here. Under torchrun (a group
    already exists) the existing group is used and left alone. A ``HashStore``
    avoids binding a TCP port.
    """
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        yield False
        return
    backend = "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"
    store = dist.HashStore()  # type: ignore[attr-defined]
    dist.init_process_group(backend, store=store, rank=0, world_size=1)
    try:
        yield True
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class Lockstep:
    """Pairs every rank's steps of one target and mode; see NOTE [Ranks in lockstep]."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    def wrapped(self) -> EngineSpec:
        """The spec whose ``call_step`` first votes that this rank has a real step to run."""
        inner = self.spec.call_step
        vote = self._vote

        def call_step(
            engine: object, micro_batch: object, loss_function: object, forward_only: bool
        ) -> object:
            vote(True)
            return inner(engine, micro_batch, loss_function, forward_only)

        return dataclasses.replace(self.spec, call_step=call_step)

    def drain(self, mode: Mode, options: CheckOptions) -> None:
        """This rank is done with the mode: step along with any rank that is not."""
        while self._vote(False):
            self._spare_step(mode, options)

    @staticmethod
    def _vote(busy: bool) -> bool:
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1 if busy else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _spare_step(self, mode: Mode, options: CheckOptions) -> None:
        model, engine = build_subject(self.spec, options)
        # Through the adapter, as the rank's own steps are: a verl engine gets verl's micro-batch.
        micro_batch = make_micro_batch(self.spec, options, 0)
        loss, output = step_once(self.spec, engine, micro_batch, mode)
        del loss, output, engine, model, micro_batch


def gather_report(report: Report) -> Report:
    """Every rank's report merged (on every rank); the report itself with one rank."""
    if not multi_rank():
        return report
    import torch.distributed as dist

    reports: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(reports, report)
    return merge_reports(reports)


def _comparable(result: TargetResult) -> TargetResult:
    return dataclasses.replace(result, seconds=0.0, rank=None, traceback=None)


def merge_reports(
    reports: Sequence[Report],
    labels: Sequence[str] | None = None,
    *,
    ranks: Sequence[int] | None = None,
) -> Report:
    """One report from one per rank (or per process: ``leakscope watch``).

    Results are matched by target and mode, in order of first appearance. A
    result every report that has it agrees on appears once (``rank`` None, the
    slowest one's seconds); where they differ, each report's result appears,
    with its ``rank`` (``ranks[i]``, by default its index), or with ``labels``
    its target suffixed ``@ label`` (``@ rank 1``, ``@ pid 4242``). The exit
    code is therefore the worst over ranks.
    """
    first = reports[0]
    keys: dict[tuple[str, object], None] = {}
    for report in reports:
        for r in report.results:
            keys.setdefault((r.target, r.mode), None)
    merged: list[TargetResult] = []
    for key in keys:
        per_rank = [
            (i, r)
            for i, report in enumerate(reports)
            for r in report.results
            if (r.target, r.mode) == key
        ]
        result = per_rank[0][1]
        if len(per_rank) == len(reports) and all(
            _comparable(r) == _comparable(result) for _, r in per_rank[1:]
        ):
            merged.append(dataclasses.replace(result, seconds=max(r.seconds for _, r in per_rank)))
        elif labels is None:
            merged.extend(
                dataclasses.replace(r, rank=ranks[i] if ranks is not None else i)
                for i, r in per_rank
            )
        else:
            merged.extend(
                dataclasses.replace(r, target=f"{r.target} @ {labels[i]}") for i, r in per_rank
            )
    return dataclasses.replace(first, results=tuple(merged))


__all__ = [
    "GROUP_TIMEOUT_S",
    "Lockstep",
    "barrier",
    "gather_report",
    "is_reporting_rank",
    "launcher_env",
    "merge_reports",
    "multi_rank",
    "process_group",
    "rank_and_world",
    "session",
]
