"""Run every code example in docs/watch.md and docs/distributed.md; rewrite (or, with --check, verify) their output.

Every fenced block in those docs is one of:

- ``bash``: one command a line (a trailing ``# comment`` allowed), run from the repository root; each
  must exit 0 (clean) or 1 (a leak);
- ``python``: a program, run from the repository root; the ``# `` lines after its last line of code are
  what it prints;
- ``text`` whose first line is ``$ COMMAND``: what COMMAND prints on stdout (the first line of a text
  report, with the leakscope, torch and Python versions, left out, so that a Python patch release does not
  change the docs);
- ``console``: ``$ COMMAND`` lines, each followed by what it prints, run in one shell (a variable set by
  one command is seen by the next).

A block right after ``<!-- needs: .venv-ray -->`` needs that framework venv (``.ci/setup-ray.sh``): its
``python`` runs with the venv's interpreter, and it is left as it is when the venv is missing. Commands run
with this interpreter's ``bin`` first on PATH (``leakscope``, ``torchrun``), ``COLUMNS=120`` (the width
of the tables shown), ``OMP_NUM_THREADS=1`` and the node cost that docs/gen_examples.py fixes
(``LEAKSCOPE_NODE_BYTES``, so that the bytes do not change with the machine). Process ids vary from run
to run and are written ``PID``.

    python docs/gen_watch_examples.py          # rewrite the outputs
    python docs/gen_watch_examples.py --check  # exit 1 if any example fails or its output is stale

``tests/test_watch_docs.py`` runs each block as a test.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "docs" / "watch.md", ROOT / "docs" / "distributed.md")
_FENCE = re.compile(r"^```(?P<lang>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_NEEDS = re.compile(r"<!-- needs: (?P<venv>\.venv-[\w.-]+) -->\s*$")
#: process ids in example output, and what they are written as
_VOLATILE = (
    (re.compile(r"'pid': \d+"), "'pid': PID"),
    (re.compile(r"\b(report|state)-\d+\.json"), r"\1-PID.json"),
    (re.compile(r"\(pid \d+\)"), "(pid PID)"),
)
_TIMEOUT_S = 900


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a doc."""

    doc: Path
    #: offsets of the body in the doc's text
    start: int
    end: int
    lang: str
    body: str
    #: the framework venv it needs (``.venv-ray``), if any
    needs: str | None

    @property
    def line(self) -> int:
        return self.doc.read_text(encoding="utf-8").count("\n", 0, self.start)

    @property
    def name(self) -> str:
        return f"{self.doc.name}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, in order."""
    text = doc.read_text(encoding="utf-8")
    out = []
    for match in _FENCE.finditer(text):
        needs = _NEEDS.search(text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1] + "\n")
        out.append(Block(
            doc, match.start("body"), match.end("body"), match.group("lang").strip(), match.group("body"),
            needs.group("venv") if needs else None,
        ))
    return out


def kind(block: Block) -> str | None:
    """``bash``, ``python``, ``text`` or ``console``; None for a block that cannot be run."""
    if block.lang in ("bash", "python", "console"):
        return block.lang
    if block.lang == "text" and block.body.startswith("$ "):
        return "text"
    return None


def missing(block: Block) -> str | None:
    """The venv a block needs and this checkout lacks."""
    if block.needs is not None and not (ROOT / block.needs / "bin" / "python").exists():
        return block.needs
    return None


def run(block: Block) -> str:
    """Run ``block``; its body as it should read (a ``bash`` block's unchanged, when every command succeeded).

    Raises AssertionError naming the command that failed.
    """
    what = kind(block)
    if what == "bash":
        for line in block.body.splitlines():
            if line.strip():
                done = _shell(line)
                assert done.returncode in (0, 1), f"{block.name}: `{line}` exited {done.returncode}:\n{done.stderr[-3000:]}"
        return block.body
    if what == "python":
        code, _ = _split_printed(block.body)
        python = str(ROOT / block.needs / "bin" / "python") if block.needs else sys.executable
        done = subprocess.run(
            [python, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=_TIMEOUT_S,
        )
        assert done.returncode == 0, f"{block.name}: the program exited {done.returncode}:\n{done.stderr[-3000:]}"
        printed = _clean(done.stdout).splitlines()
        return code + "".join(f"# {line}\n" for line in printed)
    if what == "text":
        command, _, _ = block.body.partition("\n")
        done = _shell(command[2:])
        assert done.returncode in (0, 1), f"{block.name}: `{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
        lines = _clean(done.stdout).splitlines()
        if lines and lines[0].startswith("leakscope ") and " · torch " in lines[0]:
            lines = lines[1:]  # the version line
        while lines and not lines[0]:
            lines.pop(0)
        return command + "\n" + "".join(f"{line}\n" for line in lines)
    if what == "console":
        return _console(block)
    raise AssertionError(
        f"{block.name}: a ```{block.lang} block cannot be run; make it bash, python or console, or start a text "
        "block with `$ COMMAND`"
    )


def _split_printed(body: str) -> tuple[str, list[str]]:
    """A python block's code and the ``# `` lines after its last line of code."""
    lines = body.splitlines(keepends=True)
    cut = len(lines)
    while cut and lines[cut - 1].startswith("# "):
        cut -= 1
    return "".join(lines[:cut]), [line[2:].rstrip("\n") for line in lines[cut:]]


def _console(block: Block) -> str:
    """Run a console block's commands in one shell; each command followed by what it printed."""
    commands = [line[2:] for line in block.body.splitlines() if line.startswith("$ ")]
    marker = "@@leakscope-doc-example@@"
    script = "\n".join(f"echo {marker}\n{command}" for command in commands)
    done = _shell(script)
    assert done.returncode == 0, f"{block.name}: the commands exited {done.returncode}:\n{done.stderr[-3000:]}"
    outputs = _clean(done.stdout).split(marker + "\n")[1:]
    assert len(outputs) == len(commands), f"{block.name}: {len(outputs)} outputs for {len(commands)} commands"
    return "".join(f"$ {command}\n{output}" for command, output in zip(commands, outputs, strict=True))


def _clean(output: str) -> str:
    for pattern, replacement in _VOLATILE:
        output = pattern.sub(replacement, output)
    return "".join(line.rstrip() + "\n" for line in output.splitlines())


def _env() -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from gen_examples import NODE_BYTES  # one node cost for every doc example
    finally:
        sys.path.remove(str(ROOT / "docs"))
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="120", PYTHONWARNINGS="ignore", LEAKSCOPE_NODE_BYTES=NODE_BYTES)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for name in ("PYTHONPATH", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _shell(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=_TIMEOUT_S,
    )


def regenerate(doc: Path) -> str:
    """``doc``'s text with every block run and its output rewritten (blocks whose venv is missing kept)."""
    text = doc.read_text(encoding="utf-8")
    out, last = [], 0
    for block in blocks(doc):
        out.append(text[last:block.start])
        out.append(block.body if missing(block) else run(block))
        last = block.end
    out.append(text[last:])
    return "".join(out)


def main(argv: list[str]) -> int:
    """Rewrite the docs, or with ``--check`` report a failing or stale example and exit 1."""
    stale = []
    for doc in DOCS:
        try:
            fresh = regenerate(doc)
        except AssertionError as exc:
            sys.stderr.write(f"{exc}\n")
            return 1
        if "--check" in argv:
            if fresh != doc.read_text(encoding="utf-8"):
                stale.append(doc.name)
        else:
            doc.write_text(fresh, encoding="utf-8")
    if stale:
        sys.stderr.write(f"{', '.join(stale)}: examples differ from real output; run python docs/gen_watch_examples.py\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
