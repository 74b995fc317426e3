"""Run every example of README.md and docs/*.md; rewrite (or, with --check, verify) what they show.

    python docs/gen.py                    # run every example and rewrite the outputs shown
    python docs/gen.py --check            # exit 1 if an example fails or an output shown is stale
    python docs/gen.py docs/watch.md ...  # only these documents

Every fenced block of those documents says what it is, by its language, its first line, or the
directives on the lines right before it (HTML comments, invisible on GitHub):

- a **session**, a block whose first line is ``$ COMMAND``: the ``$`` lines are commands, run in
  one bash shell (a variable set by one is seen by the next), each followed by what it prints on
  stdout (``2>&1`` in the command shows stderr too);
- an **output**, after ``<!-- output: COMMAND -->``: the block is what COMMAND prints. After
  ``<!-- output: COMMAND | FILTER -->`` it is what the shell pipeline FILTER makes of it (an
  excerpt); COMMAND then runs once for every block that shows a part of it;
- ``bash``: one command a line (a trailing ``\\`` continues it); each must exit 0 (clean) or 1 (a
  leak);
- ``python``: a program; the ``# `` lines after its last line of code are what it prints. A block
  that defines ``test_`` functions is a pytest file instead, and must pass;
- ``toml`` with a ``[tool.leakscope]`` table: read by leakscope's own configuration loader, which
  must accept it;
- after ``<!-- file: PATH -->``: the block is part of the file PATH, verbatim (a package the tests
  install, say);
- after ``<!-- pre-commit: NAME -->``: a hook configuration that tests/test_precommit.py runs;
- after ``<!-- realbugs: ID -->``: made and checked by the real-bug suite (``python -m
  realbugs.gen_docs``; tests/test_realbugs.py compares it with the runs it makes anyway);
- after ``<!-- not run: REASON -->``: shown, not run; REASON says why (a placeholder for your own
  package, an install command, a screen only a terminal draws).

A block of any other kind is an error, and so is a fence without a language.
``<!-- needs: .venv-NAME -->`` (implied by a command that names ``.venv-NAME/``) says the block
needs a framework venv (made by ``.ci/setup-*.sh``): its commands run with the venv's ``bin`` first
on PATH, its python with the venv's interpreter; without the venv it is left as it is here and
skipped by the tests (a failure under ``LEAKSCOPE_REQUIRE_FRAMEWORKS=1``).

Everything runs from the repository root with this interpreter's ``bin`` first on PATH
(``leakscope``, ``torchrun``), ``COLUMNS=120`` (the width of the tables shown),
``OMP_NUM_THREADS=1`` and one node cost for every machine (:data:`NODE_BYTES`, NOTE [One
measurement per machine] in leakscope/probe/cost.py). What still varies from run to run or machine
to machine is normalised in one place, :data:`VOLATILE`. ``tests/test_doc_examples.py`` runs each
block as a test.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: bytes per graph node every example is made with (measured on torch 2.13.0 CPU, glibc, x86_64):
#: ``LEAKSCOPE_NODE_BYTES`` in every example's environment, so that bytes read the same on every machine
NODE_BYTES = "746"
#: the terminal width the examples are printed at
COLUMNS = "120"
#: a command running longer is a hang
TIMEOUT_S = 900
#: the exit codes a documented command may end with (docs/cli.md)
EXIT_CODES = (0, 1, 2, 3)

#: what varies from run to run (or machine to machine) in an output, and how it is written in the docs
VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    # the first line of a text report: leakscope, torch and Python versions (a patch release of
    # Python must not change the docs), and the blank line after it
    (re.compile(r"^leakscope \S+ · torch \S+ · Python \S+\n\n?", re.M), ""),
    # the Python version a JSON report names, to its minor version, for the same reason
    (re.compile(r'("python_version": "\d+\.\d+)\.\d+[^"]*"'), r'\1.x"'),
    # the checkout's path: docs show paths relative to the repository root
    (re.compile(re.escape(str(ROOT)) + "/"), ""),
    (re.compile(re.escape(str(ROOT)) + r"\b"), "."),
    # process ids
    (re.compile(r"'pid': \d+"), "'pid': PID"),
    (re.compile(r'"pid": \d+'), '"pid": PID'),
    (re.compile(r"\b(report|state)-\d+\.json"), r"\1-PID.json"),
    (re.compile(r"\(pid \d+\)"), "(pid PID)"),
    (re.compile(r"@ pid \d+"), "@ pid PID"),
    # temporary directories (mktemp -d, Python's tempfile)
    (re.compile(r"/tmp/tmp[.\w-]+"), "/tmp/TMP"),
    # seconds a run took (watch's per-call timing in JSON; pytest's summary)
    (re.compile(r'"seconds": [0-9.e-]+'), '"seconds": S'),
    (re.compile(r" in \d+\.\d+s\b"), " in S s"),
)

_OPEN = re.compile(r"^(?P<indent> *)```(?P<lang>[^`]*)$")
_DIRECTIVE = re.compile(r"^ *<!-- (?P<key>[a-z][a-z -]*): (?P<value>.*?) -->\s*$")
_VENV = re.compile(r"(?<![\w/.-])(\.venv-[\w.-]+)/")
#: directive keys a block may carry
KEYS = ("output", "needs", "not run", "file", "pre-commit", "realbugs")


class DocError(Exception):
    """A document whose blocks cannot be read (an unclosed fence, a fence without a language)."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a document."""

    doc: Path
    #: line number of the opening fence (1-based)
    line: int
    indent: str
    lang: str
    #: the body, without the block's indentation; every line ends with a newline
    body: str
    #: offsets in the document's text: the body's first character, and the closing fence's line
    start: int
    end: int
    directives: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return f"{_shown(self.doc)}:{self.line}"

    def directive(self, key: str) -> str | None:
        return next((value for k, value in self.directives if k == key), None)

    @property
    def commands(self) -> list[str]:
        """The commands of a session block (continuation lines joined)."""
        return [command for command, _ in _session(self.body)]


def _shown(doc: Path) -> str:
    """``doc`` as messages name it: relative to the repository root when it lies there."""
    return str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else str(doc)


def documents() -> list[Path]:
    """README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(doc: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``doc``, in order. Raises DocError for an unclosed fence or a fence
    without a language (a stray fence then shows up as one)."""
    text = doc.read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i].rstrip("\n"))
        if opening is None:
            i += 1
            continue
        indent, lang = opening.group("indent"), opening.group("lang").strip()
        if not lang:
            raise DocError(
                f"{_shown(doc)}:{i + 1}: a fence without a language (or a stray closing fence)"
            )
        close = next(
            (
                j
                for j in range(i + 1, len(lines))
                if lines[j].rstrip("\n").rstrip() == indent + "```"
            ),
            None,
        )
        if close is None:
            raise DocError(f"{_shown(doc)}:{i + 1}: the ```{lang} block is never closed")
        directives = []
        k = i - 1
        while k >= 0 and (match := _DIRECTIVE.match(lines[k])):
            directives.insert(0, (match.group("key"), match.group("value")))
            k -= 1
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line.lstrip(" ")
            for line in lines[i + 1 : close]
        )
        out.append(
            Block(doc, i + 1, indent, lang, body, offsets[i + 1], offsets[close], tuple(directives))
        )
        i = close + 1
    return out


def kind(block: Block) -> str | None:
    """What ``block`` is (see the module docstring); None for a block that is none of them."""
    for key in ("not run", "realbugs", "pre-commit", "file", "output"):
        if block.directive(key) is not None:
            return key
    if block.body.startswith("$ "):
        return "session"
    if block.lang == "python":
        return "pytest" if re.search(r"^def test_", block.body, re.M) else "python"
    if block.lang == "bash":
        return "bash"
    if block.lang == "toml" and "[tool.leakscope" in block.body:
        return "config"
    return None


def problems(block: Block) -> list[str]:
    """What is wrong with ``block``'s marking, in words (empty when nothing is)."""
    out = [
        f"{block.name}: unknown directive {key!r}" for key, _ in block.directives if key not in KEYS
    ]
    what = kind(block)
    if what is None:
        out.append(
            f"{block.name}: a ```{block.lang} block that is not run; start it with `$ COMMAND`, put `<!-- output: "
            "COMMAND -->` before it, or say why it is shown only: `<!-- not run: REASON -->`"
        )
    if what == "not run" and len((block.directive("not run") or "").split()) < 3:
        out.append(f"{block.name}: `not run` needs a reason of a few words")
    return out


def needs(block: Block) -> list[str]:
    """The framework venvs ``block`` runs in (``.venv-trl``), from its directive and its commands."""
    found = [block.directive("needs")] if block.directive("needs") else []
    runs = (block.directive("output") or "") + (
        "\n".join(block.commands) if kind(block) == "session" else ""
    )
    if kind(block) == "bash":
        runs += block.body
    found += _VENV.findall(runs)
    return sorted({venv for venv in found if venv})


def missing(block: Block) -> str | None:
    """The first venv ``block`` needs and this checkout lacks, with the script that creates it."""
    for venv in needs(block):
        if not (ROOT / venv / "bin" / "python").exists():
            scripts = [
                p.name
                for p in sorted((ROOT / ".ci").glob("setup-*.sh"))
                if venv in p.read_text(encoding="utf-8")
            ]
            return (
                f"{venv} is missing; create it with .ci/{scripts[0] if scripts else 'setup-*.sh'}"
            )
    return None


def expected(block: Block) -> str:
    """``block``'s body as it should read today: run it and return what it shows (a block that is
    only run, such as ``bash``, returns its body unchanged when every command succeeded).

    Raises AssertionError naming the command that failed.
    """
    what = kind(block)
    venvs = needs(block)
    if what == "session":
        return _run_session(block, venvs)
    if what == "output":
        return _output(block.directive("output") or "", venvs, block.name)
    if what == "bash":
        for command in _lines(block.body):
            done = _shell(command, tuple(venvs))
            assert done.returncode in (0, 1), (
                f"{block.name}: `{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
            )
            _no_traceback(block.name, command, done)
        return block.body
    if what == "python":
        code, _ = _split_printed(block.body)
        done = _python(code, tuple(venvs))
        assert done.returncode == 0, (
            f"{block.name}: the program exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
        return code + "".join(f"# {line}\n" for line in clean(done.stdout).splitlines())
    if what == "pytest":
        done = _pytest(block.body, tuple(venvs))
        assert done.returncode == 0, (
            f"{block.name}: pytest exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
        )
        return block.body
    if what == "config":
        _load_config(block)
        return block.body
    if what == "file":
        path = ROOT / (block.directive("file") or "")
        assert path.is_file(), f"{block.name}: {path.relative_to(ROOT)} does not exist"
        assert block.body in path.read_text(encoding="utf-8"), (
            f"{block.name}: not part of {path.relative_to(ROOT)} verbatim"
        )
        return block.body
    if what in ("not run", "pre-commit", "realbugs"):
        return block.body
    raise AssertionError("\n".join(problems(block)))


def clean(output: str) -> str:
    """``output`` as the docs show it: :data:`VOLATILE` normalised, trailing spaces and leading blank lines cut."""
    for pattern, replacement in VOLATILE:
        output = pattern.sub(replacement, output)
    return "".join(line.rstrip() + "\n" for line in output.splitlines()).lstrip("\n")


def regenerate(doc: Path, jobs: int = 2) -> tuple[str, list[str]]:
    """``doc``'s text with every block's output rewritten, and the blocks left as they are for want of
    a venv (with why). Raises AssertionError for a block that fails."""
    text = doc.read_text(encoding="utf-8")
    found = blocks(doc, text)
    bad = [problem for block in found for problem in problems(block)]
    assert not bad, "\n".join(bad)
    runnable = [block for block in found if missing(block) is None]
    fresh = dict(zip(map(id, runnable), run_all(runnable, jobs), strict=True))
    out, last, skipped = [], 0, []
    for block in found:
        out.append(text[last : block.start])
        result = fresh.get(id(block))
        if result is None:
            skipped.append(f"{block.name}: {missing(block)}")
            body = block.body
        elif isinstance(result, BaseException):
            raise result
        else:
            body = result
        out.append(
            "".join(
                block.indent + line if line.strip() else line
                for line in body.splitlines(keepends=True)
            )
        )
        last = block.end
    out.append(text[last:])
    return "".join(out), skipped


def run_all(found: Iterable[Block], jobs: int = 2) -> list[str | BaseException]:
    """:func:`expected` of every block, ``jobs`` at a time (each run is cached: a command shown in
    several blocks runs once); a block that fails gives its exception."""

    def one(block: Block) -> str | BaseException:
        try:
            return expected(block)
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, found))


# --- running ---------------------------------------------------------------------------------------


def _env(venvs: tuple[str, ...] = ()) -> dict[str, str]:
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        COLUMNS=COLUMNS,
        PYTHONWARNINGS="ignore",
        LEAKSCOPE_NODE_BYTES=NODE_BYTES,
    )
    path = [str(ROOT / venv / "bin") for venv in venvs] + [
        str(Path(sys.executable).parent),
        env.get("PATH", ""),
    ]
    env["PATH"] = os.pathsep.join(path)
    for name in (
        "PYTHONPATH",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "VIRTUAL_ENV",
        "LEAKSCOPE_WATCH",
        "LEAKSCOPE_WATCH_DIR",
        "FORCE_COLOR",
        "NO_COLOR",
    ):
        env.pop(name, None)
    return env


def _shell(
    script: str, venvs: tuple[str, ...] = (), stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash from the repository root (cached: a command shown twice runs once,
    however its lines are continued)."""
    return _cached_shell(re.sub(r"\\\n\s*", " ", script), venvs, stdin)


#: every shell run so far (or under way), by what it runs: :func:`_cached_shell`
_RUNS: dict[
    tuple[str, tuple[str, ...], str | None],
    concurrent.futures.Future[subprocess.CompletedProcess[str]],
] = {}
_RUNS_LOCK = threading.Lock()


def _cached_shell(
    script: str, venvs: tuple[str, ...], stdin: str | None
) -> subprocess.CompletedProcess[str]:
    """``script``'s run, once: a block that asks for a run another thread has started waits for
    it (the three blocks of docs/json-report.md show one check, and two of them start together
    under :func:`run_all`); a run that raised (a timeout) is not kept."""
    key = (script, venvs, stdin)
    with _RUNS_LOCK:
        future = _RUNS.get(key)
        started = future is None
        if future is None:
            future = _RUNS[key] = concurrent.futures.Future()
    if started:
        try:
            future.set_result(
                subprocess.run(
                    ["bash", "-c", script],
                    cwd=ROOT,
                    env=_env(venvs),
                    input=stdin,
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT_S,
                )
            )
        except BaseException as exc:
            with _RUNS_LOCK:
                del _RUNS[key]
            future.set_exception(exc)
    return future.result()


def _python(code: str, venvs: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    python = str(ROOT / venvs[0] / "bin" / "python") if venvs else sys.executable
    return subprocess.run(
        [python, "-c", code],
        cwd=ROOT,
        env=_env(venvs),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _pytest(code: str, venvs: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    python = str(ROOT / venvs[0] / "bin" / "python") if venvs else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        test = Path(tmp, "test_doc_example.py")
        test.write_text(code, encoding="utf-8")
        env = dict(
            _env(venvs), PYTHONPATH=str(ROOT)
        )  # the examples' targets import from the checkout
        return subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )


def _load_config(block: Block) -> None:
    """A ``[tool.leakscope]`` block read as ``pyproject.toml`` by leakscope's own loader."""
    from leakscope.config import read
    from leakscope.errors import ConfigError

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "pyproject.toml")
        path.write_text(block.body, encoding="utf-8")
        try:
            read(path)
        except ConfigError as exc:
            raise AssertionError(
                f"{block.name}: leakscope refuses this configuration: {exc}"
            ) from None


def _lines(body: str) -> list[str]:
    """A bash block's commands: its lines, a trailing ``\\`` continuing one; blank and comment lines left out."""
    out: list[str] = []
    going_on = False
    for line in body.splitlines():
        if going_on:
            out[-1] += "\n" + line
        elif line.strip() and not line.lstrip().startswith("#"):
            out.append(line)
        going_on = line.endswith("\\")
    return out


def _no_traceback(name: str, command: str, done: subprocess.CompletedProcess[str]) -> None:
    """No traceback on stderr (but with ``--debug``), except torchrun's own report of a rank that exited
    non-zero (a leak is exit 1 on every rank)."""
    tracebacks = done.stderr.count("Traceback (most recent call last)")
    tracebacks -= done.stderr.count(
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
    )
    if "--debug" not in command:
        assert tracebacks <= 0, f"{name}: `{command}` printed a traceback:\n{done.stderr[-3000:]}"


def _session(body: str) -> list[tuple[str, str]]:
    """(command, what it printed) for each ``$`` line of a session; a command's lines ending in ``\\`` go on."""
    out: list[tuple[str, list[str]]] = []
    lines = body.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = [line[2:].rstrip("\n")]
            while command[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                command.append(lines[i].rstrip("\n"))
            out.append(("\n".join(command), []))
        elif out:
            out[-1][1].append(line)
        i += 1
    return [(command, "".join(printed)) for command, printed in out]


def _run_session(block: Block, venvs: list[str]) -> str:
    """A session's commands run in one shell; each followed by what it printed on stdout."""
    commands = block.commands
    if (
        len(commands) == 1
    ):  # one command: its run is shared with every output directive that names it
        done = _shell(commands[0], tuple(venvs))
        assert done.returncode in EXIT_CODES, (
            f"{block.name}: `{commands[0]}` exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
        _no_traceback(block.name, commands[0], done)
        return f"$ {commands[0]}\n{clean(done.stdout)}"
    marker = "@@leakscope-doc-example@@"
    script = "\n".join(f'echo {marker}\n{command}\necho "{marker} $?" >&2' for command in commands)
    done = _shell(script, tuple(venvs))
    codes = [int(code) for code in re.findall(rf"^{marker} (\d+)$", done.stderr, re.M)]
    assert len(codes) == len(commands), (
        f"{block.name}: the shell stopped early:\n{done.stderr[-3000:]}"
    )
    for command, code in zip(commands, codes, strict=True):
        assert code in EXIT_CODES, (
            f"{block.name}: `{command}` exited {code}:\n{done.stderr[-3000:]}"
        )
        _no_traceback(block.name, command, done)
    outputs = done.stdout.split(marker + "\n")[1:]
    return "".join(
        f"$ {command}\n{clean(output)}" for command, output in zip(commands, outputs, strict=True)
    )


def _output(directive: str, venvs: list[str], name: str) -> str:
    """What an output directive's command prints, through its filter if it has one."""
    command, _, filter_ = directive.partition(" | ")
    done = _shell(command, tuple(venvs))
    assert done.returncode in EXIT_CODES, (
        f"{name}: `{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
    )
    _no_traceback(name, command, done)
    printed = clean(done.stdout)
    if filter_:
        filtered = _shell(filter_, (), printed)
        assert filtered.returncode == 0, (
            f"{name}: the filter `{filter_}` exited {filtered.returncode}:\n{filtered.stderr}"
        )
        printed = clean(filtered.stdout)
    assert printed.strip(), f"{name}: `{directive}` printed nothing"
    return printed.rstrip("\n") + "\n"


def _split_printed(body: str) -> tuple[str, list[str]]:
    """A python block's code and the ``# `` lines after its last line of code."""
    lines = body.splitlines(keepends=True)
    cut = len(lines)
    while cut and lines[cut - 1].startswith("# "):
        cut -= 1
    return "".join(lines[:cut]), [line[2:].rstrip("\n") for line in lines[cut:]]


# --- the command line -------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """Rewrite the documents (all, or those named), or with ``--check`` report what is stale; exit 1 then."""
    check = "--check" in argv
    named = [ROOT / arg for arg in argv if not arg.startswith("-")]
    chosen = named or documents()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    stale, failed = [], False
    for doc in chosen:
        try:
            fresh, skipped = regenerate(doc)
        except (AssertionError, DocError, subprocess.TimeoutExpired) as exc:
            sys.stderr.write(f"{exc}\n")
            failed = True
            continue
        for line in skipped:
            sys.stderr.write(f"left as it is: {line}\n")
        if fresh != doc.read_text(encoding="utf-8"):
            if check:
                stale.append(str(doc.relative_to(ROOT)))
            else:
                doc.write_text(fresh, encoding="utf-8")
                sys.stderr.write(f"rewrote {doc.relative_to(ROOT)}\n")
    if any(kind(block) == "realbugs" for doc in chosen for block in blocks(doc)):
        from realbugs import gen_docs

        code = gen_docs.main(["--check"] if check else [])
        failed = failed or code != 0
    if stale:
        sys.stderr.write(
            f"{', '.join(stale)}: examples differ from real output; run python docs/gen.py\n"
        )
    return 1 if stale or failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
