"""[tool.leakscope] settings and the gate policy (allowlist, --fail-on): plain data, no torch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from leakscope import config
from leakscope.errors import ConfigError, ExitCode
from leakscope.holders import CYCLE, HolderPath
from leakscope.options import CheckOptions
from leakscope.policy import AllowEntry, allow_result, exit_code
from leakscope.results import Finding, Holder, Mode, Report, TargetResult, Verdict
from tests.conftest import holder_path

pytestmark = pytest.mark.unit

GOOD = """
[tool.leakscope]
targets = ["fixtures.verl_bug:Engine", "fixtures/verl_fix.py:Engine"]
mode = "train"
model = "full-finetune"
confirm = false
fail-on = "warning"

[[tool.leakscope.allowlist]]
path = "output.model_output.entropy"
reason = "kept attached for the KL term"

[[tool.leakscope.allowlist]]
path = "engine.history*"
reason = "bounded ring buffer"
target = "fixtures.engine_attributes:Engine"
mode = "train"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_every_key(tmp_path: Path) -> None:
    settings = config.read(_write(tmp_path, GOOD))
    assert settings == config.Settings(
        targets=("fixtures.verl_bug:Engine", "fixtures/verl_fix.py:Engine"),
        mode="train",
        model="full-finetune",
        confirm=False,
        fail_on="warning",
        allowlist=(
            AllowEntry("output.model_output.entropy", "kept attached for the KL term"),
            AllowEntry(
                "engine.history*",
                "bounded ring buffer",
                "fixtures.engine_attributes:Engine",
                "train",
            ),
        ),
        origin=f"{tmp_path / 'pyproject.toml'} [tool.leakscope]",
    )
    options = settings.check_options()
    assert options.modes == (Mode.TRAIN,)
    assert (options.model, options.confirm) == ("full-finetune", False)
    assert options.allowlist == settings.allowlist


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('fail-on = "sometimes"', "fail-on: 'sometimes' is not one of: leak, warning"),
        ('mode = "eval"', "mode: 'eval' is not one of: train, forward-only, both"),
        (
            'colour = "red"',
            "colour: unknown key; [tool.leakscope] takes targets, mode, model, factory, "
            "micro-batches, confirm, fail-on, allowlist",
        ),
        ('targets = ["no_colon"]', "targets[0]: target 'no_colon' is not of the form"),
        ("micro-batches = 0", "micro-batches: expected an integer from 1 to 1024, got 0"),
        ("confirm = 1", "confirm: expected true or false, got 1"),
        ('model = "gpt"', "model: 'gpt' is not one of: peft-checkpoint"),
        (
            'allowlist = [{path = "output.x"}]',
            "allowlist[0].reason: missing or empty; say why this reference is kept attached on purpose",
        ),
        (
            'allowlist = [{path = "output.x", reason = "  "}]',
            "allowlist[0].reason: missing or empty",
        ),
        ('allowlist = [{reason = "why"}]', "allowlist[0].path: missing"),
        ('allowlist = [{path = "o", reason = "r", why = 1}]', "allowlist[0].why: unknown key"),
        # numbers TOML allows but a micro-batch key cannot take: the key named, not the engine blamed
        (
            "micro-batch = {advantages = {low = 1e300}}",
            "micro-batch.advantages.low: 1e+300 is out of range; expected a finite number from "
            "-1.7e+38 to 1.7e+38 for dtype float32",
        ),
        ("micro-batch = {advantages = {high = -inf}}", "micro-batch.advantages.high: -inf is out"),
        ("micro-batch = {advantages = {high = nan}}", "micro-batch.advantages.high: nan is out"),
        (
            'micro-batch = {advantages = {low = "0"}}',
            "micro-batch.advantages.low: expected a number, got '0'",
        ),
        (
            'micro-batch = {ids = {dtype = "int32", high = 1e12}}',
            "micro-batch.ids.high: 1000000000000.0 is out of range; expected a finite number from "
            "-2.14748e+09 to 2.14748e+09 for dtype int32",
        ),
        ("micro-batch = {advantages = 3}", "micro-batch.advantages: expected a table like"),
        ("micro-batches = 100000000000", "micro-batches: expected an integer from 1 to 1024"),
        ("micro-batches = 1.5", "micro-batches: expected an integer from 1 to 1024, got 1.5"),
        ("targets = [[[[[[1]]]]]]", "targets[0]: expected a non-empty string, got [[[...]]]"),
        ("set = {a = [1, 2]}", "set.a: expected true/false, a number or a string, got [1, 2]"),
    ],
)
def test_bad_table_is_one_line_naming_key_and_file(tmp_path: Path, body: str, message: str) -> None:
    path = _write(tmp_path, f"[tool.leakscope]\n{body}\n")
    with pytest.raises(ConfigError) as info:
        config.read(path)
    text = str(info.value)
    assert text.startswith(f"{path} [tool.leakscope]: {message}")
    assert "\n" not in text
    assert info.value.exit_code is ExitCode.USAGE


@pytest.mark.parametrize("where", ["[tool.other]\nx = ", "[tool.leakscope]\nset = "])
def test_a_deeply_nested_file_is_one_line_not_a_recursion_error(tmp_path: Path, where: str) -> None:
    """NOTE [A config file is bounded]: 10^5 nested arrays and inline tables are refused before
    the parser recurses; strings and comments holding brackets are not nesting."""
    deep = "[" * 50_000 + "{a = " * 50_000 + "1" + "}" * 50_000 + "]" * 50_000
    path = _write(tmp_path, f"{where}{deep}\n")
    with pytest.raises(ConfigError) as info:
        config.read(path)
    assert str(info.value) == (
        f"{path}: arrays or inline tables nested 100000 deep; leakscope reads at most 64 "
        "(a [tool.leakscope] table needs 3)"
    )
    look_alike = _write(
        tmp_path,
        f'# {"[" * 1000}\n[tool.leakscope]\nmode = "train"\nx_y = 1\n'.replace("x_y = 1\n", "")
        + f'[tool.other]\ns = "{"[" * 1000}"\nt = \'{"{" * 1000}\'\nu = """{"[" * 99}\n"""\n',
    )
    assert config.read(look_alike).mode == "train"
    assert config.nesting_depth("a = [[1], {b = [2]}]") == 3


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[tool.leakscope\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml: not valid TOML: "):
        config.read(path)
    with pytest.raises(ConfigError, match="config file not found"):
        config.read(tmp_path / "missing.toml")


def test_discover_uses_cwd_pyproject_and_tolerates_no_table(tmp_path: Path) -> None:
    assert config.discover(cwd=tmp_path) == config.Settings()
    _write(tmp_path, "[project]\nname = 'x'\n")
    assert config.discover(cwd=tmp_path) == config.Settings()
    with pytest.raises(ConfigError, match=r"no \[tool.leakscope\] table; add one or drop --config"):
        config.discover(tmp_path / "pyproject.toml")
    _write(tmp_path, '[tool.leakscope]\nmode = "forward-only"\n')
    assert config.discover(cwd=tmp_path).mode == "forward-only"


def test_flags_override_config_and_allowlists_add_up() -> None:
    project = config.parse(
        {
            "mode": "forward-only",
            "model": "full-finetune",
            "allowlist": [{"path": "a", "reason": "r"}],
        },
        "file",
    )
    flags = config.parse(
        {"mode": "train", "fail_on": "warning", "allowlist": [{"path": "b", "reason": "s"}]},
        "flags",
    )
    merged = project.override(flags)
    assert (merged.mode, merged.model, merged.effective_fail_on) == (
        "train",
        "full-finetune",
        "warning",
    )
    assert [e.path for e in merged.allowlist] == ["a", "b"]
    assert config.Settings().effective_fail_on == "leak"


def test_micro_batches_needs_support_in_check_options() -> None:
    settings = config.parse({"micro-batches": 4}, "pyproject.toml [tool.leakscope]")
    if "micro_batches" in CheckOptions.__dataclass_fields__:
        assert dataclasses.asdict(settings.check_options())["micro_batches"] == 4
    else:
        with pytest.raises(ConfigError, match="micro-batches is not supported"):
            settings.check_options()


def _finding(path: HolderPath, severity: str = "leak", nbytes: int = 4096) -> Finding:
    return Finding(
        path=path,
        holder=Holder.RETURNED,
        grad_fn="NegBackward0",
        graph_nodes=3,
        retained_bytes=nbytes,
        confirmed=True,
        hint="detach it",
        severity=severity,
    )


def _result(*findings: Finding, warnings: tuple[str, ...] = ()) -> TargetResult:
    verdict = Verdict.LEAK if any(f.severity == "leak" for f in findings) else Verdict.CLEAN
    return TargetResult(
        "pkg:Engine",
        Mode.TRAIN,
        verdict,
        findings=findings,
        retained_bytes=8192 if verdict is Verdict.LEAK else 0,
        warnings=warnings,
    )


def test_allowed_findings_stay_visible_and_stop_failing() -> None:
    result = _result(_finding(holder_path("output", "a")), _finding(holder_path("output", "b")))
    partly = allow_result(result, [AllowEntry("output.a", "needed")])
    assert partly.verdict is Verdict.LEAK
    assert [(f.severity, f.allowed_reason) for f in partly.findings] == [
        ("allowed", "needed"),
        ("leak", None),
    ]
    fully = allow_result(result, [AllowEntry("output.*", "all of output")])
    assert fully.verdict is Verdict.CLEAN and fully.retained_bytes == 0
    assert [str(f.path) for f in fully.findings] == ["output.a", "output.b"]
    assert allow_result(result, [AllowEntry("output.a", "x", target="other:Engine")]) == result
    assert allow_result(result, [AllowEntry("output.a", "x", mode="forward-only")]) == result
    # "[0]" in a path is literal, not a glob character class.
    indexed = _result(_finding(holder_path("output", "x", 0)))
    assert allow_result(indexed, [AllowEntry("output.x[0]", "r")]).verdict is Verdict.CLEAN


def test_a_trailing_star_covers_whole_segments_only() -> None:
    """``engine.history*`` allows the history and what it holds, never a sibling that shares its spelling."""
    history = _result(_finding(holder_path("engine", "history", 0, "loss")))
    sibling = _result(_finding(holder_path("engine", "history_old", 0)))
    for entry in ("engine.history*", "engine.history[*", "engine*", "engine.*"):
        assert allow_result(history, [AllowEntry(entry, "r")]).verdict is Verdict.CLEAN, entry
    assert allow_result(sibling, [AllowEntry("engine.history*", "r")]).verdict is Verdict.LEAK
    for entry in ("engine.hist*", "engine.history[1]*"):
        assert allow_result(history, [AllowEntry(entry, "r")]).verdict is Verdict.LEAK, entry


def test_fail_on_warning_and_error_precedence() -> None:
    def report(*results: TargetResult) -> Report:
        return Report(results=results, leakscope_version="0", torch_version="0", python_version="0")

    warned = _result(_finding(CYCLE, severity="warning"))
    truncated = _result(warnings=("the holder walk stopped",))
    assert exit_code(report(warned)) == 0
    assert exit_code(report(warned), "warning") == 1
    assert exit_code(report(truncated), "warning") == 1
    leak = _result(_finding(holder_path("output", "a")))
    assert exit_code(report(leak)) == 1
    error = TargetResult("x:Y", Mode.TRAIN, Verdict.ERROR, error="boom")
    assert exit_code(report(leak, error)) == 3
    allowed = report(allow_result(leak, [AllowEntry("output.a", "r")]))
    assert exit_code(allowed, "warning") == 0
