"""Write the table of trainer classes in docs/frameworks.md from the suite that checks them.

    python docs/gen_frameworks_table.py           # rewrite the table
    python docs/gen_frameworks_table.py --check   # exit 1 when the table shown is stale

The rows are tests/trainer_matrix.py's, the matrix tests/test_trainers.py checks in each
release's venv (every class the release exports, each built and checked with no glue, or
refused in one line); tests/test_frameworks_table.py runs ``--check``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.trainer_matrix import CPO_BUG, CPO_SETUP, CPO_TARGET, KEPT, RELEASES  # noqa: E402

DOC = ROOT / "docs" / "frameworks.md"
BEGIN = "<!-- BEGIN trainer table, made by docs/gen_frameworks_table.py from tests/trainer_matrix.py -->"
END = "<!-- END trainer table -->"


def table() -> str:
    """The markdown table: one row per class of each release, then TRL's CPOTrainer bug."""
    lines = [
        "| release (venv) | on | class | `leakscope check`, no glue |",
        "|---|---|---|---|",
    ]
    for release in RELEASES:
        where = f"{release.framework} (`{release.venv}`)"
        for name, target in release.classes.items():
            refused = release.refused.get(name)
            if refused is not None:
                outcome = f"refused in one line: {refused}; names the `watch` command"
            else:
                own = ", ".join(f"`{path}`" for path in release.own)
                stock = f"no holder but the release's own {own} (bounded)" if own else "CLEAN"
                outcome = f"stock: {stock}; `Kept` subclass: LEAK at `{KEPT}`"
            lines.append(f"| {where} | {release.beside} | `{target}` | {outcome} |")
    for venv, (framework, holder) in CPO_BUG.items():
        outcome = (
            f"LEAK at `{holder}` (trl#1526)" if holder is not None else "CLEAN (fixed by trl#1531)"
        )
        lines.append(
            f"| {framework} (`{venv}`, {CPO_SETUP}) | transformers 4.40.2 | `{CPO_TARGET}` | {outcome} |"
        )
    return "\n".join(lines) + "\n"


def rendered(text: str) -> str:
    """``text`` (docs/frameworks.md) with the table between its markers made again."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{DOC}: no {BEGIN!r} ... {END!r} markers")
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    new = rendered(text)
    if "--check" in argv:
        if new != text:
            sys.stderr.write(
                f"{DOC.relative_to(ROOT)}: the trainer table is stale; run python docs/gen_frameworks_table.py\n"
            )
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
