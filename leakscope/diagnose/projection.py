"""Project what a leak costs at real scale from the tiny model, and say what that rests on.

# NOTE [The projection model]
# The tiny engine is run at several sizes (tokens T = batch x sequence, hidden
# H, vocab V and layers L varied around the tiny model's) through the same
# growth loop as ``--micro-batches 2``. After micro-batch 1 and 2 the retained
# bytes r1, r2 are split by cause class (leaf+grad, activations, ctx). For
# each cause:
#
#     growing part per micro-batch  g = r2 - r1
#     bounded part (one step held)   b = r1 - g       (NOTE [Leak kinds])
#
# and each of g and b is fitted by least squares as
#
#     c1*T*H + c2*T*V + c3*T*H*L + c4*T + c5*H + c6      (bytes, fp32 model)
#
# which covers what a step's graph keeps: a leaf and its grad (T*H), a side
# branch over the logits (T*V), per-layer saved activations (T*H*L).
# Coefficients below 0.01 bytes are dropped, the rest are printed as terms
# (``leaf+grad: 2 x tokens x hidden x 2 B``).
#
# Dtype is measured, not assumed: the tiny model is run once more with bf16
# parameters at the base size, and per cause the share of bytes that did not
# halve is what the engine keeps in fp32 (``log_softmax(logits.float())``).
# At the user's dtype, that share stays 4 B per element and the rest takes the
# dtype's width. If the bf16 run fails, every term is scaled by the dtype and
# the report says so.
#
# Every dimension the fitted terms depend on and the user did not give is
# listed as an assumption, with the value used.
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from leakscope.diagnose.growth import curve, growing_and_bounded
from leakscope.errors import UsageError
from leakscope.options import ModelSize
from leakscope.phase import report
from leakscope.results import Cause

if TYPE_CHECKING:
    from leakscope.harness.experiment import Experiment

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8": 1}
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}
#: the sizes the fit runs the tiny engine at: (seq, hidden, vocab, layers), batch from ModelSize
SAMPLES = (
    (8, 32, 64, 2),
    (16, 32, 64, 2),
    (8, 64, 64, 2),
    (16, 64, 64, 2),
    (8, 32, 128, 2),
    (16, 32, 128, 2),
    (8, 32, 64, 3),
    (16, 64, 64, 3),
)
#: the fitted terms: name, and how to evaluate it from (T, H, V, L)
#: the cause whose bytes are graph nodes, not tensors: their count grows with layers, never with
#: tokens, hidden size or dtype
NODES = Cause.NODES_ONLY.value
#: NOTE [Nodes at scale]: a graph node costs the same bytes at any width (NOTE [What a node costs]),
#: and a model has about the same nodes per layer at any size, so nodes are fitted per layer and
#: taken to the user's number of layers, never multiplied by tokens or hidden size.
NODE_TERMS: tuple[tuple[str, Any], ...] = (
    ("graph nodes x layers", lambda t, h, v, n: n),
    ("graph nodes", lambda t, h, v, n: 1),
)
TERMS: tuple[tuple[str, Any], ...] = (
    ("tokens x hidden", lambda t, h, v, n: t * h),
    ("tokens x vocab", lambda t, h, v, n: t * v),
    ("tokens x hidden x layers", lambda t, h, v, n: t * h * n),
    ("tokens", lambda t, h, v, n: t),
    ("hidden", lambda t, h, v, n: h),
    ("1", lambda t, h, v, n: 1),
)
#: which dimensions each term depends on
_DIMS = {"tokens": "tokens", "hidden": "hidden", "vocab": "vocab", "layers": "layers"}
KEYS = ("hidden", "tokens", "vocab", "layers", "batch", "dtype", "micro-batches", "gpu-memory")


@dataclasses.dataclass(frozen=True)
class Scale:
    """The user's configuration (``--at hidden=4096,tokens=17700,dtype=bf16,...``)."""

    hidden: int
    tokens: int
    dtype: str = "bf16"
    micro_batches: int = 1
    gpu_memory: int | None = None
    vocab: int | None = None
    layers: int | None = None
    batch: int | None = None
    #: the keys the user gave (the rest are assumptions the report lists)
    given: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Term:
    """One fitted term: ``coefficient x <monomial> x bytes_per_element``, for one cause and part."""

    cause: str
    #: "growing" (per micro-batch) or "bounded" (held once)
    part: str
    monomial: str
    #: elements per unit of the monomial
    elements: float
    #: bytes per element at the user's dtype (4 for what the engine keeps in fp32)
    element_bytes: float
    #: this term's bytes at the user's scale
    bytes: int

    def __str__(self) -> str:
        n = f"{self.elements:.3g}"
        width = f"{self.element_bytes:.3g}"
        return f"{self.cause}: {n} x {self.monomial} x {width} B"


@dataclasses.dataclass(frozen=True)
class Projection:
    """Projected retention at ``scale``: per micro-batch, per update, and where memory runs out."""

    scale: Scale
    #: the growing part: bytes every micro-batch adds
    bytes_per_micro_batch: int
    #: growing part x micro-batches, plus the bounded part
    bytes_per_update: int
    #: the micro-batch during which ``gpu_memory`` is exhausted, or None if the update fits
    oom_micro_batch: int | None
    #: fitted total coefficients (fp32 bytes) of the growing part, one per :data:`TERMS` entry
    coefficients: tuple[float, ...]
    #: the measurements: (tokens, hidden, bytes per micro-batch)
    samples: tuple[tuple[int, int, int], ...]
    #: the bounded part: one step's retained graph at scale, held at the peak
    bounded_bytes: int = 0
    #: the fitted terms with their cause
    terms: tuple[Term, ...] = ()
    #: every assumption made for a dimension not given, and the model's own
    assumptions: tuple[str, ...] = ()
    #: per cause: share of its bytes the engine keeps in fp32 whatever the model dtype (None: not measured)
    fp32_share: tuple[tuple[str, float], ...] = ()
    #: whether the bounded part alone fits in ``gpu_memory`` (None without gpu-memory)
    bounded_fits: bool | None = None


def parse_bytes(text: str) -> int:
    """``80GiB`` -> 85899345920."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot read {text!r} as a size; write e.g. 80GiB, 80GB or 85899345920")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_at(text: str) -> Scale:
    """Parse ``hidden=4096,tokens=17700,vocab=151936,layers=36,dtype=bf16,micro-batches=16,gpu-memory=80GiB``."""
    fields: dict[str, Any] = {}
    given: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("_", "-")
        if not sep or not value.strip():
            raise UsageError(f"--at: {part!r} is not key=value (e.g. hidden=4096)")
        value = value.strip()
        try:
            if key in ("hidden", "tokens", "micro-batches", "vocab", "layers", "batch"):
                fields[key.replace("-", "_")] = int(value.replace("_", ""))
            elif key == "dtype":
                if value.lower() not in DTYPE_BYTES:
                    raise UsageError(
                        f"--at dtype={value!r}: use one of {', '.join(sorted(DTYPE_BYTES))}"
                    )
                fields["dtype"] = value.lower()
            elif key == "gpu-memory":
                fields["gpu_memory"] = parse_bytes(value)
            else:
                raise UsageError(f"--at: unknown key {key!r}; use {', '.join(KEYS)}")
        except ValueError:
            raise UsageError(f"--at {key}={value!r}: expected a whole number") from None
        given.append(key)
    missing = [k for k in ("hidden", "tokens") if k not in fields]
    if missing:
        raise UsageError(f"--at needs {' and '.join(missing)} (e.g. hidden=4096,tokens=17700)")
    scale = Scale(**fields, given=tuple(given))
    if (
        min(
            scale.hidden,
            scale.tokens,
            scale.micro_batches,
            scale.vocab or 1,
            scale.layers or 1,
            scale.batch or 1,
        )
        <= 0
    ):
        raise UsageError(
            "--at: hidden, tokens, vocab, layers, batch and micro-batches must be positive"
        )
    return scale


def solve(rows: list[tuple[float, ...]], values: list[float]) -> tuple[float, ...]:
    """Least-squares coefficients of ``rows @ c = values`` (the normal equations, solved exactly in
    rationals: the systems are a handful of samples by a handful of terms). Terms no sample
    varies are left at 0; coefficients under 0.01 are rounded to 0."""
    n = len(rows[0]) if rows else 0
    a = [[Fraction(sum(r[i] * r[j] for r in rows)) for j in range(n)] for i in range(n)]
    b = [Fraction(sum(r[i] * v for r, v in zip(rows, values, strict=True))) for i in range(n)]
    # Gauss-Jordan with a tolerance-free pivot search; dependent columns get 0 (minimum-norm-like).
    pivots: list[int] = []
    row = 0
    for col in range(n):
        pivot = next((r for r in range(row, n) if a[r][col] != 0), None)
        if pivot is None:
            continue
        a[row], a[pivot] = a[pivot], a[row]
        b[row], b[pivot] = b[pivot], b[row]
        for r in range(n):
            if r != row and a[r][col] != 0:
                factor = a[r][col] / a[row][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[row], strict=True)]
                b[r] -= factor * b[row]
        pivots.append(col)
        row += 1
    out = [0.0] * n
    for r, col in enumerate(pivots):
        out[col] = float(b[r] / a[r][col])
    return tuple(0.0 if abs(c) < 0.01 else c for c in out)


def _features(t: int, h: int, v: int, layers: int) -> tuple[float, ...]:
    return tuple(float(f(t, h, v, layers)) for _, f in TERMS)


def evaluate(coefficients: tuple[float, ...], t: int, h: int, v: int, layers: int) -> float:
    """fp32 bytes of a fitted part at (T, H, V, L)."""
    return sum(c * x for c, x in zip(coefficients, _features(t, h, v, layers), strict=True))


def _measure(experiment: Experiment, size: ModelSize) -> tuple[dict[str, int], dict[str, int], int]:
    """(growing bytes per micro-batch, bounded bytes) per cause at one tiny size, and the bytes one
    graph node was counted at (NOTE [What a node costs])."""
    run = experiment.at_size(size, micro_batches=2).micro_batches()
    node_bytes = max((obs.node_bytes for obs in run.observations), default=0)
    growing, bounded = growing_and_bounded(curve(run.observations, run.storage_bytes))
    return growing, bounded, node_bytes


def _fp32_shares(experiment: Experiment, base: dict[str, int]) -> dict[str, float] | None:
    """Per cause, the share of bytes that stays fp32 when the model runs in bf16 (None: could not run)."""
    try:
        growing, bounded, _ = _measure(
            experiment, dataclasses.replace(experiment.options.size, dtype="bf16")
        )
    except Exception:
        return None
    shares = {}
    for cause, fp32 in base.items():
        if fp32 <= 0:
            continue
        half = growing.get(cause, 0) + bounded.get(cause, 0)
        # bf16 bytes = kept*fp32 + (1-kept)*fp32/2  ->  kept = 2*half/fp32 - 1
        shares[cause] = min(1.0, max(0.0, 2 * half / fp32 - 1))
    return shares


def project(experiment: Experiment, scale: Scale) -> Projection:
    """Fit the tiny engine's retention over sizes and evaluate it at ``scale`` (NOTE [The projection model])."""
    base = experiment.options.size
    rows: list[tuple[float, ...]] = []
    per_cause: dict[str, dict[str, list[float]]] = {"growing": {}, "bounded": {}}
    measured: list[tuple[dict[str, int], dict[str, int]]] = []
    samples: list[tuple[int, int, int]] = []
    per_node = 0
    for seq, hidden, vocab, layers in SAMPLES:
        report(f"projecting: size {len(samples) + 1} of {len(SAMPLES)}")
        size = dataclasses.replace(
            base, seq=seq, hidden=hidden, vocab=vocab, layers=layers, dtype="fp32"
        )
        grows, holds, node_bytes = _measure(experiment, size)
        per_node = max(per_node, node_bytes)
        measured.append((grows, holds))
        rows.append(_features(size.batch * seq, hidden, vocab, layers))
        samples.append((size.batch * seq, hidden, sum(grows.values())))
    causes = sorted({c for g, b in measured for c in (*g, *b)})
    for part, index in (("growing", 0), ("bounded", 1)):
        for cause in causes:
            per_cause[part][cause] = [float(m[index].get(cause, 0)) for m in measured]
    base_size = dataclasses.replace(
        base, seq=SAMPLES[0][0], hidden=SAMPLES[0][1], vocab=SAMPLES[0][2], layers=SAMPLES[0][3]
    )
    base_bytes = {c: measured[0][0].get(c, 0) + measured[0][1].get(c, 0) for c in causes}
    shares = _fp32_shares(experiment, base_bytes) if any(base_bytes.values()) else {}
    width = DTYPE_BYTES[scale.dtype]
    vocab = scale.vocab or base.vocab
    layers = scale.layers or base.layers
    t, h = scale.tokens, scale.hidden
    terms: list[Term] = []
    totals = {"growing": 0.0, "bounded": 0.0}
    growing_coefficients = [0.0] * len(TERMS)
    node_coefficients: dict[str, float] = {}
    node_rows = [
        tuple(float(fn(0, 0, 0, layers_at)) for _, fn in NODE_TERMS)
        for _, _, _, layers_at in SAMPLES
    ]
    for part in ("growing", "bounded"):
        for cause in causes:
            values = per_cause[part][cause]
            if not any(values):
                continue
            if cause == NODES:  # NOTE [Nodes at scale]
                for (name, fn), c in zip(NODE_TERMS, solve(node_rows, values), strict=True):
                    if c == 0.0:
                        continue
                    if part == "growing":
                        node_coefficients[name] = node_coefficients.get(name, 0.0) + c
                    nbytes = c * fn(t, h, vocab, layers)
                    totals[part] += nbytes
                    terms.append(
                        Term(
                            cause,
                            part,
                            name,
                            c / (per_node or 1),
                            per_node or 1,
                            max(0, int(round(nbytes))),
                        )
                    )
                continue
            coefficients = solve(rows, values)
            kept = (shares or {}).get(cause, 0.0)
            element_bytes = 4 * kept + width * (1 - kept)
            for (name, fn), c in zip(TERMS, coefficients, strict=True):
                if c == 0.0:
                    continue
                if part == "growing":
                    growing_coefficients[TERMS.index((name, fn))] += c
                elements = c / 4  # fitted on an fp32 model: 4 B per element
                nbytes = elements * element_bytes * fn(t, h, vocab, layers)
                totals[part] += nbytes
                terms.append(
                    Term(cause, part, name, elements, element_bytes, max(0, int(round(nbytes))))
                )
    per = max(0, int(round(totals["growing"])))
    bounded = max(0, int(round(totals["bounded"])))
    oom = None
    if scale.gpu_memory is not None and per > 0:
        m = max(1, (scale.gpu_memory - bounded) // per + 1) if scale.gpu_memory > bounded else 1
        oom = m if m <= scale.micro_batches else None
    return Projection(
        scale=scale,
        bytes_per_micro_batch=per,
        bytes_per_update=per * scale.micro_batches + bounded,
        oom_micro_batch=oom,
        coefficients=tuple(round(x, 6) for x in growing_coefficients),
        samples=tuple(samples),
        bounded_bytes=bounded,
        terms=tuple(terms),
        assumptions=assumptions(scale, terms, base_size, shares),
        fp32_share=tuple(sorted((shares or {}).items())),
        bounded_fits=None
        if scale.gpu_memory is None or not bounded
        else bounded < scale.gpu_memory,
    )


def assumptions(
    scale: Scale, terms: list[Term], base: ModelSize, shares: dict[str, float] | None
) -> tuple[str, ...]:
    """What the projection assumed for every dimension the user did not give, and the model's own."""
    used = {dim for term in terms for dim in _DIMS if dim in term.monomial.split(" x ")}
    out = []
    if "vocab" not in scale.given and "vocab" in used:
        out.append(f"vocab {base.vocab} (the tiny model's; pass vocab=...)")
    if "layers" not in scale.given and "layers" in used:
        out.append(f"layers {base.layers} (the tiny model's; pass layers=...)")
    if "dtype" not in scale.given:
        out.append(f"dtype {scale.dtype} (the default; pass dtype=...)")
    if "micro-batches" not in scale.given:
        out.append("micro-batches 1 per update (pass micro-batches=...)")
    if "gpu-memory" not in scale.given:
        out.append("no gpu-memory given: no out-of-memory point (pass gpu-memory=80GiB)")
    if shares is None:
        out.append(
            "every term scaled by dtype (the bf16 run failed, so what stays fp32 was not measured)"
        )
    if "batch" in scale.given:
        out.append(
            f"batch {scale.batch} is folded into tokens: retention is fitted per token, not per sequence"
        )
    out.append("tokens = all tokens of one micro-batch (batch x sequence length)")
    out.append("the engine runs the same code path at scale as on the tiny model")
    return tuple(out)


__all__ = [
    "ModelSize",
    "Projection",
    "Scale",
    "Term",
    "assumptions",
    "evaluate",
    "parse_at",
    "parse_bytes",
    "project",
]
