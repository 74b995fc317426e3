"""Check Lightning targets in-process, then list what the check left behind.

Run with the interpreter of the Lightning venv: ``python lightning_leftovers.py TARGET [--factory F]...``.
Each argument is one target (``pkg.mod:Cls`` or ``pkg.mod:Cls=pkg.mod:factory``).
Prints one JSON line: the verdicts, and every trainer, LightningModule,
callback, greenlet, thread, adapter entry, logger level, warnings filter and
torch mode that is not as it was before the check.
"""

from __future__ import annotations

import gc
import json
import logging
import random
import sys
import threading
import warnings
from typing import Any

import greenlet
import torch

import leakscope
from leakscope.adapters.lightning import ADAPTER
from leakscope.adapters.lightning_loop import _LOGGERS
from leakscope.options import CheckOptions


def _alive(kind: str) -> int:
    """Objects whose class (or a base of it) is Lightning's ``kind``, from either package."""
    gc.collect()
    count = 0
    for obj in gc.get_objects():
        try:
            mro = type(obj).__mro__
        except Exception:
            continue
        if any(
            k.__name__ == kind and k.__module__.startswith(("pytorch_lightning", "lightning"))
            for k in mro
        ):
            count += 1
    return count


def _greenlets() -> int:
    gc.collect()
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, greenlet.greenlet) and o is not greenlet.getcurrent()
    )


def main() -> None:
    # Importing Lightning sets its loggers' levels and adds warning filters: import
    # first, so that only what the check itself leaves is compared.
    for package in ("pytorch_lightning", "lightning.pytorch"):
        try:
            __import__(package)
        except ImportError:
            pass
    before = {
        "threads": threading.active_count(),
        "greenlets": _greenlets(),
        "levels": {name: logging.getLogger(name).level for name in _LOGGERS},
        "filters": list(warnings.filters),
    }
    rng = torch.random.get_rng_state()
    py_rng = random.getstate()
    verdicts = []
    for arg in sys.argv[1:]:
        target, _, factory = arg.partition("=")
        report = leakscope.check([target], CheckOptions(isolate=False, factory=factory or None))
        verdicts += [
            [r.target, r.mode.value, r.verdict.value, [str(f.path) for f in r.findings]]
            for r in report.results
        ]
    left = {
        "trainers": _alive("Trainer"),
        "modules": _alive("LightningModule"),
        "callbacks": _alive("Callback"),
        "greenlets": _greenlets() - before["greenlets"],
        "threads": threading.active_count() - before["threads"],
        "adapter_runs": len(ADAPTER._runs),
        "grad_enabled": torch.is_grad_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "logger_levels_changed": {n: logging.getLogger(n).level for n in _LOGGERS}
        != before["levels"],
        "warning_filters_changed": list(warnings.filters) != before["filters"],
        "torch_rng_changed": not torch.equal(torch.random.get_rng_state(), rng),
        "python_rng_changed": random.getstate() != py_rng,
    }
    out: dict[str, Any] = {"verdicts": verdicts, "left": left}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
