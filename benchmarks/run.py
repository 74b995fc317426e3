"""Run leakscope's benchmarks and print each number with its target: ``python benchmarks/run.py [--short]``.

Sections (``--only`` picks some): ``cli-start``, ``check``, ``graph``,
``probes``, ``memory``, ``isolation``. ``--short`` (CI, about two minutes) uses fewer
repetitions and graphs up to 100k nodes; the full run adds 1M-node graphs and
the stricter no-FSDP baseline. Exit status: 0 when every target is met, 1
otherwise (0 with ``--no-fail``). Results and method: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # `python benchmarks/run.py`: make `benchmarks` and `leakscope` importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import check_cost, graph_scan, isolation_cost, memory, probe_overhead, startup  # noqa: E402
from benchmarks._common import Row, machine  # noqa: E402

SECTIONS = ("cli-start", "check", "graph", "probes", "memory", "isolation")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="CI mode: fewer repetitions, graphs up to 100k nodes")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed (report only)")
    args = parser.parse_args(argv)
    chosen = args.only or list(SECTIONS)
    print(f"leakscope benchmarks ({'short' if args.short else 'full'}) on {machine()}", flush=True)
    rows: list[Row] = []
    rss: dict[str, float] = {}
    started = time.perf_counter()
    for section in chosen:
        t0 = time.perf_counter()
        if section == "cli-start":
            new = startup.run(args.short)
        elif section == "check":
            new, rss = check_cost.run(args.short)
        elif section == "graph":
            new = graph_scan.run(args.short)
        elif section == "isolation":
            new = isolation_cost.run(args.short)
        elif section == "probes":
            new = probe_overhead.run(args.short)
        else:
            new = memory.run(args.short, rss)
        for row in new:
            print(f"  {row.status:4}  [{row.section}] {row.name}: {row.value}"
                  + (f"  (target {row.target})" if row.target else ""), flush=True)
        print(f"        ({section}: {time.perf_counter() - t0:.0f} s)", flush=True)
        rows.extend(new)
    failed = [r for r in rows if r.ok is False]
    print(f"{len(rows) - len(failed)} ok, {len(failed)} failed, {time.perf_counter() - started:.0f} s"
          + (": " + "; ".join(f"{r.section} {r.name}" for r in failed) if failed else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": machine(), "short": args.short,
             "rows": [dict(r.__dict__, status=r.status) for r in rows]}, indent=2) + "\n")
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
