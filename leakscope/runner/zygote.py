"""The fork server of an isolated check (``python -m leakscope.runner.zygote [MODEL]``), and both ends of
its protocol: :func:`main` in the zygote, :class:`Client` in the parent.

Started by :mod:`leakscope.runner.isolation`, once per check. It imports torch,
tensordict and leakscope's check machinery (and transformers and peft for
``MODEL`` ``hf-lora``), then forks one fresh child per
target; the child runs the target exactly as ``python -m leakscope.runner.worker``
does (:func:`leakscope.runner.worker.run_request`). See NOTE [Zygote].

Protocol (JSON lines). On its stdin the parent sends ``{"id": N, "request":
PATH}`` (check the request file PATH in a new child) and ``{"kill": N}`` (kill
child N's process group: a timeout). On the file descriptor that was its stdout
the zygote answers ``{"ready": true}`` once imported (or ``{"ready": false,
"reason": ...}``: the parent then spawns every target), ``{"id": N, "pid": P}``
once child N runs in its own session, ``{"id": N, "spawn": REASON}`` when it
will not fork (the parent spawns that target), and ``{"id": N, "status": S}``
after child N ended (``S`` as :attr:`subprocess.Popen.returncode`: negative for
a signal). End of its stdin: kill every child's group, reap them, exit.

# NOTE [Zygote]
# Importing torch and tensordict costs about 3 s, and a process per target paid
# it per target (20 targets: 53 s isolated against 4.4 s in one process). This
# process pays it once and forks a child per target; a fork copies the imported
# heap for the price of its page tables. Forking is safe only in a process that
# runs nothing but the calling thread and holds no device context, so:
# - No threads before a fork. We run no torch op here (an op may start the
#   OpenMP pool, whose threads a child would not have: its next parallel region
#   hangs), set torch's intra-op threads to 1 before anything else anyway, and
#   import with ``OPENBLAS_NUM_THREADS=1`` (numpy's OpenBLAS starts its thread
#   server when torch loads numpy). Before every fork we count the threads in
#   /proc/self/task: more than one, and the target is spawned instead.
# - No CUDA. Nothing here touches CUDA, and a child that uses the GPU
#   initialises it itself, after the fork, which CUDA supports; if CUDA is
#   initialised here anyway, targets are spawned. ``--device cuda`` is always
#   spawned (the parent decides; a GPU check is not where the import cost hurts).
# - No user code. The target (and anything it imports) is imported in the
#   child, so a module-level side effect of one target cannot reach the next.
# - A child starts as a fresh interpreter would: its own session (``setsid``,
#   so the parent can kill its whole process group, helpers included), stdin
#   /dev/null, stdout pointed at stderr, the signal handlers and the signal
#   mask this process started with (the mask is the parent's, as a spawned
#   child's is), the zygote's descriptors closed, the GC unfrozen, ``random``,
#   numpy and torch's default generator reseeded from the OS (as each seeds
#   itself at import), torch's thread count and the environment as they were
#   before we changed them. It dies with the zygote
#   (``PR_SET_PDEATHSIG``), so a killed zygote leaves no orphan checking on.
# The parent still enforces ``--timeout`` (it asks us to kill), and still reads
# each child's results from the file the child streams them to, so every
# guarantee of docs/isolation.md holds for forked and spawned children alike.
# Where fork is unsafe or unavailable (not Linux, a launcher's ranks, CUDA) the
# parent spawns ``python -m leakscope.runner.worker`` per target, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import faulthandler
import gc
import importlib
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any, NoReturn

from leakscope import interrupts
from leakscope.options import ModelKind
from leakscope.probe.cost import prepare
from leakscope.runner import worker

#: leakscope's own modules a check imports: loaded once here instead of in every child
#: (``tests/test_isolation.py`` checks that a check imports no other leakscope module)
PRELOAD = (
    "leakscope.runner.worker",
    "leakscope.runner.inprocess",
    "leakscope.adapters.lightning",
    "leakscope.adapters.lightning_build",
    "leakscope.adapters.lightning_loop",
    "leakscope.adapters.registry",
    "leakscope.adapters.trainer",
    "leakscope.adapters.trainer_build",
    "leakscope.adapters.verl",
    "leakscope.diagnose.findings",
    "leakscope.diagnose.fixes",
    "leakscope.diagnose.growth",
    "leakscope.diagnose.judge",
    "leakscope.diagnose.kinds",
    "leakscope.diagnose.projection",
    "leakscope.diagnose.safety",
    "leakscope.diagnose.storefix",
    "leakscope.harness.distributed",
    "leakscope.harness.experiment",
    "leakscope.harness.guard",
    "leakscope.harness.observe",
    "leakscope.harness.protocol",
    "leakscope.harness.rng",
    "leakscope.harness.run",
    "leakscope.harness.runtime",
    "leakscope.harness.gradients",
    "leakscope.harness.source",
    "leakscope.probe.steps",
    "leakscope.harness.stored",
    "leakscope.harness.target",
    "leakscope.harness.trial",
    "leakscope.models.batch_keys",
    "leakscope.models.names",
    "leakscope.models.tiny",
    "leakscope.holders",
    "leakscope.policy",
    "leakscope.phase",
    "leakscope.probe.autograd",
    "leakscope.probe.cost",
    "leakscope.probe.library",
    "leakscope.probe.liveness",
    "leakscope.probe.release",
    "leakscope.probe.safe",
    "leakscope.probe.view",
    "leakscope.probe.walk",
    "leakscope.serialize",
    "leakscope.snippets",
)

#: set while importing, so numpy's OpenBLAS starts no thread server (see NOTE [Zygote])
_QUIET_THREADS = {"OPENBLAS_NUM_THREADS": "1"}
_PR_SET_PDEATHSIG = 1


@dataclasses.dataclass(frozen=True)
class _Fresh:
    """What a fresh interpreter had, for a child to go back to."""

    signals: dict[int, Any]
    #: the blocked signals this process started with (inherited from the parent, as a spawned child's are)
    mask: set[int | signal.Signals]
    environ: dict[str, str | None]
    torch_threads: int


@dataclasses.dataclass
class _Child:
    ident: int
    pid: int
    pidfd: int


def native_threads() -> int:
    """Threads of this process as the kernel counts them (0 when it cannot tell)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def unsafe_to_fork() -> str | None:
    """Why forking this process now would be unsafe, or None."""
    threads = native_threads()
    if threads != 1 or threading.active_count() != 1:
        return f"the zygote runs {threads or 'an unknown number of'} threads"
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and cuda.is_initialized():
        return "CUDA is initialised in the zygote"
    return None


def _fresh_signals() -> dict[int, Any]:
    handlers: dict[int, object] = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if handler is not None:  # None: set outside Python, nothing we changed
            handlers[int(sig)] = handler
    return handlers


def _load(model: str | None) -> _Fresh:
    """Import the check's modules (and ``model``'s libraries) without starting a thread or running an op."""
    fresh_signals = _fresh_signals()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    environ = {name: os.environ.get(name) for name in _QUIET_THREADS}
    os.environ.update(_QUIET_THREADS)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # before anything can run an op: no intra-op pool to lose in a fork
    import tensordict  # noqa: F401

    for name in PRELOAD:
        importlib.import_module(name)
    from leakscope.adapters.registry import _entry_points

    _entry_points()  # every check lists the adapter entry points (metadata only: nothing is imported)

    prepare()  # NOTE [One measurement per machine]: from the cache, or a fresh interpreter; no op here
    if model == ModelKind.HF_LORA:  # transformers and peft: seconds per child otherwise
        from leakscope.errors import UsageError
        from leakscope.models.hf import _imports

        with contextlib.suppress(UsageError):  # not installed: each child says so
            _imports()
    return _Fresh(signals=fresh_signals, mask=mask, environ=environ, torch_threads=threads)


def _send(control: IO[str], message: dict[str, object]) -> None:
    control.write(json.dumps(message) + "\n")
    control.flush()


class _Server:
    def __init__(self, control: IO[str], fresh: _Fresh) -> None:
        self.control = control
        self.fresh = fresh
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, _Child] = {}  # by id

    def serve(self) -> None:
        os.set_blocking(0, False)
        self.selector.register(0, selectors.EVENT_READ, None)
        pending = b""
        while True:
            for key, _ in self.selector.select():
                if key.data is not None:
                    self._reap(key.data)
                    continue
                chunk = os.read(0, 65536)
                if not chunk:  # the parent is done, or gone
                    self._kill_all()
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._handle(json.loads(line))

    def _handle(self, message: dict[str, Any]) -> None:
        if "kill" in message:
            child = self.children.get(int(message["kill"]))
            if child is not None:
                kill_group(child.pid)  # not reaped yet: the group id is still its own
            return
        ident = int(message["id"])
        reason = unsafe_to_fork()
        if reason is not None:
            _send(self.control, {"id": ident, "spawn": reason})
            return
        self._fork(ident, str(message["request"]))

    def _fork(self, ident: int, request: str) -> None:
        ready_r, ready_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            try:
                os.close(ready_r)
                self._become_worker(parent, ready_w, request)
            finally:
                os._exit(70)
        os.close(ready_w)
        os.read(ready_r, 1)  # the child runs in its own session (or died trying: EOF)
        os.close(ready_r)
        pidfd = os.pidfd_open(pid)
        child = _Child(ident, pid, pidfd)
        self.children[ident] = child
        self.selector.register(pidfd, selectors.EVENT_READ, child)
        _send(self.control, {"id": ident, "pid": pid})

    def _become_worker(self, parent: int, ready: int, request: str) -> NoReturn:
        os.setsid()  # its own process group: the parent kills helpers with it
        _die_with(parent)
        os.write(ready, b"1")
        os.close(ready)
        # The zygote's descriptors: control channel, selector, other children's pidfds.
        for child in self.children.values():
            os.close(child.pidfd)
        self.selector.close()
        os.close(self.control.fileno())
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _reset_process(self.fresh)

        sys.argv = [
            worker.__file__,
            request,
        ]  # as ``python -m leakscope.runner.worker REQUEST`` has it
        worker.run_request(request)

    def _reap(self, child: _Child) -> None:
        kill_group(
            child.pid
        )  # helpers the engine left running die with it, as with a spawned child
        _, status = os.waitpid(child.pid, 0)
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        del self.children[child.ident]
        _send(self.control, {"id": child.ident, "status": os.waitstatus_to_exitcode(status)})

    def _kill_all(self) -> None:
        for child in list(self.children.values()):
            kill_group(child.pid)
            os.waitpid(child.pid, 0)
            os.close(child.pidfd)
        self.children.clear()


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when the zygote dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the zygote died before prctl took effect
        os._exit(1)


def _reset_process(fresh: _Fresh) -> None:
    """Make the forked child what a freshly started interpreter would be (see NOTE [Zygote])."""
    signal.set_wakeup_fd(-1)
    for sig, handler in fresh.signals.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, fresh.mask)
    gc.unfreeze()
    for name, value in fresh.environ.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    import torch

    random.seed()  # os.fork reseeds it too; say so here
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # as a fresh import would: from the OS
    torch.default_generator.seed()  # a fresh torch seeds itself from the OS too
    torch.set_num_threads(fresh.torch_threads)


def kill_group(pgid: int) -> None:
    """SIGKILL a process group (a child and the helpers it started); gone already is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- the parent's end -------------------------------------------------------------------------------


class Client:
    """The parent's end of the protocol: its handle on the fork server (the other end is :func:`main`)."""

    def __init__(self, model: str, stderr: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leakscope.runner.zygote", model],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.out = self.proc.stdout.fileno()
        os.set_blocking(self.out, False)
        self.buffer = b""
        self.alive = True

    def wait_ready(self, timeout: float, wake: int | None = None) -> bool:
        """Whether the zygote imported and may fork; ``wake`` is also waited on (a signal's wakeup
        descriptor, NOTE [Interrupts at any moment] in ``leakscope/interrupts.py``)."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.out, selectors.EVENT_READ, "out")
            if wake is not None:
                selector.register(wake, selectors.EVENT_READ, "wake")
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ready = selector.select(left)
                if not ready:
                    return False
                if wake is not None:
                    interrupts.drain(
                        wake
                    )  # Python raises the signal's KeyboardInterrupt at the next line
                if not any(key.data == "out" for key, _ in ready):
                    continue
                messages = self.read()
                if messages is None:
                    return False
                if messages:
                    return bool(messages[0].get("ready"))

    def send(self, message: dict[str, object]) -> bool:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.alive = False
        return self.alive

    def read(self) -> list[dict[str, Any]] | None:
        """The messages that arrived (maybe none); None once the zygote is gone."""
        try:
            chunk = os.read(self.out, 65536)
        except BlockingIOError:
            return []
        if not chunk:
            self.alive = False
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def close(self, grace: float = 10.0) -> None:
        """End of its stdin: it kills and reaps every child, then exits; after ``grace`` seconds we
        kill it (its children die with it, ``PR_SET_PDEATHSIG``)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        kill_group(self.proc.pid)
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def main() -> None:
    """Import once, report ready, fork a child per request until stdin ends."""
    control = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a print while importing must not reach the control channel
    sys.stdout = sys.stderr
    faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    try:
        fresh = _load(sys.argv[1] if len(sys.argv) > 1 else None)
    except BaseException as exc:  # noqa: B036 - the parent spawns instead; the child will name the cause
        _send(control, {"ready": False, "reason": f"importing failed: {type(exc).__name__}: {exc}"})
        os._exit(0)
    gc.freeze()  # the zygote's own collections never touch the heap its children share
    reason = unsafe_to_fork()
    _send(control, {"ready": reason is None, "reason": reason})
    if reason is None:
        _Server(control, fresh).serve()
    control.close()
    os._exit(0)  # no exit-time collection of torch's heap, no atexit work: nothing here needs it


if __name__ == "__main__":
    main()
