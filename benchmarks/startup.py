"""CLI start: ``leakscope --help`` and ``--version`` wall time, and that neither loads torch."""

from __future__ import annotations

from benchmarks._common import Row, child_env, leakscope_cmd, median, python, run_timed

TARGET_S = 0.3

# The real console entry point, plus a report of what it imported.
_PROBE = (
    "import sys\n"
    "from leakscope.cli import main\n"
    "sys.argv = ['leakscope'] + sys.argv[1:]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit:\n"
    "    pass\n"
    "heavy = sorted(m for m in ('torch', 'tensordict', 'numpy') if m in sys.modules)\n"
    "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
)


def run(short: bool) -> list[Row]:
    reps = 5 if short else 11
    rows = []
    env = child_env()
    for flag in ("--help", "--version"):
        times = []
        for _ in range(reps):
            done = run_timed([*leakscope_cmd(), flag], env=env)
            assert done.returncode == 0, done.stderr
            times.append(done.seconds)
        probe = run_timed([python(), "-c", _PROBE, flag], env=env)
        heavy = probe.stderr.rsplit("HEAVY=", 1)[-1].strip() or "none"
        seconds = median(times)
        rows.append(
            Row(
                "cli-start",
                f"leakscope {flag} (median of {reps})",
                f"{seconds:.3f} s",
                f"< {TARGET_S} s",
                seconds < TARGET_S,
            )
        )
        rows.append(
            Row(
                "cli-start",
                f"leakscope {flag} imports torch/tensordict/numpy",
                heavy,
                "none",
                heavy == "none",
            )
        )
    return rows
