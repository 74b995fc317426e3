"""Check each target in its own child process, so one bad target cannot harm the others.

# NOTE [Why a process per target]
# leakscope imports and runs user code. An engine can print to stdout, call
# ``os._exit``, crash in native code, hang, push a saved-tensor hook and never
# pop it, change the default dtype, or leave a process group up. In one process
# any of these would kill the run, corrupt the JSON report, or change the
# verdict of the next target. A child process per target contains all of it:
# the parent never imports torch, points the child's stdout at stderr, kills
# the child's whole process group on timeout, and turns any way the child can
# die into an ``error`` result naming the cause. The children are forked from a
# zygote that imported torch once (NOTE [Zygote] in ``leakscope/runner/zygote.py``),
# or, where forking is unsafe, spawned as ``python -m leakscope.runner.worker``;
# the parent treats both alike. ``jobs`` children run at once (``-j N``); the
# report lists the targets in the order given (numbers in docs/isolation.md).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import platform
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path

from leakscope import __version__, interrupts
from leakscope.errors import UsageError
from leakscope.options import CheckOptions
from leakscope.phase import listened, report
from leakscope.results import Mode, Report, TargetResult, Verdict
from leakscope.runner.child import death_message, read_records, stderr_fd
from leakscope.runner.zygote import Client, kill_group
from leakscope.serialize import result_from_data, to_data

#: ``LEAKSCOPE_START_METHOD=spawn`` starts every child as a new interpreter (no zygote)
START_METHOD_ENV = "LEAKSCOPE_START_METHOD"
#: seconds the zygote may take to import torch before the targets are spawned instead
_ZYGOTE_START_S = 300.0
#: how long the zygote may take to kill and reap its children and exit, after a normal end
_ZYGOTE_GRACE_S = 10.0
#: the same after an interrupt or error: the children it may not have told us of yet die with it
_ZYGOTE_INTERRUPTED_S = 5.0
#: how often children are polled where the kernel cannot tell us (no pidfd)
_POLL_S = 0.05


def check_isolated(
    targets: Sequence[object],
    options: CheckOptions,
    *,
    on_result: Callable[[TargetResult], None] | None = None,
) -> Report:
    """Like :func:`leakscope.api.check`, each target in a fresh child process.

    Targets must be strings, or importable objects (named by module and
    qualified name); ``options.timeout`` bounds each target's process and
    ``options.jobs`` children run at once. ``on_result`` sees each target's
    results when its process ends; the report keeps the targets' order.
    Raises :class:`~leakscope.errors.UsageError` for options the child rejects.
    """
    outcome: list[list[TargetResult]] = [[] for _ in targets]
    versions: list[str | None] = [None] * len(targets)
    work: list[tuple[int, str]] = []
    for index, target in enumerate(targets):
        name = target_string(target)
        if name is not None:
            work.append((index, name))
            continue
        label = f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', type(target).__name__)}"
        outcome[index] = [
            _error(
                label,
                mode,
                f"{label} is not importable by name, so it cannot be checked in a child "
                "process; define it at module level, or check it with isolate=False",
            )
            for mode in options.modes
        ]
    with _Pool(options) as pool:
        for index, name, job in pool.run(work):
            results, versions[index] = _collect(name, options, job)
            outcome[index] = results
            for result in results:
                if on_result is not None:
                    on_result(result)
    return Report(
        results=tuple(result for results in outcome for result in results),
        leakscope_version=__version__,
        torch_version=next((v for v in versions if v), None) or _installed_torch_version(),
        python_version=platform.python_version(),
    )


def target_string(target: object) -> str | None:
    """``target`` as a ``pkg.mod:Name`` string a child process can resolve, or None."""
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def can_fork(options: CheckOptions) -> bool:
    """Whether children may be forked from a zygote here (NOTE [Zygote]); else they are spawned."""
    if os.environ.get(START_METHOD_ENV, "fork") == "spawn":
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return False
    if options.device == "cuda":
        return False
    from leakscope.harness.distributed import launcher_env

    return (
        launcher_env() is None
    )  # a launcher's ranks (torchrun) talk to each other: never fork under one


@dataclasses.dataclass
class _Job:
    """One target's child process, however it was started."""

    ident: int
    tmp: tempfile.TemporaryDirectory[str]
    request: Path
    results: Path
    forked: bool = False
    #: process (and process group) id, once it runs
    pid: int | None = None
    proc: subprocess.Popen[bytes] | None = None
    pidfd: int | None = None
    started: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    #: the target string, and how far its phase lines have been relayed (NOTE [Phases from the child])
    target: str = ""
    relayed: int = 0

    @property
    def done(self) -> bool:
        return self.returncode is not None


class _Pool:
    """Runs up to ``options.jobs`` children at once, forked where safe, spawned otherwise."""

    def __init__(self, options: CheckOptions) -> None:
        self.options = options
        self.jobs = max(1, options.jobs)
        self.fork = can_fork(options)
        self.zygote: Client | None = None
        self.running: dict[int, _Job] = {}
        self.selector = selectors.DefaultSelector()
        self.stack = contextlib.ExitStack()
        #: readable when a signal arrives (NOTE [Interrupts at any moment] in leakscope/interrupts.py)
        self.wake: int | None = None

    def __enter__(self) -> _Pool:
        self.wake = self.stack.enter_context(interrupts.wakeup())
        if self.wake is not None:
            self.selector.register(self.wake, selectors.EVENT_READ, None)
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        # Normal end, a usage error, KeyboardInterrupt: nothing we started outlives the check.
        # NOTE [Interrupts at any moment]: not interrupted half-way, and bounded in time.
        with interrupts.deferred():
            if self.zygote is not None and self.zygote.alive:
                for message in self.zygote.read() or []:  # children forked since we last looked
                    job = self.running.get(int(message.get("id", -1)))
                    if job is not None and "pid" in message:
                        job.pid = int(message["pid"])
            for job in list(self.running.values()):
                if job.pid is not None and not job.done:
                    kill_group(job.pid)  # forked or spawned: the child and the helpers it started
                if job.proc is not None:
                    job.proc.wait()
                self._forget(job)
                job.tmp.cleanup()
            if self.zygote is not None:
                self.zygote.close(grace=_ZYGOTE_GRACE_S if kind is None else _ZYGOTE_INTERRUPTED_S)
            self.selector.close()
            self.stack.close()

    def run(self, work: Sequence[tuple[int, str]]) -> Iterator[tuple[int, str, _Job]]:
        """Each ``(index, target, finished job)``, in the order they finish."""
        queue = collections.deque(work)
        names: dict[int, str] = {}
        while queue or self.running:
            while queue and len(self.running) < self.jobs:
                index, name = queue.popleft()
                names[index] = name
                self._start(index, name)
            self._wait()
            for job in sorted((j for j in self.running.values() if j.done), key=lambda j: j.ident):
                self._forget(job)
                try:
                    yield job.ident, names[job.ident], job
                finally:
                    job.tmp.cleanup()

    def _start(self, index: int, target: str) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="leakscope-")
        job = _Job(
            index,
            tmp,
            Path(tmp.name, "request.json"),
            Path(tmp.name, "results.jsonl"),
            target=target,
        )
        report("starting a check process", target=target)

        request = {"target": target, "options": to_data(self.options), "results": str(job.results)}
        job.request.write_text(json.dumps(request), encoding="utf-8")
        self.running[index] = job
        zygote = self._zygote()
        if zygote is not None and zygote.send({"id": index, "request": str(job.request)}):
            job.forked = True  # it answers with the pid (or asks us to spawn it)
        else:
            self._spawn(job)

    def _zygote(self) -> Client | None:
        if not self.fork:
            return None
        if self.zygote is None:
            with interrupts.deferred():  # a signal mid-Popen would lose the process it started
                self.zygote = Client(self.options.model, stderr_fd())
            if not self.zygote.wait_ready(_ZYGOTE_START_S, self.wake):
                self.fork = False  # it could not import, or may not fork: spawn every target
                self.zygote.close()
                self.zygote = None
                return None
            self.selector.register(self.zygote.out, selectors.EVENT_READ, None)
        return self.zygote if self.zygote.alive else None

    def _spawn(self, job: _Job) -> None:
        job.forked = False
        # stdout=2: whatever the child writes to its stdout goes to our stderr,
        # never into the report (the child also redirects it itself).
        with interrupts.deferred():  # a signal mid-Popen would lose the process it started
            job.proc = subprocess.Popen(
                [sys.executable, "-m", "leakscope.runner.worker", str(job.request)],
                stdin=subprocess.DEVNULL,
                stdout=stderr_fd(),
                start_new_session=True,
            )
            self._running(job, job.proc.pid)
        try:
            job.pidfd = os.pidfd_open(job.pid)  # type: ignore[arg-type]
        except (AttributeError, OSError):
            return  # polled instead
        self.selector.register(job.pidfd, selectors.EVENT_READ, job)

    def _running(self, job: _Job, pid: int) -> None:
        job.pid = pid
        job.started = time.perf_counter()

    def _wait(self) -> None:
        """Block until a child ends, a message comes, or a deadline passes; then act on it."""
        timeout: float | None = None
        if any(j.proc is not None and j.pidfd is None for j in self.running.values()):
            timeout = _POLL_S
        if listened():
            timeout = _RELAY_S if timeout is None else min(timeout, _RELAY_S)
        limit = self.options.timeout
        if limit:
            for job in self.running.values():
                if job.pid is not None and not job.timed_out:
                    left = max(0.0, job.started + limit - time.perf_counter())
                    timeout = left if timeout is None else min(timeout, left)
        if not any(j.done for j in self.running.values()):
            self.selector.select(timeout)
        if self.wake is not None:
            interrupts.drain(self.wake)  # a signal woke us: Python raises it at the next line
        if self.zygote is not None and self.zygote.alive:
            self._messages()
        if listened():
            for job in self.running.values():
                job.relayed = _relay(job.results, job.relayed, job.target)
        for job in self.running.values():
            if job.proc is not None and not job.done:
                self._poll_spawned(job)
            if limit and job.pid is not None and not job.done and not job.timed_out:
                if time.perf_counter() - job.started >= limit:
                    job.timed_out = True
                    if job.proc is not None:
                        kill_group(job.pid)  # not reaped yet: still its group
                    elif self.zygote is not None:
                        self.zygote.send({"kill": job.ident})

    def _messages(self) -> None:
        assert self.zygote is not None
        messages = self.zygote.read()
        for message in messages or []:
            job = self.running.get(int(message.get("id", -1)))
            if job is None:
                continue
            if "pid" in message:
                self._running(job, int(message["pid"]))
            elif "spawn" in message:
                self._spawn(job)
            elif "status" in message:
                self._ended(job, int(message["status"]))
        if messages is None:  # the zygote died (killed, out of memory): its children died with it
            self.selector.unregister(self.zygote.out)
            self.fork = False
            for job in self.running.values():
                if job.forked and not job.done:
                    if job.pid is None:
                        self._spawn(job)
                    else:
                        kill_group(job.pid)  # helpers the engine started
                        self._ended(job, -signal.SIGKILL)

    def _poll_spawned(self, job: _Job) -> None:
        assert job.proc is not None and job.pid is not None
        try:
            ended = os.waitid(os.P_PID, job.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            ended = None
        if ended is None:
            return
        # Also ends anything the engine spawned (data workers, servers), before the pid can be reused.
        kill_group(job.pid)
        self._ended(job, job.proc.wait())

    def _ended(self, job: _Job, returncode: int) -> None:
        job.returncode = returncode
        job.seconds = time.perf_counter() - job.started

    def _forget(self, job: _Job) -> None:
        if job.pidfd is not None:
            self.selector.unregister(job.pidfd)
            os.close(job.pidfd)
            job.pidfd = None
        self.running.pop(job.ident, None)


def _collect(
    target: str, options: CheckOptions, job: _Job
) -> tuple[list[TargetResult], str | None]:
    """The results a finished child streamed, and an error result for each mode it did not finish."""
    records = read_records(job.results)
    version = next((r["torch_version"] for r in records if "torch_version" in r), None)
    usage = next((r["usage_error"] for r in records if "usage_error" in r), None)
    if usage is not None:  # bad options (``--device cuda`` without a GPU): exit 2, as in process
        raise UsageError(usage)
    results = [result_from_data(r["result"]) for r in records if "result" in r]
    fatal = next((r for r in records if "fatal" in r), None)
    done = {r.mode for r in results}
    missing = [mode for mode in options.modes if mode not in done]
    if missing:
        if job.timed_out:
            message = timeout_message(options.timeout or 0.0, *last_phase(records))
        elif fatal is not None:
            message = f"leakscope's check process failed: {fatal['fatal']}; please report it with --debug output"
        else:
            message = death_message(job.returncode or 0)
        detail = fatal.get("traceback") if fatal is not None else None
        results.extend(_error(target, mode, message, detail, job.seconds) for mode in missing)
    results.sort(
        key=lambda r: options.modes.index(r.mode) if r.mode in options.modes else len(options.modes)
    )
    return results, version


def last_phase(records: Sequence[dict[str, object]]) -> tuple[str | None, str | None]:
    """The phase and step the child reported last (NOTE [Phases from the child]), by the rules of
    :func:`leakscope.phase.report`: a new target or mode starts over, a new phase clears the step."""
    phase: str | None = None
    step: str | None = None
    for record in records:
        event = record.get("phase")
        if not isinstance(event, dict):
            continue
        if "target" in event or "mode" in event:
            phase = step = None
        if isinstance(event.get("phase"), str):
            phase, step = event["phase"], None
        if isinstance(event.get("step"), str):
            step = event["step"]
    return phase, step


#: what a hang in each step of a check means, and what to do about it
_STEP_WORDS = {
    "building": (
        "building the engine",
        "the engine's __init__ did not return; fix the hang (a blocking call, a wait on other ranks, an "
        "endless loop) or raise --timeout",
    ),
    "step": (
        "running the step",
        "the engine's step did not return; fix the hang (a blocking call, a wait on other ranks, an endless "
        "loop) or raise --timeout",
    ),
    "walking": (
        "walking the holders",
        "leakscope's walk over what the engine keeps did not finish (it runs none of the engine's code: the "
        "engine keeps a very large structure); lower --max-objects or raise --timeout",
    ),
}
_PHASE_WORDS = {
    "starting a check process": (
        "starting the check process",
        "the check process could not start in time; raise --timeout",
    ),
    "importing torch and leakscope": (
        "starting the check process (importing torch)",
        "the check process could not start in time; raise --timeout",
    ),
    "importing the target": (
        "importing the target",
        "importing the engine's module did not finish: a module-level statement blocks (a download, a wait on "
        "other ranks); guard it with `if __name__ == '__main__':` or raise --timeout",
    ),
}


#: phases named by what is being done
_PHASE_NAMES = {"growth": "measuring growth"}


def timeout_message(seconds: float, phase: str | None, step: str | None) -> str:
    """``timed out after 600 s while walking the holders (confirming 1 of 2); ...``: what the child
    was doing when it was killed, and what to do about it."""
    hint = (
        "the check did not finish in time; raise --timeout, and if it keeps happening, please report it "
        "with --debug output"
    )
    phase = _PHASE_NAMES.get(phase, phase) if phase is not None else None
    doing = phase or "setting up the check"
    if step is not None:
        words = _STEP_WORDS.get(step)
        if words is None and (step.startswith("micro-batch") or " loop over " in step):
            words = (f"running {step}", _STEP_WORDS["step"][1])
        doing, hint = words if words is not None else (step, hint)
        if phase and phase != "finding holders":  # the first phase goes without saying
            doing = f"{doing} ({phase})"
    elif phase in _PHASE_WORDS:
        doing, hint = _PHASE_WORDS[phase]
    return f"timed out after {seconds:g} s while {doing}; the check process was killed: {hint}"


# NOTE [Phases from the child]
# The child appends each phase it enters (leakscope.phase.report) to its
# records file as {"phase": {...}}, next to its results. While children run,
# the pool's loop wakes every 0.1 s and reports the new lines in this process
# under the target's name, so the CLI's status line shows the phase even when a
# child hangs in it: the last one read is where it hangs. Nothing is read when
# nothing listens. A child killed by the timeout is named by the last phase it
# wrote (``timeout_message``): "timed out after 600 s while walking the holders".
_RELAY_S = 0.1


def _relay(path: Path, offset: int, target: str) -> int:
    """Report the phases in the complete lines after ``offset``; the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        event = record.get("phase") if isinstance(record, dict) else None
        if isinstance(event, dict):
            fields = {key: str(event[key]) for key in ("mode", "phase", "step") if key in event}
            report(
                fields.get("phase"), step=fields.get("step"), mode=fields.get("mode"), target=target
            )
    return offset + end


def _error(
    target: str, mode: Mode, message: str, detail: str | None = None, seconds: float = 0.0
) -> TargetResult:
    return TargetResult(
        target=target,
        mode=mode,
        verdict=Verdict.ERROR,
        error=message,
        traceback=detail,
        seconds=round(seconds, 3),
    )


def _installed_torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"
