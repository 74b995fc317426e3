"""Regenerate (or, with --check, verify) the example outputs in docs/findings.md.

Every example in the findings catalogue is real output of ``leakscope check`` on
a fixture engine in ``fixtures/``. Each sits between ``<!-- example: ID -->``
and ``<!-- /example -->`` markers; this script runs the command named in
:data:`EXAMPLES` through the real CLI and writes its output there. The first
line of the text report (leakscope, torch and Python versions) is left out so
the examples do not change with a patch release of Python.

    python docs/gen_examples.py          # rewrite docs/findings.md
    python docs/gen_examples.py --check  # exit 1 if any example is stale

``tests/test_docs.py`` runs the check.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "findings.md"

#: bytes per graph node the examples are made with (measured on torch 2.13.0 CPU, glibc, x86_64)
NODE_BYTES = "746"

#: example id -> the ``leakscope check`` arguments that produce it
EXAMPLES: dict[str, list[str]] = {
    "returned": ["fixtures.verl_bug:Engine", "--mode", "train"],
    "engine-attribute": ["fixtures.engine_attributes:Engine", "--mode", "train"],
    "micro-batch": ["fixtures.micro_batch_write:Engine", "--mode", "train"],
    "model-state": ["fixtures.model_state:Engine", "--mode", "train"],
    "module-global": ["fixtures.module_global:Engine", "--mode", "train"],
    "tensor-hook": ["fixtures.tensor_hook:Engine", "--mode", "train"],
    "generator": ["fixtures.pending_generator:Engine", "--mode", "train"],
    "library-holder": ["fixtures.library_log_buffer:Engine", "--mode", "train"],
    "unknown-holder": ["fixtures.unknown_holder:Engine", "--mode", "train"],
    "reference-cycle": ["fixtures.cycle_until_gc:Engine", "--mode", "train"],
    "ctx": ["fixtures.ctx_function:Engine", "--mode", "train"],
    "storage-growth": ["fixtures.engine_attributes_clean:Engine", "--mode", "train"],
    # fixtures.nodes_only keeps an 8-byte saved scalar (cause activations); with
    # full fine-tuning, backward frees verl_bug's log_probs graph down to its nodes.
    "nodes-only": ["fixtures.verl_bug:Engine", "--mode", "train", "--model", "full-finetune"],
}

_BLOCK = re.compile(r"(<!-- example: (?P<id>[\w-]+) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)


def run_example(args: list[str]) -> str:
    """The fenced block for ``leakscope check ARGS``: the command line and what it printed."""
    from typer.testing import CliRunner

    from leakscope.cli import app

    # NOTE [One measurement per machine]: the examples count graph nodes at the figure measured on
    # the machine that made them, so that they read the same on every machine that checks them.
    result = CliRunner().invoke(app, ["check", *args], env={"LEAKSCOPE_NODE_BYTES": NODE_BYTES})
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    if lines and lines[0].startswith("leakscope "):
        lines = lines[1:]  # the version line
    while lines and not lines[0]:
        lines.pop(0)
    command = "$ leakscope check " + " ".join(args)
    return "```console\n" + command + "\n" + "\n".join(lines) + "\n```\n"


def render_doc(text: str, only: set[str] | None = None) -> str:
    """``text`` with every example block (or those in ``only``) regenerated."""

    def replace(match: re.Match[str]) -> str:
        example = match.group("id")
        if example not in EXAMPLES:
            raise SystemExit(f"docs/findings.md names unknown example {example!r}; add it to EXAMPLES")
        if only is not None and example not in only:
            return match.group(0)
        return match.group(1) + run_example(EXAMPLES[example]) + match.group(4)

    return _BLOCK.sub(replace, text)


def main(argv: list[str]) -> int:
    """Rewrite the doc, or with ``--check`` report stale examples and exit 1."""
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    current = DOC.read_text(encoding="utf-8")
    fresh = render_doc(current)
    if "--check" in argv:
        if fresh != current:
            sys.stderr.write("docs/findings.md examples differ from real output; run python docs/gen_examples.py\n")
            return 1
        return 0
    DOC.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
