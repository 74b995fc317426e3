"""The ranks of one launch: every rank's report reaches rank 0 through the launch's own store.

# NOTE [One launch's store]
# Under torchrun every rank runs ``leakscope watch`` and rank 0 prints the one
# report. A directory the ranks agree on by name (``/tmp/...-$TORCHELASTIC_RUN_ID``,
# an id that is ``none`` under torchrun's static rendezvous) is shared by every
# launch that reuses the name: rank 0 would merge an earlier launch's stale
# report, and a slow rank would write where nobody reads any more. So the
# reports travel through the c10d ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT``
# that belongs to this launch and to no other:
#
# - torchrun's agent hosts it (``TORCHELASTIC_USE_AGENT_STORE=True``): the
#   store of its rendezvous, alive while the agent runs and gone with it;
# - under a launcher without an agent store, rank 0's ``leakscope watch``
#   hosts it before its job starts, as torch's ``env://`` rendezvous would in
#   rank 0, and the jobs are given ``TORCHELASTIC_USE_AGENT_STORE=True``, so
#   their own ``env://`` rendezvous joins it as torchrun's workers join the
#   agent's.
#
# Keys live under ``leakscope/watch/<run id>/<restart count>/``; nothing is
# written to disk, so nothing stale can be read and nothing is left to clean.
# Each rank sets ``started/<rank>`` when it starts and beats ``alive/<rank>``
# every HEARTBEAT_S; it sets ``report/<rank>`` once its report is made. Rank 0
# waits for the report of every rank that started and still beats. A rank that
# has not started within ``LEAKSCOPE_WATCH_RANK_WAIT_S`` (RANK_WAIT_S) of rank
# 0's start, or stopped beating for LOST_S, is an error result (exit 3), never
# a silent gap. The other ranks wait for ``done`` (while rank 0 beats) before
# they exit: torchrun stops every rank as soon as one exits non-zero, and rank 0
# must have printed by then.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import threading
import time
from collections.abc import Callable
from typing import Any

from leakscope import __version__
from leakscope.errors import TargetError
from leakscope.live.processes import process_label, report_of
from leakscope.results import Mode, Report, TargetResult, Verdict
from leakscope.serialize import to_data

#: how long rank 0 waits for a rank that has not started ``leakscope watch`` (``LEAKSCOPE_WATCH_RANK_WAIT_S``)
RANK_WAIT_S = 120.0
ENV_RANK_WAIT = "LEAKSCOPE_WATCH_RANK_WAIT_S"
#: a rank's heartbeat period, and how long without one makes it lost
HEARTBEAT_S = 2.0
LOST_S = 60.0
_POLL_S = 0.25


def rank_wait_s() -> float:
    """:data:`RANK_WAIT_S`, or ``LEAKSCOPE_WATCH_RANK_WAIT_S`` when it holds a number of seconds > 0."""
    try:
        value = float(os.environ.get(ENV_RANK_WAIT, ""))
    except ValueError:
        return RANK_WAIT_S
    return value if value > 0 and value == value else RANK_WAIT_S


class RankExchange:
    """One rank's end of the launch's store (NOTE [One launch's store])."""

    def __init__(self, store: Any, rank: int, world: int, agent: bool) -> None:
        self.store = store
        self.rank = rank
        self.world = world
        #: True when torchrun's agent hosts the store; False when rank 0's leakscope watch does
        self.agent = agent
        self.started = time.monotonic()
        self.prefix = (
            f"leakscope/watch/{os.environ.get('TORCHELASTIC_RUN_ID') or 'none'}/"
            f"{os.environ.get('TORCHELASTIC_RESTART_COUNT') or '0'}/"
        )
        self._lock = threading.Lock()
        self._beating = threading.Event()
        self._beat = threading.Thread(
            target=self._heartbeat, name="leakscope-watch-heartbeat", daemon=True
        )

    @classmethod
    def join(cls, rank: int, world: int) -> RankExchange:
        """Connect to this launch's store (rank 0 without an agent store: host it); say this rank started."""
        import torch.distributed as dist

        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
        if not host or not port.isdigit():
            raise TargetError(
                f"rank {rank} of {world}: MASTER_ADDR and MASTER_PORT are not set, so the ranks cannot share their "
                "reports; run every rank under torchrun (torchrun --nproc-per-node N -m leakscope watch ...)"
            )
        agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        hosted = rank == 0 and not agent
        try:
            store = dist.TCPStore(  # type: ignore[attr-defined]
                host,
                int(port),
                is_master=hosted,
                timeout=datetime.timedelta(seconds=rank_wait_s()),
                wait_for_workers=False,
                multi_tenant=hosted,
            )
        except Exception as exc:
            what = "host" if hosted else "reach"
            raise TargetError(
                f"rank {rank} of {world}: cannot {what} the launch's store at {host}:{port}: "
                f"{type(exc).__name__}: {exc}; is another job using MASTER_PORT {port}?"
            ) from None
        exchange = cls(store, rank, world, agent)
        exchange._set("started", str(os.getpid()))
        exchange._beat.start()
        return exchange

    def job_env(self) -> dict[str, str]:
        """What the job's process needs in its environment: to join the store rank 0's leakscope watch hosts."""
        return {} if self.agent else {"TORCHELASTIC_USE_AGENT_STORE": "True"}

    # -- the store ---------------------------------------------------------------------
    def _key(self, name: str, rank: int | None = None) -> str:
        return f"{self.prefix}{name}/{self.rank if rank is None else rank}"

    def _set(self, name: str, value: str) -> None:
        with self._lock:
            self.store.set(self._key(name), value)

    def _has(self, name: str, rank: int) -> bool:
        with self._lock:
            return bool(self.store.check([self._key(name, rank)]))

    def _get(self, name: str, rank: int) -> bytes:
        with self._lock:
            value: bytes = self.store.get(self._key(name, rank))
            return value

    def _beats(self, rank: int) -> int:
        with self._lock:
            return int(self.store.add(self._key("alive", rank), 0))

    def _heartbeat(self) -> None:
        while not self._beating.wait(HEARTBEAT_S):
            try:
                with self._lock:
                    self.store.add(self._key("alive"), 1)
            except Exception:
                return  # the store is gone: the launch is ending

    def close(self) -> None:
        self._beating.set()

    def abort(self, job: str, message: str) -> None:
        """This rank could not run its job (a usage or target error): tell the other end at once."""
        if self.rank == 0:
            try:
                self._set("done", "1")
            except Exception:
                pass
            self.close()
            return

        report = Report(
            results=(
                TargetResult(target=job, mode=Mode.TRAIN, verdict=Verdict.ERROR, error=message),
            ),
            leakscope_version=__version__,
            torch_version="",
            python_version=platform.python_version(),
        )
        self.send(process_label(), report, lambda: True)

    # -- the reports -------------------------------------------------------------------
    def send(self, label: str, report: Report, stopping: Callable[[], bool]) -> None:
        """A rank other than 0: hand this rank's report to rank 0, then wait until it has printed."""
        try:
            self._set("report", json.dumps({"label": label, "report": to_data(report)}))
            self._wait_for_rank0(stopping)
        except Exception:
            pass  # rank 0 (or the agent) is gone: it reports this rank missing, or nobody reports
        finally:
            self.close()

    def _wait_for_rank0(self, stopping: Callable[[], bool]) -> None:
        beats, seen = -1, time.monotonic()
        while not stopping() and not self._has("done", 0):
            now = self._beats(0)
            if now != beats:
                beats, seen = now, time.monotonic()
            elif time.monotonic() - seen > LOST_S:
                return
            time.sleep(_POLL_S)

    def gather(self, own: Report, own_label: str, job: str, stopping: Callable[[], bool]) -> Report:
        """Rank 0: every rank's report merged, an error result for each rank that sent none."""
        from leakscope.harness.distributed import merge_reports

        wait = rank_wait_s()
        parts: dict[int, tuple[str, Report]] = {0: (own_label, own)}
        missing: dict[int, str] = {}
        pending = set(range(1, self.world))
        beats: dict[int, tuple[int, float]] = {}
        try:
            while pending:
                for rank in sorted(pending):
                    if self._has("report", rank):
                        data = json.loads(self._get("report", rank))
                        report = report_of(data)
                        if report is None:
                            missing[rank] = f"rank {rank}'s report could not be read"
                        else:
                            parts[rank] = (str(data.get("label", f"rank {rank}")), report)
                        pending.discard(rank)
                    elif self._has("started", rank):
                        count = self._beats(rank)
                        last = beats.get(rank)
                        if last is None or last[0] != count:
                            beats[rank] = (count, time.monotonic())
                        elif time.monotonic() - last[1] > LOST_S:
                            missing[rank] = (
                                f"rank {rank} started leakscope watch but stopped answering for {LOST_S:g}s before "
                                "it sent its report (its process was killed, or its host is gone)"
                            )
                            pending.discard(rank)
                    elif time.monotonic() - self.started > wait:
                        missing[rank] = (
                            f"rank {rank} did not start leakscope watch within {wait:g}s of rank 0; run every rank "
                            f"as `torchrun ... -m leakscope watch ...` (or raise {ENV_RANK_WAIT})"
                        )
                        pending.discard(rank)
                if pending and stopping():
                    for rank in pending:
                        missing[rank] = f"rank {rank} had sent no report when rank 0 was stopped"
                    break
                time.sleep(_POLL_S if pending else 0)
        except (
            Exception
        ) as exc:  # the store went away under rank 0: the ranks not heard from are missing
            for rank in pending:
                missing[rank] = (
                    f"rank {rank}'s report was lost: the launch's store failed: {type(exc).__name__}: {exc}"
                )
        ranks = sorted(parts)
        merged = merge_reports([parts[r][1] for r in ranks], ranks=ranks)
        summaries = [s for s in (parts[r][1].watch for r in ranks) if s is not None]
        if merged.watch is not None:
            merged = dataclasses.replace(
                merged,
                watch=dataclasses.replace(
                    merged.watch,
                    processes=tuple(p for s in summaries for p in s.processes),
                    calls=tuple(c for s in summaries for c in s.calls),
                ),
            )
        errors = tuple(
            TargetResult(
                target=job, mode=Mode.TRAIN, verdict=Verdict.ERROR, error=missing[rank], rank=rank
            )
            for rank in sorted(missing)
        )
        try:
            self._set("done", "1")
        except Exception:
            pass
        self.close()
        return dataclasses.replace(merged, results=(*merged.results, *errors))


__all__ = ["ENV_RANK_WAIT", "RANK_WAIT_S", "RankExchange", "rank_wait_s"]
