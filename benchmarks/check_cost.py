"""One check: ``leakscope check leakscope.models.engines:FSDPEngine`` against running the engine bare.

Both are real processes started the same way, interleaved (bare, check,
check, bare, ...) so machine load hits both alike; the ratio is of medians.
"""

from __future__ import annotations

from benchmarks._common import ROOT, Row, Run, child_env, leakscope_cmd, median, python, run_timed

TARGET_RATIO = 1.3
TARGET = "leakscope.models.engines:FSDPEngine"


def _bare(plain: bool = False) -> Run:
    cmd = [python(), str(ROOT / "benchmarks" / "bare_step.py")] + (["--plain"] if plain else [])
    done = run_timed(cmd, env=child_env())
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _check() -> Run:
    done = run_timed([*leakscope_cmd(), "check", TARGET], env=child_env())
    assert done.returncode == 0 and "0 leak, 2 clean, 0 error" in done.stdout, (
        done.stdout,
        done.stderr[-2000:],
    )
    return done


def run(short: bool) -> tuple[list[Row], dict[str, float]]:
    """The rows, and peak RSS figures for the memory section."""
    reps = 3 if short else 7
    bare: list[Run] = []
    check: list[Run] = []
    plain: list[Run] = []
    _check()  # first run pays cold disk caches for both; not counted
    for i in range(reps):
        order = (_bare, _check) if i % 2 == 0 else (_check, _bare)
        for fn in order:
            (bare if fn is _bare else check).append(fn())
        if not short:
            plain.append(_bare(plain=True))
    b = median([r.seconds for r in bare])
    c = median([r.seconds for r in check])
    ratio = c / b
    rows = [
        Row(
            "check",
            f"bare FSDPEngine step, import torch+tensordict (median of {reps})",
            f"{b:.2f} s",
        ),
        Row(
            "check",
            f"leakscope check {TARGET}, train + forward-only (median of {reps})",
            f"{c:.2f} s",
        ),
        Row("check", "check / bare", f"{ratio:.2f}x", f"<= {TARGET_RATIO}x", ratio <= TARGET_RATIO),
    ]
    if plain:
        p = median([r.seconds for r in plain])
        rows.append(Row("check", f"bare tiny model without FSDP (median of {reps})", f"{p:.2f} s"))
        rows.append(Row("check", "check / bare without FSDP", f"{c / p:.2f}x"))
    rss = {
        "bare_rss_mib": median([r.max_rss_kib for r in bare]) / 1024,
        "check_rss_mib": median([r.max_rss_kib for r in check]) / 1024,
    }
    return rows, rss
