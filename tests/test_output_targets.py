"""Every output flag writes through one writer, by what its path is, and every config file reads in one line.

NOTE [One writer, by what the path is] in leakscope/atomic.py; NOTE [A config file is bounded]
in leakscope/config.py. The fuzz tests run a fixed set of inputs under
``HYPOTHESIS_PROFILE=ci``: every file type as ``-o``/``--dot``/``--emit-test`` (regular, symlink
to a file, to a missing file, to a FIFO, FIFO, directory, missing directory, ``/dev/null``), and
config tables of every TOML shape: no traceback, no non-regular file replaced, nothing written
outside where asked.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from leakscope import config
from leakscope.atomic import Kind, kind_of, problem, write
from leakscope.cli import app
from leakscope.errors import ConfigError
from leakscope.render import render
from leakscope.results import Mode, Report, TargetResult, Verdict

pytestmark = pytest.mark.unit

runner = CliRunner()


def _report_json() -> str:
    result = TargetResult(target="pkg.mod:Engine", mode=Mode.TRAIN, verdict=Verdict.CLEAN)
    report = Report(
        results=(result,), leakscope_version="0", torch_version=None, python_version="3"
    )
    return render(report, "json")


@contextlib.contextmanager
def _draining(fifo: Path) -> Iterator[list[bytes]]:
    """A reader on ``fifo`` for as long as the block runs; what it read."""
    got: list[bytes] = []
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def read() -> None:
        while not stop.is_set():
            with contextlib.suppress(BlockingIOError):
                chunk = os.read(fd, 65536)
                if chunk:
                    got.append(chunk)
                    continue
            stop.wait(0.01)

    stop = threading.Event()
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        stop.wait(0.1)
        stop.set()
        thread.join()
        with contextlib.suppress(BlockingIOError):
            got.append(os.read(fd, 1 << 20))
        os.close(fd)


# -- every kind of path -------------------------------------------------------------------------

#: how to make each kind of output path in a fresh directory, and what the writer does with it
PATHS: dict[str, tuple[Callable[[Path], Path], Kind]] = {
    "new file": (lambda d: d / "report.out", Kind.REPLACE),
    "regular file": (lambda d: _file(d / "report.out"), Kind.REPLACE),
    "symlink to a file": (lambda d: _link(d, _file(d / "victim.txt")), Kind.REPLACE),
    "dangling symlink": (lambda d: _link(d, d / "nowhere.txt"), Kind.REPLACE),
    "symlink to a FIFO": (lambda d: _link(d, _fifo(d / "pipe")), Kind.THROUGH),
    "FIFO": (lambda d: _fifo(d / "report.out"), Kind.THROUGH),
    "directory": (lambda d: d, Kind.REFUSED),
    "missing directory": (lambda d: d / "no" / "such" / "report.out", Kind.REPLACE),
    "/dev/null": (lambda d: Path(os.devnull), Kind.THROUGH),
    "symlink to /dev/null": (lambda d: _link(d, Path(os.devnull)), Kind.THROUGH),
}


def _file(path: Path) -> Path:
    path.write_text("before\n")
    return path


def _link(directory: Path, target: Path) -> Path:
    link = directory / "report.out"
    link.symlink_to(target)
    return link


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _snapshot(directory: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Each entry of ``directory`` (not following links): its type, and its bytes or link target."""
    out: dict[str, tuple[int, bytes | str | None]] = {}
    for entry in sorted(directory.iterdir()):
        info = entry.lstat()
        if stat.S_ISLNK(info.st_mode):
            out[entry.name] = (stat.S_IFMT(info.st_mode), os.readlink(entry))
        elif stat.S_ISREG(info.st_mode):
            out[entry.name] = (stat.S_IFMT(info.st_mode), entry.read_bytes())
        else:
            out[entry.name] = (stat.S_IFMT(info.st_mode), None)
    return out


@pytest.mark.parametrize("name", list(PATHS))
def test_the_writer_by_kind_of_path(tmp_path: Path, name: str) -> None:
    """Regular paths are replaced whole, links never followed, FIFOs and devices written through,
    refused paths left as they were; nothing else in the directory changes."""
    make, kind = PATHS[name]
    path = make(tmp_path)
    assert kind_of(path)[0] is kind
    before = _snapshot(tmp_path)
    outside = Path(os.devnull).lstat().st_mode
    data = b'{"report": 1}\n'
    if name == "missing directory":
        assert problem(path) == f"the directory {path.parent} does not exist; create it first"
        with pytest.raises(FileNotFoundError):
            write(path, data)
    elif kind is Kind.REFUSED:
        assert problem(path) == "it is a directory; give a file name, e.g. -o report.json"
        with pytest.raises(IsADirectoryError):
            write(path, data)
    elif kind is Kind.THROUGH and "FIFO" in name:
        assert problem(path) is None
        fifo = path.resolve()
        with _draining(fifo) as got:
            write(path, data)
        assert b"".join(got) == data
        assert stat.S_ISFIFO(fifo.lstat().st_mode)  # written through, not replaced
    elif kind is Kind.THROUGH:
        assert problem(path) is None
        write(path, data)
    else:
        assert problem(path) is None
        write(path, data)
        assert path.lstat().st_mode & stat.S_IFREG and not path.is_symlink()
        assert path.read_bytes() == data
    after = _snapshot(tmp_path)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed <= ({path.name} if kind is Kind.REPLACE else set())  # the named path only
    if name == "symlink to a file":
        assert (tmp_path / "victim.txt").read_text() == "before\n"  # the link's target untouched
    assert Path(os.devnull).lstat().st_mode == outside  # /dev/null is still a device


def test_a_symlink_to_an_open_descriptor_is_written_through(tmp_path: Path) -> None:
    """``/dev/stdout`` is a link to ``/proc/self/fd/1``: a link into /proc or /dev names an open
    file, written through (appended), never replaced, even when it is a regular file."""
    target = _file(tmp_path / "stdout.txt")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    try:
        link = tmp_path / "report.out"
        link.symlink_to(f"/proc/self/fd/{fd}")
        assert kind_of(link)[0] is Kind.THROUGH
        write(link, b"report\n")
    finally:
        os.close(fd)
    assert link.is_symlink() and target.read_text() == "before\nreport\n"


# -- every output flag ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "what", "example"),
    [
        ("--dot", "the graph", "--dot graph.dot"),
        ("--emit-test", "the test", "--emit-test test_leak.py"),
        ("-o", "the report", "-o report.json"),
    ],
)
@pytest.mark.parametrize("bad", ["directory", "missing directory"])
def test_every_output_flag_is_checked_before_anything_runs(
    tmp_path: Path, flag: str, what: str, example: str, bad: str
) -> None:
    """``explain --dot``, ``watch --emit-test`` and ``-o`` of every command share the writer's
    check: one line, exit 2, before the engine or job runs (a missing directory is not a traceback)."""
    path = PATHS[bad][0](tmp_path)
    script = tmp_path / "job.py"
    script.write_text("raise SystemExit('the job ran')\n")
    command = {
        "--dot": ["explain", "fixtures.verl_bug:Engine", "--dot", str(path)],
        "--emit-test": ["watch", "--emit-test", str(path), str(script)],
        "-o": ["render", str(tmp_path / "absent.json"), "-o", str(path)],
    }[flag]
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    want = (
        "it is a directory; give a file name, e.g. " + example
        if bad == "directory"
        else f"the directory {path.parent} does not exist; create it first"
    )
    assert result.stderr.strip() == f"leakscope: error: cannot write {what} to {path}: {want}"


@settings(
    max_examples=24,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.sampled_from(list(PATHS)), fmt=st.sampled_from(["json", "junit", "sarif", "text"]))
def test_fuzz_render_output_to_every_kind_of_path(
    tmp_path_factory: Any, name: str, fmt: str
) -> None:
    """``leakscope render REPORT -f FMT -o PATH`` for every kind of path: exit 0 and the report
    where asked, or one line and exit 2; never a traceback, never a non-regular file replaced,
    nothing written anywhere else."""
    directory = tmp_path_factory.mktemp("out")
    source = tmp_path_factory.mktemp("src") / "report.json"
    source.write_text(_report_json())
    make, kind = PATHS[name]
    path = make(directory)
    expected = runner.invoke(app, ["render", str(source), "-f", fmt]).stdout
    before = _snapshot(directory)
    with contextlib.ExitStack() as stack:
        got = stack.enter_context(_draining(path.resolve())) if "FIFO" in name else None
        result = runner.invoke(app, ["render", str(source), "-f", fmt, "-o", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    after = _snapshot(directory)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    if kind is Kind.REPLACE and name != "missing directory":
        assert result.exit_code == 0, result.output
        assert changed == {path.name} and stat.S_ISREG(path.lstat().st_mode)
        assert path.read_text() == expected
    else:
        assert changed == set()  # a FIFO stays a FIFO, a directory a directory
        assert result.exit_code == (0 if kind is Kind.THROUGH else 2), result.output
        if got is not None:
            assert b"".join(got).decode() == expected
        if result.exit_code == 2:
            assert len(result.stderr.strip().splitlines()) == 1
    assert source.read_text() == _report_json()  # the input untouched


# -- config files ---------------------------------------------------------------------------------


def _toml(value: Any) -> str:
    """``value`` as a TOML value (inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"


_scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1e300, -1e300, 0.0, -0.0, 1e-320])
    | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
    | st.sampled_from(["train", "both", "leak", "fixtures.verl_bug:Engine", "batch,seq", "int64"])
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["low", "high", "dtype", "shape", "path", "reason"]), inner, max_size=3
        )
    ),
    max_leaves=8,
)
_keys = st.sampled_from([*config.KEYS, "fail_on", "micro_batches", "colour", "advantages"])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    table=st.dictionaries(_keys, _values | st.dictionaries(_keys, _values, max_size=3), max_size=4)
)
def test_fuzz_config_tables_read_or_fail_in_one_line(
    tmp_path_factory: Any, table: dict[str, Any]
) -> None:
    """Any ``[tool.leakscope]`` table: settings, or one ConfigError line naming the file; never
    another exception, never a line break (the value shown is bounded)."""
    path = tmp_path_factory.mktemp("cfg") / "pyproject.toml"
    body = "".join(f"{_toml(key)} = {_toml(value)}\n" for key, value in table.items())
    path.write_text(f"[tool.leakscope]\n{body}", encoding="utf-8")
    try:
        settings_ = config.read(path)
        settings_.check_options()
    except ConfigError as exc:
        text = str(exc)
        assert text.startswith(f"{path}") and "\n" not in text and len(text) < 2000, text


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(depth=st.integers(min_value=1, max_value=20_000), opener=st.sampled_from(["[", "{a = "]))
def test_fuzz_nesting_of_any_depth_is_one_line(
    tmp_path_factory: Any, depth: int, opener: str
) -> None:
    closer = "]" if opener == "[" else "}"
    path = tmp_path_factory.mktemp("deep") / "pyproject.toml"
    path.write_text(f"[tool.other]\nx = {opener * depth}1{closer * depth}\n", encoding="utf-8")
    try:
        config.read(path, required=False)
    except ConfigError as exc:
        assert depth > config.MAX_NESTING and "nested" in str(exc) and "\n" not in str(exc)
    else:
        assert depth <= config.MAX_NESTING


def test_the_cli_reads_a_bad_config_in_one_line(tmp_path: Path) -> None:
    """Through the command: exit 2, one line naming the file and key, no traceback."""
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.leakscope]\nmicro-batch = {advantages = {low = -inf}}\n")
    result = runner.invoke(app, ["check", "--config", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"leakscope: error: {path} [tool.leakscope]: micro-batch.advantages.low: -inf is out of "
        "range; expected a finite number from -1.7e+38 to 1.7e+38 for dtype float32"
    )
    path.write_text("[tool.other]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = runner.invoke(app, ["check", "--config", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().endswith(
        "nested 100000 deep; leakscope reads at most 64 (a [tool.leakscope] table needs 3)"
    )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(list(PATHS)),
    text=st.sampled_from(
        [
            "[tool.leakscope]\nmodes = ['train']\n",
            "[tool.leakscope]\nmicro-batches = 1e300\n",
            "[tool.leakscope\n",
            "\udcff",
        ]
    )
    | st.text(max_size=40),
)
def test_fuzz_a_config_file_of_every_kind_of_path(
    tmp_path_factory: Any, name: str, text: str
) -> None:
    """``check --config PATH`` for every kind of path, holding any text where it is a file: one line
    and exit 2 (there is no target to check, or the file is bad), never a traceback, never a wait on
    a FIFO, and nothing in the directory changed (a config file is only read)."""
    directory = tmp_path_factory.mktemp("cfg")
    path = PATHS[name][0](directory)
    if name in ("regular file", "symlink to a file"):
        path.resolve().write_bytes(text.encode("utf-8", "surrogateescape"))
    before = _snapshot(directory)
    result = runner.invoke(app, ["check", "--config", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    if name not in ("new file", "dangling symlink", "missing directory"):
        assert "config file not found" not in result.stderr  # it exists: named for what it is
    assert _snapshot(directory) == before


@pytest.mark.parametrize("redirect", ["pipe", "file"])
def test_dev_stdout_is_written_through_never_replaced(tmp_path: Path, redirect: str) -> None:
    """``-o /dev/stdout`` (as root on a CI runner too): the report goes to the command's stdout,
    a pipe or the file the shell opened, and /dev/stdout stays the link it was."""
    import subprocess
    import sys

    source = tmp_path / "report.json"
    source.write_text(_report_json())
    before = os.readlink("/dev/stdout")
    out = tmp_path / "stdout.txt"
    with open(out, "wb") as sink:
        proc = subprocess.run(
            [sys.executable, "-m", "leakscope", "render", str(source), "-o", "/dev/stdout"],
            stdout=subprocess.PIPE if redirect == "pipe" else sink,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout if redirect == "pipe" else out.read_bytes()
    assert b"pkg.mod:Engine" in shown and b"Traceback" not in proc.stderr
    assert os.readlink("/dev/stdout") == before and Path("/dev/stdout").is_symlink()


def test_a_link_to_a_closed_descriptor_is_refused_never_replaced(tmp_path: Path) -> None:
    """``-o /dev/stdout`` with stdout closed: the link names nothing; refused, the link kept."""
    link = tmp_path / "report.out"
    fd = os.open(os.devnull, os.O_WRONLY)
    link.symlink_to(f"/proc/self/fd/{fd}")
    os.close(fd)
    assert kind_of(link)[0] is Kind.REFUSED
    assert problem(link) == (
        "it names a closed descriptor or a missing device; give a regular file, a FIFO or "
        "/dev/stdout as --output FILE"
    )
    with pytest.raises(OSError):
        write(link, b"x")
    assert link.is_symlink() and os.readlink(link) == f"/proc/self/fd/{fd}"
