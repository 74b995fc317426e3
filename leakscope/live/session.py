"""One watch: patch the step methods, observe the watched calls, restore, report.

``leakscope.watch(...)`` (the library API) and ``leakscope watch`` (the CLI,
through :mod:`leakscope.live.launcher`) both drive a :class:`Watch`. Importing
this module imports no torch.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import platform
import sys
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakscope import __version__, phase
from leakscope.errors import TargetError, UsageError
from leakscope.live.autograd_steps import AutogradSteps, Boundary
from leakscope.live.methods import DEFAULT_METHODS, MethodSpec, parse_method, uncovered_step
from leakscope.live.observer import Observer, ObserverOptions, WatchStop
from leakscope.live.patcher import Patcher
from leakscope.probe.stack import deep_stack_here
from leakscope.results import Mode, Report, TargetResult, Verdict, WatchSummary
from leakscope.snippets import read_snippets

if TYPE_CHECKING:
    from leakscope.live.autograd_steps import AutogradSteps


#: what ``threading.excepthook`` holds
_ExceptHook = Callable[[threading.ExceptHookArgs], object]


@dataclasses.dataclass(frozen=True)
class WatchOptions:
    """How to watch a job. Every field has the CLI's default."""

    #: ``pkg.mod:Class.method`` specs; empty: the built-in adapters' step methods
    methods: tuple[str, ...] = ()
    #: watched calls (after ``skip``)
    micro_batches: int = 3
    #: calls let through unwatched first (warm-up)
    skip: int = 0
    #: "stop" ends the job after the report; "continue" detaches and lets it run
    then: str = "stop"
    #: record where retaining tensors were created (anomaly-mode stack traces on the watched calls)
    source: bool = True
    max_objects: int = 2_000_000

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WatchOptions:
        data = json.loads(text)
        data["methods"] = tuple(data.get("methods", ()))
        return cls(**data)

    def specs(self) -> list[MethodSpec]:
        if self.then not in ("stop", "continue"):
            raise UsageError(f"--then {self.then!r} is not stop or continue")
        if self.micro_batches < 1 or self.skip < 0:
            raise UsageError("--micro-batches must be >= 1 and --skip >= 0")
        return [parse_method(m) for m in (self.methods or DEFAULT_METHODS)]


class Watch:
    """Patches the step methods on :meth:`start`; :attr:`report` once it has looked for the last time.

    Use it as a context manager (``with leakscope.watch(...) as w: train()``):
    on exit it looks once more if it has not yet, puts every method back,
    drops every reference to the job's objects and sets :attr:`report`. With
    ``then="stop"`` the call after the last watched one raises
    :class:`~leakscope.live.observer.WatchStop`, which ends ``train()``; the
    context manager swallows it.
    """

    def __init__(self, options: WatchOptions, *, stop_in_this_process: bool = True) -> None:
        self.options = options
        specs = options.specs()
        self.observer = Observer(
            ObserverOptions(
                micro_batches=options.micro_batches,
                skip=options.skip,
                stop=options.then == "stop" and stop_in_this_process,
                source=options.source,
                max_objects=options.max_objects,
            )
        )
        self.observer.on_done = self._detach
        self.patcher = Patcher(specs, self._wrap)
        if options.methods and options.then == "stop" and stop_in_this_process:
            self.patcher.on_error = self._stop_on_missing
        #: held by the thread in the observer (NOTE [Threads calling the step])
        self._busy = threading.RLock()
        #: with no --method, the steps found from autograd (NOTE [Steps from autograd])
        self.autograd: AutogradSteps | None = (
            None
            if options.methods
            else AutogradSteps(self.observer, self._busy, lambda: bool(self.patcher.history))
        )
        self.report: Report | None = None
        #: the job's own failure, one line, when it raised or exited non-zero
        self.job_error: str | None = None
        self.job_traceback: str | None = None
        #: called with the report as soon as it is made (a child process writes it out)
        self.on_report: Callable[[Report], None] | None = None
        self._explicit = bool(options.methods)
        #: the target name of the job's own error result (the script or module)
        self.job_name = "the job"
        self._excepthook: tuple[_ExceptHook, _ExceptHook] | None = None

    # NOTE [Threads calling the step]
    # A job may call the step from many threads at once. The watched calls are
    # all made by one thread, the one that made the first (``Observer.thread``);
    # the others' calls pass through. Before the first watched call, threads
    # that call at once would each take theirs for the first, so one thread at a
    # time may enter the observer: a call made while another thread is in it
    # passes through too. So exactly one call, in the watching thread, raises
    # WatchStop (the call after its last watched one); in a thread other than the
    # main one it ends that thread quietly (Python's ``threading.excepthook``
    # would print its traceback), and the thread that joins it goes on.
    def _wrap(self, spec: MethodSpec, original: Callable[..., object]) -> Callable[..., Any]:
        observer = self.observer
        busy = self._busy

        @functools.wraps(original)
        def leakscope_watched(*args: object, **kwargs: object) -> object:
            # NOTE [Threads calling the step]
            watching = observer.thread
            if (
                observer.done
                or (watching is not None and watching != threading.get_ident())
                or not busy.acquire(blocking=False)
            ):
                return original(*args, **kwargs)
            try:
                if self.autograd is not None:
                    self.autograd.yield_to_method()
                before = len(observer.calls)
                try:
                    return observer.call(spec, original, args, kwargs)
                finally:
                    if len(observer.calls) > before:
                        phase.report(f"running the job after watched call #{before}")
            finally:
                busy.release()

        return leakscope_watched

    def _stop_on_missing(self, problem: str) -> None:
        """A named --method's module was imported without it: end the job now, at the import, rather
        than after it ran (NOTE [A typo in --method fails before the job]); the report says why."""
        if not self.observer.calls:
            raise WatchStop(problem)

    def start(self) -> Watch:
        deep_stack_here()  # NOTE [Freeing a walked chain]
        self.patcher.install()
        if self.autograd is not None:
            self.autograd.install()
        if self.observer.options.stop:
            self._quiet_threads()
        return self

    def _quiet_threads(self) -> None:
        """A :class:`WatchStop` that ends a thread other than the main one ends it quietly (NOTE [Threads
        calling the step]); undone by :meth:`stop`."""
        previous = threading.excepthook

        def leakscope_excepthook(args: threading.ExceptHookArgs) -> None:
            if not (isinstance(args.exc_type, type) and issubclass(args.exc_type, WatchStop)):
                previous(args)

        threading.excepthook = leakscope_excepthook
        self._excepthook = (previous, leakscope_excepthook)

    def _loud_threads(self) -> None:
        if self._excepthook is not None:
            previous, ours = self._excepthook
            self._excepthook = None
            if threading.excepthook is ours:
                threading.excepthook = previous

    def __enter__(self) -> Watch:
        return self.start()

    def __exit__(
        self,
        tp: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool:
        self.stop()
        return tp is not None and issubclass(tp, WatchStop)

    def stop(
        self,
        extra_modules: Sequence[types.ModuleType] = (),
        frames: Sequence[types.FrameType] = (),
        *,
        look: bool = True,
    ) -> Report:
        """Look once more (when the job ended before the call after the last watched one), restore, report.

        ``frames``: the frames of the job's traceback when it raised, walked as the caller's.
        ``look=False``: report the looks made so far (a look that was itself interrupted is not retried).
        """
        observer = self.observer
        self._loud_threads()
        if self.autograd is not None:
            self.autograd.close()
        if look and not observer.done and observer.calls:
            observer.look(None, final=True, extra_modules=extra_modules, extra_frames=frames)
        observer.finish()  # calls _detach once
        self._detach()
        assert self.report is not None
        return self.report

    def partial_report(self) -> Report:
        """The report of the looks made so far, while the job still runs (nothing is restored or dropped)."""
        return self._with_snippets(self._make_report())

    def _detach(self) -> None:
        """Put the methods back, make the report, drop the job's objects."""
        self.patcher.restore()
        if self.autograd is not None:
            self.autograd.remove()
        if self.report is None or self.job_error is not None:
            self.report = self._with_snippets(self._make_report())
            self.observer.clear()
            if self.on_report is not None:
                self.on_report(self.report)

    def _with_snippets(self, report: Report) -> Report:
        """The source lines of the findings, from the project, the script's and the methods' directories only
        (NOTE [Snippets read only the checked project])."""
        from leakscope.harness.target import target_directory

        named = [
            f"{self.job_name}:main",
            *map(str, self.patcher.specs),
        ]  # the script (or -m module), the methods
        return read_snippets(report, [Path.cwd(), *filter(None, map(target_directory, named))])

    def _boundary(self) -> str:
        """What ended each watched micro-batch: ``method``, ``backward`` or ``module call``
        (NOTE [Steps from autograd])."""
        if self.autograd is None or self.autograd.boundary is None:
            return "method"
        return self.autograd.boundary.value

    def _methods(self) -> list[str]:
        """The step methods the report names: those patched, else those asked for (none when the steps
        came from autograd, even where a framework's method was patched and never called)."""
        stepped = self.autograd.boundary if self.autograd is not None else None
        if stepped is not None and stepped is not Boundary.METHOD:
            return []
        if self.patcher.found() or self._explicit:
            return self.patcher.found() or [str(s) for s in self.patcher.specs]
        return []

    def _make_report(self) -> Report:
        results = self.observer.results()
        name = (
            ", ".join(str(s) for s in self.patcher.specs)
            if self._explicit
            else "the built-in step methods"
        )
        if not self.observer.calls:
            if self.patcher.errors:
                message = "; ".join(self.patcher.errors) + "; check --method"
            elif self.job_error is not None:
                # The job's own result says why it stopped; guessing at --method would mislead.
                verb = "called" if self.patcher.history else "imported"
                message = (
                    f"the job stopped before it {verb} {', '.join(self.patcher.found()) or name}"
                )
            elif not self._explicit and not self.patcher.history:
                message = uncovered_step() or (
                    "the job never ran a step: it called no backward(), torch.autograd.grad or nn.Module, and none "
                    "of the built-in step methods; if its step is elsewhere, name it with --method "
                    "pkg.module:Class.method"
                )
            elif not self.patcher.history:
                message = f"the job never imported {name}; name the step to watch with --method pkg.module:Class.method"
            else:
                message = f"the job never called {', '.join(self.patcher.found())}; is it the step the loop calls?"
            results = [
                TargetResult(target=name, mode=Mode.TRAIN, verdict=Verdict.ERROR, error=message)
            ]
        elif len(self.observer.calls) < self.options.micro_batches:
            note = (
                f"the job made {len(self.observer.calls)} watched calls of the {self.options.micro_batches} asked "
                f"(after --skip {self.options.skip}); the verdict covers those"
            )
            results = [dataclasses.replace(r, warnings=(*r.warnings, note)) for r in results]
        if self.job_error is not None:
            results.append(
                TargetResult(
                    target=self.job_name,
                    mode=Mode.TRAIN,
                    verdict=Verdict.ERROR,
                    error=self.job_error,
                    traceback=self.job_traceback,
                )
            )
        return Report(
            results=tuple(results),
            leakscope_version=__version__,
            torch_version=_torch_version(),
            python_version=platform.python_version(),
            watch=WatchSummary(
                methods=tuple(self._methods()),
                boundary=self._boundary(),
                loop=self.autograd.loop
                if self.autograd is not None and self._boundary() != "method"
                else "",
                calls=tuple(self.observer.call_summaries()),
                skip=self.options.skip,
                micro_batches=self.options.micro_batches,
            ),
        )


def _torch_version() -> str:
    torch = sys.modules.get("torch")
    return str(getattr(torch, "__version__", "")) if torch is not None else ""


def watch(
    methods: str | Sequence[str] = (),
    *,
    micro_batches: int = 3,
    skip: int = 0,
    then: str = "stop",
    source: bool = True,
) -> Watch:
    """Watch a job's step method in this process: ``with leakscope.watch("pkg.mod:Class.method") as w: train()``.

    After the block, ``w.report`` is a :class:`~leakscope.results.Report` with
    one result per watched method and grad mode. Bad arguments raise
    :class:`~leakscope.errors.UsageError`; a method that was never imported or
    never called is an ``error`` result.
    """
    if isinstance(methods, str):
        methods = (methods,)
    try:
        return Watch(WatchOptions(tuple(methods), micro_batches, skip, then, source))
    except UsageError:
        raise
    except Exception as exc:  # pragma: no cover - defensive: one line
        raise TargetError(f"cannot watch {methods}: {exc}") from None


__all__ = ["Watch", "WatchOptions", "watch"]
