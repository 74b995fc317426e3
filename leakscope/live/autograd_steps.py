"""A job's steps found from autograd itself, for a ``watch`` given no ``--method``.

# NOTE [Steps from autograd]
# A plain script has no step method to name: its loop is at module level, in a function, in a
# class of its own. What every loop does call is torch, so with no ``--method`` the micro-batches
# are found from it, with public process-wide hooks and two replaced functions:
#
# - outermost ``nn.Module`` calls (torch's global forward pre-hook; outermost: no other module
#   call on this thread's stack). A micro-batch opens at one and runs until the same module's
#   next outermost call once a backward has run (the model the loop calls each iteration,
#   whatever else it calls between: a loss module, a GAN's discriminator and its second
#   backward, a siamese model's second forward). A job that never calls backward (inference,
#   evaluation, generation) is stepped by those calls alone;
# - ``torch.autograd.backward`` / ``torch.autograd.grad`` (``Tensor.backward`` calls
#   ``torch.autograd.backward`` by module attribute; ``accelerator.backward``, DeepSpeed and
#   Lightning end there too). There is no global hook for them, so both are replaced, in
#   ``torch.autograd`` and wherever a loaded module bound them by name (NOTE [Patching a
#   function]), while the job runs. A backward marks the micro-batch as training; in a job that
#   calls no module (a functional model) each one ends a micro-batch. A call made inside another
#   (checkpointing's recomputation on the CPU, a backward hook) or with ``create_graph=True`` (a
#   gradient penalty, a Hessian: more graph for the same step) is not a boundary. The module calls
#   watched before the first backward (the first iteration's forwards) are forgotten when it
#   comes, and the micro-batch runs from the first of them;
# - optimizer steps (torch's global ``register_optimizer_step_post_hook``) number the
#   micro-batches by the optimizer step they belong to (gradient accumulation: several per step;
#   a GAN: two steps per micro-batch).
#
# A framework's step method (``DEFAULT_METHODS``) is a better name: once the job imported one (it
# is patched) these boundaries wait, and its first call forgets what they found and removes them.
#
# NOTE [A framework imported, not used]
# A job may import a framework and train with a loop of its own (a library that imports Lightning
# for its callbacks and ships its own ``Trainer.train``: neuromancer). A framework's step runs
# before its backward (``training_step`` computes the loss it returns), so a backward while the
# framework's method has never been called is the job's own training: the boundaries stop waiting
# there, and the micro-batches run from the end of that backward (its forward was never watched;
# the module calls before it, an evaluation or a sanity check, were never stepped). Module calls
# alone still wait: an evaluation before ``fit`` is not an inference job.
#
# NOTE [Alive when the next forward starts]
# A micro-batch's graph is judged when the next one's forward starts: at the next outermost call
# of the module that opened it (in a functional job, at the next backward), and once when the job
# ends. The loop has then done its
# bookkeeping (logged, summed, appended, stepped the optimizer) and the next forward is about to
# build a new graph. A graph alive then raises the peak by at least one micro-batch's graph
# (bounded when only the latest is kept, growing when each one is); a graph freed before then is
# the loop's own business. The loop variable that still holds the latest loss until the forward
# rebinds it is not a holder (NOTE [The loop's latest result]).
"""

from __future__ import annotations

import enum
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

from leakscope.live.methods import MethodSpec, parse_method
from leakscope.live.observer import Observer, Opened, WatchStop, is_library_frame
from leakscope.live.patcher import Patcher
from leakscope.phase import report
from leakscope.results import Mode

#: the autograd entry points replaced while the job runs (NOTE [Steps from autograd])
ENTRY_POINTS = ("torch.autograd:backward", "torch.autograd:grad")


class Boundary(str, enum.Enum):
    """What ended each watched micro-batch."""

    BACKWARD = "backward"
    MODULE_CALL = "module call"
    METHOD = "method"


class AutogradSteps:
    """Drives an :class:`Observer` from autograd's calls (NOTE [Steps from autograd])."""

    def __init__(
        self, observer: Observer, busy: Any, deferred: Callable[[], bool] = lambda: False
    ) -> None:
        self.observer = observer
        #: true once a framework's step method is patched: the job imported it, and its step is the
        #: one to watch (an evaluation before ``fit`` must not end the watch as an inference job)
        self.deferred = deferred
        #: the watch's lock: one thread at a time in the observer (NOTE [Threads calling the step])
        self.busy = busy
        self.patcher = Patcher([parse_method(p) for p in ENTRY_POINTS], self._wrap)
        self.patcher.when_imported("torch", self._install_hooks)
        self.handles: list[Any] = []
        self.active = False
        self._local = threading.local()
        self.opened: Opened | None = None
        self.backward_seen = False
        #: a micro-batch ended and has not been looked at yet (NOTE [Alive when the next forward starts])
        self.pending = False
        self.skipped = 0
        self.optimizer_steps = 0
        #: the boundary the watched micro-batches came from, and where the loop is (``train.py:27 in main``)
        self.boundary: Boundary | None = None
        self.loop = ""
        self._target = ""
        #: the module whose outermost call opened the micro-batch: its next call ends it
        self._opener: Callable[[], Any] | None = None
        #: a backward ran in the open micro-batch
        self.backward_in_open = False
        #: torch.compile's count of compiled graphs when the open micro-batch began (NOTE [A micro-batch
        #: that compiles])
        self._compilations = 0

    # -- install and remove ------------------------------------------------------------
    def install(self) -> None:
        """Replace the entry points and hook modules and optimizers now, or when torch is imported."""
        self.active = True
        self.patcher.install()

    def _install_hooks(self, torch: types.ModuleType) -> None:
        if not self.active or self.handles:
            return
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handles = [
            register_module_forward_pre_hook(self._forward_pre),
            register_module_forward_hook(self._forward_post, always_call=True),
            register_optimizer_step_post_hook(self._optimizer_step),
        ]

    def remove(self) -> None:
        """Every hook removed and every entry point back (once; safe from inside a hook)."""
        self.active = False
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.remove()
        self.patcher.restore()
        opened, self.opened = self.opened, None
        if opened is not None:
            opened.close()

    def yield_to_method(self) -> None:
        """A framework's step method was called: it names the steps better (NOTE [Steps from autograd])."""
        if not self.active:
            return
        self.remove()
        if self.observer.calls:
            self.observer.restart()
        self.boundary = Boundary.METHOD
        self.pending = False

    def close(self) -> None:
        """The job ended: a micro-batch of module calls still open is one."""
        if (
            self.active
            and self.opened is not None
            and self._opener is not None
            and (self.backward_in_open or not self.backward_seen)
        ):
            self._end(None)
        self.remove()

    # -- the events --------------------------------------------------------------------
    def _mine(self, backward: bool = False) -> bool:
        """Whether this event is one to act on: watching, in the watching thread, not inside a watched
        method or a backward, and no other thread in the observer; while a framework's step method
        waits for its first call, a backward, and every event after one (NOTE [A framework imported,
        not used])."""
        observer = self.observer
        if not self.active or observer.done or observer.depth:
            return False
        if self.deferred() and not (backward or self.backward_seen):
            return False
        if getattr(self._local, "backward", 0):
            return False
        watching = observer.thread
        return watching is None or watching == threading.get_ident()

    def _forward_pre(self, module: Any, args: Any) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth or not self._mine() or not self.busy.acquire(blocking=False):
            return
        try:
            self._module_call(module, sys._getframe(1))
        except BaseException:
            local.depth = depth  # the module call does not happen
            raise
        finally:
            self.busy.release()

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        local = self._local
        local.depth = max(0, getattr(local, "depth", 1) - 1)

    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.active and not getattr(self._local, "backward", 0):
            self.optimizer_steps += 1

    def _module_call(self, module: Any, frame: types.FrameType) -> None:
        """NOTE [Steps from autograd]: the module that opened the micro-batch is called again."""
        if (
            self.opened is not None
            and self._opener is not None
            and self._opener() in (module, None)
            and (self.backward_in_open or not self.backward_seen)
        ):
            self._end(None)
        if self.pending:
            self._look(frame)
            if not self.active:
                return
        if self.opened is None:
            if not self.backward_seen and not self._target:
                where = loop_site(frame)
                self._target = f"{type(module).__qualname__}() at {where}"
                self.loop = where
                self.boundary = Boundary.MODULE_CALL
            self._begin(frame)
        if self._opener is None and not self.backward_in_open:
            self._opener = _weak(module)

    def _wrap(self, spec: MethodSpec, original: Callable[..., Any]) -> Callable[..., Any]:
        is_grad = spec.name == "grad"
        steps = self

        def leakscope_autograd(*args: Any, **kwargs: Any) -> object:
            create_graph = kwargs.get(
                "create_graph", args[4] if is_grad and len(args) > 4 else None
            )
            if not is_grad and create_graph is None and len(args) > 3:
                create_graph = args[3]
            local = steps._local
            if (
                create_graph
                or not steps._mine(backward=True)
                or not steps.busy.acquire(blocking=False)
            ):
                return original(*args, **kwargs)
            try:
                steps._backward(args[0] if args else kwargs.get("tensors", kwargs.get("outputs")))
            finally:
                steps.busy.release()
            local.backward = getattr(local, "backward", 0) + 1
            try:
                return original(*args, **kwargs)
            finally:
                local.backward -= 1
                if steps._mine(backward=True) and steps.opened is None and not steps.pending_stop():
                    steps._begin(None)  # the next micro-batch runs from here

        leakscope_autograd.__wrapped__ = original  # type: ignore[attr-defined]
        leakscope_autograd.__name__ = original.__name__
        leakscope_autograd.__qualname__ = original.__qualname__
        leakscope_autograd.__doc__ = original.__doc__
        return leakscope_autograd

    def pending_stop(self) -> bool:
        """Whether the micro-batches asked for are all watched (only the last look is left)."""
        return len(self.observer.calls) >= self.observer.options.micro_batches

    def _backward(self, tensors: Any) -> None:
        """NOTE [Steps from autograd]: a backward belongs to the open micro-batch; with no module calls
        (a functional model), it ends it."""
        frame = sys._getframe(2)
        try:
            if not self.backward_seen:
                if (
                    self.observer.calls or self.skipped
                ):  # the module calls were a training step's forwards
                    self.observer.restart()
                    self.pending = False
                    self.skipped = 0
                self.backward_seen = True
                where = loop_site(frame)
                self._target = f"backward() at {where}"
                self.loop = where
                self.boundary = Boundary.BACKWARD
                if self.deferred():  # NOTE [A framework imported, not used]: watch from after it
                    return
            if self.pending:
                self._look(frame)
                if not self.active:
                    return
            if self.opened is None:
                self._begin(frame)
            else:
                self.opened.close()  # anomaly mode records the forward only
            self.backward_in_open = True
            if self._opener is None:
                self._end(tensors)
        finally:
            del frame

    # -- the micro-batch ---------------------------------------------------------------
    def _begin(self, frame: types.FrameType | None) -> None:
        observer = self.observer
        if observer.thread is None:
            observer.start(frame)

        report(f"in watched call #{len(observer.calls)}")
        self._compilations = _compilations()
        self.opened = observer.begin()
        self._opener = None
        self.backward_in_open = False

    def _end(self, result: Any) -> None:
        opened, self.opened = self.opened, None
        assert opened is not None
        compiled = _compilations() != self._compilations
        if compiled or self.skipped < self.observer.options.skip:  # a warm-up micro-batch (--skip)
            self.skipped += 0 if compiled else 1
            if opened.anomaly is not None:
                self.observer.anomaly_next = True
            self.observer.warm_up(opened)
            return
        mode = Mode.TRAIN if self.backward_seen else opened.mode
        self.observer.end(opened, self._target, result, mode)
        self.observer.calls[-1].optimizer_step = self.optimizer_steps
        self.pending = True

        report(f"running the job after watched call #{len(self.observer.calls) - 1}")

    def _look(self, frame: types.FrameType) -> None:
        """NOTE [Alive when the next forward starts]"""
        self.pending = False
        if self.observer.checkpoint(frame, ()):
            if self.observer.options.stop:
                raise WatchStop()


def _compilations() -> int:
    """How many graphs ``torch.compile`` has compiled in this process (0 before it is imported).

    # NOTE [A micro-batch that compiles]
    # The micro-batch in which ``torch.compile`` traces and compiles (the first, and any that
    # recompiles) is a warm-up: the compiler keeps graphs of the example it traced in its caches for
    # as long as the process lives, a constant that no later micro-batch adds to. It is not watched
    # (as if ``--skip`` had named it); the next one is.
    """
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    try:
        return int(counters["stats"]["unique_graphs"]) if counters is not None else 0
    except Exception:  # pragma: no cover - a torch without the counter: nothing to skip
        return 0


def _weak(obj: object) -> Callable[[], Any]:
    """A weak reference to ``obj`` (a strong one for the rare module that takes none is never kept:
    it reads as gone)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: None


def loop_site(frame: types.FrameType | None) -> str:
    """Where the loop is: the innermost frame outside torch, leakscope and the standard library
    (``train.py:27 in main``), its file relative to the working directory when under it."""
    while frame is not None and is_library_frame(frame):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    file = frame.f_code.co_filename
    try:
        relative = os.path.relpath(file)
    except ValueError:
        relative = file
    shown = relative if not relative.startswith("..") else os.path.basename(file)
    name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return f"{shown}:{frame.f_lineno} in {name}"


__all__ = ["ENTRY_POINTS", "AutogradSteps", "Boundary", "loop_site"]
