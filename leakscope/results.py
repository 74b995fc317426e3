"""Plain result objects: descriptions of what a check found, never tensors.

Everything here is a frozen dataclass of strings, numbers and tuples, so a
report can be kept, compared, pickled across processes and rendered without
keeping any of the engine's objects alive.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from leakscope.holders import HolderPath


class Verdict(str, enum.Enum):
    """The outcome of one target in one mode."""

    CLEAN = "clean"
    LEAK = "leak"
    ERROR = "error"


class Mode(str, enum.Enum):
    """How the engine's step is driven (see docs/protocol.md)."""

    TRAIN = "train"
    FORWARD_ONLY = "forward-only"


class Holder(str, enum.Enum):
    """What kind of reference holds the graph (the ``holder`` column)."""

    RETURNED = "returned"
    ENGINE = "engine attribute"
    MICRO_BATCH = "micro-batch"
    MODEL = "model attribute"
    MODEL_HOOK = "model hook"
    GLOBAL = "module global"
    #: retention proven, but no reference reachable from what the caller keeps holds it
    NOT_FOUND = "not found"
    #: a graph that only the cyclic garbage collector frees
    CYCLE = "cycle"
    #: graph-free storage growing every micro-batch
    STORAGE_GROWTH = "storage growth"
    #: ``leakscope watch``: a local of the loop that called the step
    CALLER = "caller's frame"
    #: ``leakscope watch``: one of the step's arguments
    ARGUMENT = "argument"

    def __str__(self) -> str:
        return self.value


class Cause(str, enum.Enum):
    """What the retained bytes are (docs/findings.md)."""

    ACTIVATIONS = "activations"
    LEAF_GRAD = "leaf+grad"
    CTX = "ctx"
    NODES_ONLY = "nodes-only"
    UNTIL_GC = "until-gc"
    STORAGE_GROWTH = "storage-growth"

    def __str__(self) -> str:
        return self.value


class Severity(str, enum.Enum):
    """What a finding does to the gate (``--fail-on``)."""

    #: fails the gate
    LEAK = "leak"
    #: fails it only under ``--fail-on warning`` (``until-gc``, storage growth)
    WARNING = "warning"
    #: kept on purpose: an allowlist entry covers it (``[tool.leakscope] allowlist``)
    ALLOWED = "allowed"

    def __str__(self) -> str:
        return self.value


class LeakKind(str, enum.Enum):
    """Whether a held graph grows with every step or stays one step's (NOTE [Leak kinds])."""

    GROWING = "growing"
    BOUNDED = "bounded"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Source:
    """A place in the user's code."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclasses.dataclass(frozen=True)
class Edit:
    """A one-line change to the user's code that stops a holder keeping the graph (``leakscope fix``).

    ``before`` and ``after`` are the line's text without its indentation, which starts at
    ``column`` (1-based); ``after`` may be several lines, each after the first indented as the first
    plus its own leading spaces (a statement wrapped in ``with torch.no_grad():``). Derived from the stored-at line (NOTE [The names a fix detaches]);
    offered only where the plan cannot change a gradient (NOTE [Fixes that never break training]).
    """

    file: str
    line: int
    column: int
    before: str
    after: str
    #: ``leakscope fix`` / ``check --fix`` proved it: re-run with the edit, the holder was gone and
    #: every parameter gradient of one train step unchanged (NOTE [A fix is proven, not worded])
    verified: bool = False
    #: what the proof found, in words (why it is verified, or why it could not be); None: not tried
    proof: str | None = None


@dataclasses.dataclass(frozen=True)
class Snippet:
    """Lines of a user file around one :class:`Source`, read when the check ran (``leakscope.snippets``).

    Reports carry their snippets, so rendering one (``leakscope render``) reads no file.
    """

    #: ``Source.file`` of the line it shows
    file: str
    #: the line it is about (``Source.line``)
    line: int
    #: the number of ``lines[0]``
    first_line: int
    lines: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One reference that keeps (part of) this step's autograd graph alive.

    ``path`` names the reference from one of the roots a real caller keeps
    (``output``, ``engine``, ``micro_batch``, ``module``, ``global:``), or is
    ``<unknown holder>`` when retention is proven but no holder was found. It
    is typed (:class:`~leakscope.holders.HolderPath`); ``str(path)`` is the
    documented form. Build findings with :mod:`leakscope.diagnose.findings`.
    """

    path: HolderPath
    holder: Holder
    grad_fn: str
    graph_nodes: int
    retained_bytes: int
    confirmed: bool
    hint: str
    #: the dominant cause class (see docs/findings.md)
    cause: Cause = Cause.ACTIVATIONS
    #: bytes per cause class, storage-deduplicated
    bytes_by_cause: Mapping[str, int] = dataclasses.field(default_factory=dict)
    source: Source | None = None
    #: a leak fails the gate, a warning does not (see ``--fail-on``)
    severity: Severity = Severity.LEAK
    allowed_reason: str | None = None
    #: the graph it keeps, bounded (``probe.view.FINDING_GRAPH_NODES``); None for a held leaf or unknown holder
    graph: GraphView | None = None
    #: growing or bounded (NOTE [Leak kinds] in leakscope/diagnose/kinds.py); None without a growth run
    kind: LeakKind | None = None
    #: the user line that put the retaining tensor into its holder (``self.x = ...``, ``.append``, ...)
    stored_at: Source | None = None
    #: how it was stored there: "append", "attribute", "item", "buffer", "metric", "return", "hook", ...
    store_op: str | None = None
    #: when ``source`` is a shared helper or a ``super()`` call: the engine-side calls that led to it, innermost first
    called_from: tuple[Source, ...] = ()
    #: what one graph node was counted at in ``retained_bytes`` (``"746 B per graph node (measured)"``;
    #: NOTE [What a node costs]); None when no node was counted
    node_cost: str | None = None
    #: the one-line change that fixes it, when one can be derived and cannot change a gradient
    edit: Edit | None = None

    def __post_init__(self) -> None:
        # The domain values are enums end to end; a caller's plain string (``severity="warning"``)
        # becomes its member here, and an unknown one is a ValueError naming it.
        object.__setattr__(self, "severity", Severity(self.severity))
        object.__setattr__(self, "cause", Cause(self.cause))
        if self.kind is not None:
            object.__setattr__(self, "kind", LeakKind(self.kind))

    #: the lines around ``source`` and ``stored_at``, captured when the check ran (``leakscope.snippets``)
    snippets: tuple[Snippet, ...] = ()


@dataclasses.dataclass(frozen=True)
class Growth:
    """What a ``--micro-batches N`` run retained after each micro-batch.

    Measured the way a ``forward_backward_batch`` loop holds things: every
    output kept in a list, the latest loss alive until the next step returns.
    A leak is growth (``slope_bytes > 0`` or growing ``graph_nodes``), not one
    live graph.
    """

    #: bytes of this run's graphs alive after micro-batch 0, 1, ...
    retained_bytes: tuple[int, ...]
    #: least-squares slope of ``retained_bytes`` per micro-batch
    slope_bytes: float
    #: graph nodes alive after each micro-batch
    graph_nodes: tuple[int, ...] = ()
    #: after the last micro-batch: alive graph nodes created by micro-batch 0, 1, ...
    nodes_by_micro_batch: tuple[int, ...] = ()
    #: bytes of graph-free tensors the engine, model and globals hold after each micro-batch
    storage_bytes: tuple[int, ...] = ()
    storage_slope_bytes: float = 0.0
    #: ``torch.cuda.memory_allocated()`` after each micro-batch (``--device cuda``)
    cuda_allocated: tuple[int, ...] | None = None
    #: ``retained_bytes`` split by cause class, after each micro-batch
    retained_by_cause: tuple[Mapping[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class TargetResult:
    """The verdict for one target in one mode."""

    target: str
    mode: Mode
    verdict: Verdict
    error: str | None = None
    findings: tuple[Finding, ...] = ()
    retained_bytes: int = 0
    growth: Growth | None = None
    warnings: tuple[str, ...] = ()
    #: the traceback behind ``error``; rendered only with ``--debug``
    traceback: str | None = None
    seconds: float = 0.0
    rank: int | None = None
    #: ``--at``: what this leak costs at the user's scale (a ``leakscope.diagnose.projection.Projection``)
    projection: Any = None
    #: the micro-batch keys the engine read (leakscope's own micro-batch format only)
    keys_read: tuple[str, ...] = ()
    #: growing or bounded for a leak (growing wins when findings differ); None when unknown
    kind: LeakKind | None = None
    #: adapter settings the step ran with (e.g. verl's ``calculate_entropy``), as ``name=value`` strings
    settings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))
        object.__setattr__(self, "verdict", Verdict(self.verdict))
        if self.kind is not None:
            object.__setattr__(self, "kind", LeakKind(self.kind))


@dataclasses.dataclass(frozen=True)
class WatchSummary:
    """What ``leakscope watch`` watched: the step methods, each watched call, the processes."""

    methods: tuple[str, ...] = ()
    #: one entry per watched call (its method, mode, process, sequence range, bytes)
    calls: tuple[Mapping[str, Any], ...] = ()
    #: the processes whose reports were merged (``rank 1``, ``pid 4242``, a Ray actor)
    processes: tuple[str, ...] = ()
    skip: int = 0
    micro_batches: int = 0
    #: what ended each watched micro-batch: ``method`` (a step method), ``backward`` or ``module call``
    #: (found from autograd with no ``--method``: NOTE [Steps from autograd])
    boundary: str = "method"
    #: where the loop is, for steps found from autograd (``train.py:27 in main``)
    loop: str = ""


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything one ``check`` produced, plus the environment it ran in."""

    results: tuple[TargetResult, ...]
    leakscope_version: str
    torch_version: str
    python_version: str
    #: ``leakscope watch`` only: what was watched
    watch: WatchSummary | None = None


# The retained graph below one held reference, as `leakscope explain` describes it.


@dataclasses.dataclass(frozen=True)
class Slot:
    """A tensor a node keeps: saved for backward, a ctx attribute, or a leaf and its grad."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


@dataclasses.dataclass(frozen=True)
class ViewNode:
    """One graph node."""

    id: int
    name: str
    slots: tuple[Slot, ...]
    children: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class GraphView:
    """The retained graph below one held reference (possibly truncated to ``max_nodes``)."""

    target: str
    mode: str
    path: str
    root: int | None
    nodes: tuple[ViewNode, ...]
    #: every node below the reference, the drawing's (leaves' AccumulateGrad nodes included)
    total_nodes: int
    truncated: bool
    paths: tuple[str, ...] = ()
    #: the graph nodes counted (NOTE [One node count]): a finding's ``graph_nodes``
    graph_nodes: int = 0


# What `leakscope fix` did about each leaking finding (NOTE [A fix is proven, not worded]).


class FixStatus(str, enum.Enum):
    """What ``leakscope fix`` could say of a finding's fix."""

    #: re-run with the edit: the holder is gone and every gradient unchanged
    VERIFIED = "verified"
    #: a one-line edit exists but could not be verified (the reason says why)
    UNVERIFIED = "unverified"
    #: no one-line edit: the hint says what to change
    NONE = "none"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class FixResult:
    """One finding of the check and what ``leakscope fix`` did about it."""

    target: str
    mode: str
    path: str
    status: FixStatus
    #: why it is verified, or why not; for ``none``, "no one-line edit"
    reason: str
    #: the check's fix sentence for the finding
    hint: str
    edit: Edit | None = None
    #: the unified diff of the edit against the file as it was read (empty without an edit)
    diff: str = ""
    #: written to the file (``--apply``)
    applied: bool = False


@dataclasses.dataclass(frozen=True)
class FixReport:
    """Everything ``leakscope fix`` produced: the check's report (its edits marked verified or not)
    and one :class:`FixResult` per leaking finding."""

    report: Report
    fixes: tuple[FixResult, ...]
    #: the gradient tolerance the proofs used, in words
    tolerance: str = ""
    #: ``--apply`` was given
    apply: bool = False
    #: every verified edit as one unified patch (``git apply`` takes it), file by file
    patch: str = ""
    #: what each proof compared, in words
    compared: str = "gradients compared after one train step, same seed and micro-batch"
    #: whether any proof compared a tensor (False: ``compared`` says why none was, and no tolerance applies)
    gradients_compared: bool = True
