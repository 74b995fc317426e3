"""No-flag ``leakscope watch`` on a plain ~50M-parameter training script, against the script alone.

``benchmarks/train_script.py`` (a 12-layer MLP at width 2048, SGD, ``loss.backward()`` in a
module-level loop) runs as ``python train_script.py`` and as ``leakscope watch --then continue
train_script.py``: the steps are found from autograd (NOTE [Steps from autograd]), with the
defaults (3 watched micro-batches, anomaly-mode traces on the first, a look at the start of each
next forward and the stop of the watch), and ``--then continue`` lets the job run to its end so
that both runs do the same work. The ratio is of the medians of the loop's own seconds (printed
by the script: interpreter start and imports are not the job's cost), runs alternating (ABBA).
Target: at most 1.15x (issue 24).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from benchmarks._common import Row, median

TARGET = 1.15
ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "benchmarks/train_script.py"


def _loop_seconds(watched: bool, steps: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    command = (
        [sys.executable, "-m", "leakscope", "watch", "--then", "continue", SCRIPT]
        if watched
        else [sys.executable, SCRIPT]
    )
    done = subprocess.run(
        [*command, "--steps", str(steps)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    found = re.search(r"loop seconds (\S+)", done.stdout + done.stderr)
    if found is None:
        raise RuntimeError(f"no loop time (rc {done.returncode}): {done.stderr[-500:]}")
    return float(found.group(1))


def run(short: bool) -> list[Row]:
    steps = 8 if short else 16
    reps = 1 if short else 2
    plain: list[float] = []
    watched: list[float] = []
    for _ in range(reps):  # ABBA
        plain.append(_loop_seconds(False, steps))
        watched.append(_loop_seconds(True, steps))
        watched.append(_loop_seconds(True, steps))
        plain.append(_loop_seconds(False, steps))
    ratio = median(watched) / median(plain)
    return [
        Row(
            "watch-script",
            f"plain 50M-parameter script, {steps} steps: loop alone / under no-flag watch",
            f"{median(plain):.2f} s / {median(watched):.2f} s",
        ),
        Row(
            "watch-script",
            "no-flag watch (steps from autograd) / the script alone",
            f"{ratio:.3f}x",
            f"<= {TARGET}x",
            ratio <= TARGET,
        ),
    ]
