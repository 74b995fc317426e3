"""Shared pieces of the benchmarks: result rows, timed subprocesses, the machine."""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured number, its target (if any) and whether it meets it."""

    section: str
    name: str
    value: str
    target: str = ""
    ok: bool | None = None  # None: reported only

    @property
    def status(self) -> str:
        return "" if self.ok is None else ("PASS" if self.ok else "FAIL")


@dataclasses.dataclass(frozen=True)
class Run:
    """One finished subprocess: wall seconds, peak RSS (KiB), exit status, output."""

    seconds: float
    max_rss_kib: int
    returncode: int
    stdout: str
    stderr: str
    #: user + system CPU of the process and the children it waited for
    cpu_seconds: float = 0.0


def run_timed(cmd: Sequence[str], env: dict[str, str] | None = None, timeout: float = 600) -> Run:
    """Run ``cmd``; its wall time and its own peak RSS (from ``wait4``, so no wrapper process)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env, cwd=ROOT, text=True)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(
            seconds,
            int(usage.ru_maxrss),
            proc.returncode,
            out.read(),
            err.read(),
            usage.ru_utime + usage.ru_stime,
        )


def child_env(**extra: str) -> dict[str, str]:
    """The benchmark's environment for children, with the project root importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine() -> str:
    """One line naming the machine the numbers came from."""
    try:
        import torch

        torch_version = str(torch.__version__)
    except Exception:  # noqa: BLE001 - a benchmark header must not fail
        torch_version = "not installed"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{platform.machine()} · {cpus} CPUs · Python {platform.python_version()} · torch {torch_version}"
        f" · OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} · load average {load}"
    )


def python() -> str:
    return sys.executable


def leakscope_cmd() -> list[str]:
    """The installed ``leakscope`` console script next to this Python, else ``python -m leakscope``."""
    script = Path(sys.executable).with_name("leakscope")
    return [str(script)] if script.exists() else [sys.executable, "-m", "leakscope"]
