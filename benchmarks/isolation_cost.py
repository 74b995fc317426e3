"""Isolation's cost: 20 targets isolated against ``--no-isolate``, and ``-j 2`` against ``-j 1``.

Each run is the real CLI (``leakscope check T1 ... T20 --format json``) in a
fresh process; runs of the three kinds alternate so machine load hits them
alike; ratios are of medians. The targets are the first 20 engines of the
fixture corpus (``fixtures/*.py`` with ``EXPECTED``), both modes, confirmed:
what a project with many engines runs in CI. The full run adds one run with
spawned children (``LEAKSCOPE_START_METHOD=spawn``), the cost before the zygote.

``-j 2`` can only split the per-target work: the CLI's start and the zygote's
import of torch and tensordict (about 4 s of one core on the development
machine, most of it ``torch._dynamo`` imported by tensordict) come first
whatever ``-j`` is. A one-target run measures that fixed part, and the bound
``(fixed + rest / 2) / total`` is what ``-j 2`` could reach at best.
"""

from __future__ import annotations

import os

from benchmarks._common import Row, Run, child_env, leakscope_cmd, median, run_timed

TARGET_ISOLATION = 1.5
TARGET_JOBS = 0.7
#: how far above Amdahl's bound -j 2 may read (scheduling, two children's page faults)
BOUND_SLACK = 0.05
COUNT = 20


def targets() -> list[str]:
    """The first :data:`COUNT` engines of the fixture corpus, as ``fixtures.name:Attr``."""
    import fixtures  # the repository root is on sys.path (benchmarks/run.py)

    return [fixtures.target(name) for name in fixtures.corpus()[:COUNT]]


def _check(names: list[str], *flags: str, **env: str) -> Run:
    done = run_timed(
        [*leakscope_cmd(), "check", *names, "--format", "json", *flags], env=child_env(**env)
    )
    assert done.returncode in (0, 1), (flags, done.stderr[-2000:])
    return done


def run(short: bool) -> list[Row]:
    names = targets()
    assert len(names) == COUNT, names
    reps = 1 if short else 3
    kinds = {"isolated": (), "no-isolate": ("--no-isolate",), "-j 2": ("-j", "2")}
    runs: dict[str, list[Run]] = {kind: [] for kind in kinds}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    order = list(kinds)
    for i in range(reps):
        for kind in order[i % 3 :] + order[: i % 3]:
            runs[kind].append(_check(names, *kinds[kind]))
    # The fixed cost no -j can split: the CLI's start, the zygote's torch and tensordict import
    # (single-threaded), and one target. Amdahl's bound for -j 2 follows from it.
    single = median([_check(names[:1]).seconds for _ in range(reps)])
    wall = {kind: median([r.seconds for r in done]) for kind, done in runs.items()}
    cpu = {kind: median([r.cpu_seconds for r in done]) for kind, done in runs.items()}
    isolation = wall["isolated"] / wall["no-isolate"]
    jobs = wall["-j 2"] / wall["isolated"]
    bound = (single + max(0.0, wall["isolated"] - single) / 2) / wall["isolated"]
    label = f"{COUNT} fixture engines, both modes (median of {reps}; load average {load:.1f} at the start)"
    rows = [
        Row(
            "isolation",
            f"{label}: isolated / --no-isolate / -j 2 wall",
            f"{wall['isolated']:.2f} s / {wall['no-isolate']:.2f} s / {wall['-j 2']:.2f} s",
        ),
        Row(
            "isolation",
            "same runs, CPU (user+sys, children included)",
            f"{cpu['isolated']:.2f} s / {cpu['no-isolate']:.2f} s / {cpu['-j 2']:.2f} s",
        ),
        Row(
            "isolation",
            "isolated / --no-isolate",
            f"{isolation:.2f}x",
            f"<= {TARGET_ISOLATION}x",
            isolation <= TARGET_ISOLATION,
        ),
        Row(
            "isolation",
            f"-j 2 / -j 1 on {os.cpu_count()} CPUs",
            f"{jobs:.2f}x",
            f"<= {TARGET_JOBS}x",
            jobs <= TARGET_JOBS,
        ),
        Row(
            "isolation",
            "one target isolated (start-up + imports + 1 check): the part -j cannot split",
            f"{single:.2f} s of {wall['isolated']:.2f} s",
        ),
        Row(
            "isolation",
            "-j 2 / -j 1 against its Amdahl bound (one target serial, the other 19 halved)",
            f"{jobs:.2f}x vs {bound:.2f}x",
            f"<= bound + {BOUND_SLACK}",
            jobs <= bound + BOUND_SLACK,
        ),
    ]
    if (
        not short
    ):  # the spawn fallback: a new interpreter and a torch import per target, as before the zygote
        spawned = _check(names, LEAKSCOPE_START_METHOD="spawn")
        rows.append(
            Row(
                "isolation",
                "spawned children (LEAKSCOPE_START_METHOD=spawn, one run) / --no-isolate",
                f"{spawned.seconds:.2f} s = {spawned.seconds / wall['no-isolate']:.2f}x"
                f" (CPU {spawned.cpu_seconds:.2f} s)",
            )
        )
    return rows
