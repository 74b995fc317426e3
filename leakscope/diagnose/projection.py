"""Project what a leak costs at real scale from the tiny model.

# NOTE [The projection model]
# The tiny engine is run at several sizes (sequence length and hidden size
# varied; vocab, layers and batch fixed) and its retained bytes per micro-batch
# (the slope of a two-micro-batch growth run) are fitted as
#
#     bytes(T, H) = a*T*H + b*T + c*H + d        (T tokens, H hidden, fp32)
#
# then evaluated at the user's tokens and hidden size and scaled by the dtype's
# width relative to fp32. Terms that scale with vocab (e.g. a side branch
# keeping softmax probabilities) are measured at the tiny vocab and so enter
# through b*T at that vocab: pass vocab=... to scale them to a real vocab.
# Assumptions, in docs/estimate.md: retention is polynomial in T and H of this
# form, the engine runs the same code path at scale, and the leak is linear in
# micro-batches (which --micro-batches checks).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from leakscope.errors import UsageError
from leakscope.options import CheckOptions, ModelSize
from leakscope.phase import report

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8": 1}
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
SAMPLE_SEQS = (8, 16, 24)
SAMPLE_HIDDEN = (32, 64)


@dataclasses.dataclass(frozen=True)
class Scale:
    """The user's configuration (``--at hidden=4096,tokens=17700,dtype=bf16,...``)."""

    hidden: int
    tokens: int
    dtype: str = "bf16"
    micro_batches: int = 1
    gpu_memory: int | None = None
    vocab: int | None = None


@dataclasses.dataclass(frozen=True)
class Projection:
    """Projected retention at ``scale``: per micro-batch, per update, and where memory runs out."""

    scale: Scale
    bytes_per_micro_batch: int
    bytes_per_update: int
    #: the micro-batch during which ``gpu_memory`` is exhausted, or None if the update fits
    oom_micro_batch: int | None
    #: fitted coefficients a, b, c, d of a*T*H + b*T + c*H + d (fp32 bytes)
    coefficients: tuple[float, float, float, float]
    #: the measurements: (tokens, hidden, bytes per micro-batch)
    samples: tuple[tuple[int, int, int], ...]


def parse_bytes(text: str) -> int:
    """``80GiB`` -> 85899345920."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot read {text!r} as a size; write e.g. 80GiB, 80GB or 85899345920")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_at(text: str) -> Scale:
    """Parse ``hidden=4096,tokens=17700,dtype=bf16,micro-batches=16,gpu-memory=80GiB``."""
    fields: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("_", "-")
        if not sep or not value.strip():
            raise UsageError(f"--at: {part!r} is not key=value (e.g. hidden=4096)")
        value = value.strip()
        try:
            if key in ("hidden", "tokens", "micro-batches", "vocab"):
                fields[key.replace("-", "_")] = int(value.replace("_", ""))
            elif key == "dtype":
                if value.lower() not in DTYPE_BYTES:
                    raise UsageError(f"--at dtype={value!r}: use one of {', '.join(sorted(DTYPE_BYTES))}")
                fields["dtype"] = value.lower()
            elif key == "gpu-memory":
                fields["gpu_memory"] = parse_bytes(value)
            else:
                raise UsageError(
                    f"--at: unknown key {key!r}; use hidden, tokens, dtype, micro-batches, gpu-memory, vocab"
                )
        except ValueError:
            raise UsageError(f"--at {key}={value!r}: expected a whole number") from None
    missing = [k for k in ("hidden", "tokens") if k not in fields]
    if missing:
        raise UsageError(f"--at needs {' and '.join(missing)} (e.g. hidden=4096,tokens=17700)")
    scale = Scale(**fields)
    if scale.hidden <= 0 or scale.tokens <= 0 or scale.micro_batches <= 0:
        raise UsageError("--at: hidden, tokens and micro-batches must be positive")
    return scale


def _solve(samples: list[tuple[int, int, int]]) -> tuple[float, float, float, float]:
    import torch

    a = torch.tensor([[t * h, t, h, 1.0] for t, h, _ in samples], dtype=torch.float64)
    y = torch.tensor([[float(b)] for _, _, b in samples], dtype=torch.float64)
    sol = torch.linalg.lstsq(a, y).solution.flatten().tolist()
    return (sol[0], sol[1], sol[2], sol[3])


def evaluate(coefficients: tuple[float, float, float, float], scale: Scale, vocab_fit: int) -> int:
    """Bytes per micro-batch at ``scale`` from fitted fp32 coefficients."""
    a, b, c, d = coefficients
    if scale.vocab:
        b = b * scale.vocab / vocab_fit
    fp32 = a * scale.tokens * scale.hidden + b * scale.tokens + c * scale.hidden + d
    return max(0, int(round(fp32 * DTYPE_BYTES[scale.dtype] / 4)))


def project(spec: Any, mode: Any, options: CheckOptions, scale: Scale) -> Projection:
    """Fit the tiny engine's retention over sizes and evaluate it at ``scale``."""
    from leakscope.diagnose.growth import measure_growth

    base = options.size
    samples: list[tuple[int, int, int]] = []
    for hidden in SAMPLE_HIDDEN:
        for seq in SAMPLE_SEQS:
            report(f"projecting: size {len(samples) + 1} of {len(SAMPLE_HIDDEN) * len(SAMPLE_SEQS)}")
            size = dataclasses.replace(base, hidden=hidden, seq=seq)
            opts = dataclasses.replace(options, size=size, micro_batches=2)
            growth = measure_growth(spec, mode, opts).growth
            per_micro_batch = growth.retained_bytes[1] - growth.retained_bytes[0]
            samples.append((size.batch * seq, hidden, max(0, per_micro_batch)))
    coefficients = _solve(samples)
    per = evaluate(coefficients, scale, base.vocab)
    oom = None
    if scale.gpu_memory is not None and per > 0:
        oom = scale.gpu_memory // per + 1
        if oom > scale.micro_batches:
            oom = None
    return Projection(
        scale=scale,
        bytes_per_micro_batch=per,
        bytes_per_update=per * scale.micro_batches,
        oom_micro_batch=oom,
        coefficients=tuple(round(x, 6) for x in coefficients),  # type: ignore[arg-type]
        samples=tuple(samples),
    )


__all__ = ["ModelSize", "Projection", "Scale", "evaluate", "parse_at", "parse_bytes", "project"]
