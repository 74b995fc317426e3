"""Project settings: the ``[tool.leakscope]`` table, marker and fixture keywords (no torch).

One validator serves every front end: the table in ``pyproject.toml`` (read by
``leakscope check`` from the working directory or ``--config FILE``), the
keywords of ``@pytest.mark.leakscope`` and of ``leakscope.check(...)`` in the
pytest fixture. Keys are the CLI's option names (``fail-on``; ``fail_on`` is
accepted too). Every mistake is a one-line :class:`~leakscope.errors.ConfigError`
(exit 2) that names the key and where it was read.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from leakscope.errors import ConfigError, UsageError
from leakscope.options import KEY_DTYPES, KEY_SHAPES, MODELS, CheckOptions, MicroBatchKey
from leakscope.policy import FAIL_ON, AllowEntry, FailOn
from leakscope.render import FORMATS
from leakscope.results import Mode

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib

TABLE = "[tool.leakscope]"
MODES = ("train", "forward-only", "both")
#: every key a settings table may hold, in documentation order
KEYS = (
    "targets",
    "mode",
    "model",
    "factory",
    "micro-batches",
    "confirm",
    "fail-on",
    "allowlist",
    "micro-batch",
    "set",
    # the command line's run settings, for CI (NOTE [Options declared once] in commands/common.py)
    "timeout",
    "jobs",
    "format",
)  # each has its rule in RULES
ALLOW_KEYS = ("path", "reason", "target", "mode")
#: what one ``[tool.leakscope.micro-batch]`` entry may say
MICRO_BATCH_KEYS = ("shape", "dtype", "low", "high")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Validated settings; ``None`` means "not set here" so a later layer can fill it."""

    targets: tuple[str, ...] = ()
    mode: str | None = None
    model: str | None = None
    factory: str | None = None
    micro_batches: int | None = None
    confirm: bool | None = None
    fail_on: FailOn | None = None
    allowlist: tuple[AllowEntry, ...] = ()
    #: ``[tool.leakscope.micro-batch]``: how to synthesise keys the engine reads
    micro_batch: tuple[MicroBatchKey, ...] = ()
    #: adapter settings: ``(key, value)`` for every target, ``(target, key, value)`` for one
    set: tuple[tuple[str, ...], ...] = ()
    #: ``leakscope check --timeout``: seconds per isolated target (0: no limit)
    timeout: float | None = None
    #: ``leakscope check --jobs``: targets checked at once
    jobs: int | None = None
    #: ``--format``: the report's format, for the commands that write it
    format: str | None = None
    #: where these settings were read (a file path, or a marker / call description)
    origin: str | None = None

    def override(self, other: Settings) -> Settings:
        """``other``'s values where set, ours elsewhere; allowlists add up (both are policy)."""
        merged = {
            f.name: getattr(other, f.name)
            if getattr(other, f.name) not in (None, ())
            else getattr(self, f.name)
            for f in dataclasses.fields(self)
        }
        merged["allowlist"] = self.allowlist + other.allowlist
        merged["set"] = self.set + other.set  # later entries win per key: the command line's
        return Settings(**merged)

    @property
    def effective_fail_on(self) -> FailOn:
        """``fail_on`` or its default, ``leak``."""
        return self.fail_on or FailOn.LEAK

    def check_options(self, base: CheckOptions | None = None) -> CheckOptions:
        """The :class:`CheckOptions` these settings describe (unset values keep ``base``'s)."""
        options = base or CheckOptions()
        changes: dict[str, Any] = {}
        if self.mode is not None:
            changes["modes"] = modes_of(self.mode)
        if self.model is not None:
            changes["model"] = self.model
        if self.factory is not None:
            changes["factory"] = self.factory
        if self.confirm is not None:
            changes["confirm"] = self.confirm
        if self.allowlist:
            changes["allowlist"] = options.allowlist + self.allowlist
        if self.micro_batch:
            mine = {k.name for k in self.micro_batch}
            changes["micro_batch_keys"] = (
                *(k for k in options.micro_batch_keys if k.name not in mine),
                *self.micro_batch,
            )
        if self.set:
            changes["settings"] = options.settings + self.set
        if self.micro_batches is not None:
            names = {f.name for f in dataclasses.fields(options)}
            if "micro_batches" not in names:
                raise ConfigError(
                    f"{self.origin or TABLE}: micro-batches is not supported by this leakscope version; remove it"
                )
            changes["micro_batches"] = self.micro_batches
        return dataclasses.replace(options, **changes)


def modes_of(mode: str) -> tuple[Mode, ...]:
    """``both`` -> train and forward-only; otherwise the one mode."""
    return (Mode.TRAIN, Mode.FORWARD_ONLY) if mode == "both" else (Mode(mode),)


def _fail(where: str, key: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: {key}: {problem}")


#: how much of a bad value an error shows: a value nested 10^5 deep or a megabyte long stays one short line
_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 4


def _shown(value: object) -> str:
    """``value`` as an error shows it: bounded in depth and length."""
    return _REPR.repr(value)


#: the finite range of each micro-batch dtype's values (half the largest, so high - low stays finite)
_DTYPE_LIMITS = {
    "float16": 65504.0 / 2,
    "bfloat16": 1.7e38,
    "float32": 1.7e38,
    "float64": 8.9e307,
    "int64": float(2**62),
    "int32": float(2**31 - 1),
    "bool": 1.0,
}
#: the most micro-batches a check may run (each is a step of the engine)
MAX_MICRO_BATCHES = 1024
#: the most targets checked at once (`jobs`): more processes than any machine leakscope runs on
MAX_JOBS = 256


def _string(where: str, key: str, value: object, choices: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, key, f"expected a non-empty string, got {_shown(value)}")
    if choices is not None and value not in choices:
        raise _fail(where, key, f"{_shown(value)} is not one of: {', '.join(choices)}")
    return value


def _target(where: str, key: str, value: object) -> str:
    from leakscope.harness.target import split_target

    text = _string(where, key, value)
    try:
        split_target(text)
    except UsageError as exc:
        raise _fail(where, key, exc.message) from None
    return text


def _entry(
    where: str, key: str, value: object, keys: Sequence[str], like: str
) -> Mapping[str, Any]:
    """One entry of a table: a table (``like`` shows one) whose keys are all among ``keys``."""
    if not isinstance(value, Mapping):
        raise _fail(where, key, f"expected a table like {like}, got {_shown(value)}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise _fail(where, f"{key}.{unknown[0]}", f"unknown key; an entry takes {', '.join(keys)}")
    return value


def _allow_entry(where: str, index: int, value: object) -> AllowEntry:
    key = f"allowlist[{index}]"
    value = _entry(where, key, value, ALLOW_KEYS, '{path = "output.x", reason = "why"}')
    if "path" not in value:
        raise _fail(where, f"{key}.path", "missing; name the finding path to allow, as reported")
    if "reason" not in value or not isinstance(value["reason"], str) or not value["reason"].strip():
        raise _fail(
            where,
            f"{key}.reason",
            "missing or empty; say why this reference is kept attached on purpose",
        )
    return AllowEntry(
        path=_string(where, f"{key}.path", value["path"]),
        reason=value["reason"].strip(),
        target=_target(where, f"{key}.target", value["target"]) if "target" in value else None,
        mode=_string(where, f"{key}.mode", value["mode"], ("train", "forward-only"))
        if "mode" in value
        else None,
    )


def _micro_batch(where: str, value: object) -> tuple[MicroBatchKey, ...]:
    """``{advantages = {shape = "batch,seq", dtype = "float32", low = -1.0, high = 1.0}, ...}``."""
    if not isinstance(value, Mapping):
        raise _fail(
            where,
            "micro-batch",
            f"expected a table of keys like {{advantages = {{low = -1.0, high = 1.0}}}}, got {_shown(value)}",
        )
    out = []
    for name, entry in value.items():
        key = f"micro-batch.{name}"
        if isinstance(entry, MicroBatchKey):
            entry = dataclasses.asdict(entry)
            entry.pop("name")
        entry = _entry(
            where,
            key,
            entry,
            MICRO_BATCH_KEYS,
            '{shape = "batch,seq", dtype = "float32", low = 0.0, high = 1.0}',
        )
        fields: dict[str, Any] = {}
        if "shape" in entry:
            fields["shape"] = _string(where, f"{key}.shape", entry["shape"], KEY_SHAPES)
        if "dtype" in entry:
            fields["dtype"] = _string(where, f"{key}.dtype", entry["dtype"], KEY_DTYPES)
        dtype = fields.get("dtype", MicroBatchKey.dtype)
        limit = _DTYPE_LIMITS.get(dtype, _DTYPE_LIMITS["float32"])
        for bound in ("low", "high"):
            if bound in entry:
                number = entry[bound]
                if isinstance(number, bool) or not isinstance(number, (int, float)):
                    raise _fail(where, f"{key}.{bound}", f"expected a number, got {_shown(number)}")
                if not (isinstance(number, int) or math.isfinite(number)) or not (
                    -limit <= number <= limit
                ):
                    raise _fail(
                        where,
                        f"{key}.{bound}",
                        f"{_shown(number)} is out of range; expected a finite number from "
                        f"{-limit:g} to {limit:g} for dtype {dtype}",
                    )
                fields[bound] = float(number)
        spec = MicroBatchKey(str(name), **fields)
        if not spec.low < spec.high:
            raise _fail(where, key, f"low ({spec.low:g}) must be below high ({spec.high:g})")
        out.append(spec)
    return tuple(out)


def _timeout(where: str, key: str, value: object) -> float:
    """Seconds: a number of 0 or more (0: no limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise _fail(where, key, f"expected seconds (a number, 0 for no limit), got {value!r}")
    if value == float("inf"):
        raise _fail(where, key, "expected a finite number of seconds; give 0 for no limit")
    return float(value)


def _scalar(where: str, key: str, value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float, str)):
        return str(value)
    raise _fail(where, key, f"expected true/false, a number or a string, got {_shown(value)}")


def _settings(where: str, value: object) -> tuple[tuple[str, ...], ...]:
    """``set``: a table ``{key = value, "pkg.mod:Engine" = {key = value}}`` or ``["key=value", ...]`` (--set)."""
    out: list[tuple[str, ...]] = []
    if isinstance(value, (list, tuple)):
        for item in value:
            k, sep, v = str(item).partition("=")
            if not sep or not k.strip():
                raise _fail(
                    where, "set", f"{_shown(item)} is not key=value (e.g. calculate_entropy=true)"
                )
            out.append((k.strip(), v.strip()))
        return tuple(out)
    if not isinstance(value, Mapping):
        raise _fail(where, "set", f"expected a table of adapter settings, got {_shown(value)}")
    for k, v in value.items():
        if isinstance(v, Mapping):  # per target
            _target(where, f"set.{k}", k)
            out.extend(
                (str(k), str(k2), _scalar(where, f"set.{k}.{k2}", v2)) for k2, v2 in v.items()
            )
        else:
            out.append((str(k), _scalar(where, f"set.{k}", v)))
    return tuple(out)


def _targets(where: str, key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _fail(
            where, key, f"expected a list of 'pkg.module:Name' strings, got {_shown(value)}"
        )
    return tuple(_target(where, f"targets[{i}]", v) for i, v in enumerate(value))


def _model(where: str, key: str, value: object) -> str:
    return _string(where, key, value, MODELS)


def _micro_batches(where: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MICRO_BATCHES:
        raise _fail(
            where,
            key,
            f"expected an integer from 1 to {MAX_MICRO_BATCHES}, got {_shown(value)}",
        )
    return value


def _jobs(where: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_JOBS:
        raise _fail(where, key, f"expected an integer from 1 to {MAX_JOBS}, got {_shown(value)}")
    return value


def _format(where: str, key: str, value: object) -> str:

    return _string(where, key, value, FORMATS)


def _boolean(where: str, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, key, f"expected true or false, got {_shown(value)}")
    return value


def _allowlist(where: str, key: str, value: object) -> tuple[AllowEntry, ...]:
    if isinstance(value, (Mapping, AllowEntry)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _fail(where, key, f"expected a list of {{path, reason}} tables, got {_shown(value)}")
    return tuple(
        v if isinstance(v, AllowEntry) else _allow_entry(where, i, v) for i, v in enumerate(value)
    )


#: NOTE [One rule per key]: each key of the table, the ``Settings`` field it fills and the one
#: function that validates it (``(where, key, value) -> field value``, raising a one-line
#: :class:`ConfigError` that names the key). A new key is one row here and one field of ``Settings``.
RULES: dict[str, tuple[str, Callable[[str, str, object], object]]] = {
    "targets": ("targets", _targets),
    "mode": ("mode", lambda where, key, value: _string(where, key, value, MODES)),
    "model": ("model", _model),
    "factory": ("factory", _target),
    "micro-batches": ("micro_batches", _micro_batches),
    "confirm": ("confirm", _boolean),
    "fail-on": ("fail_on", lambda where, key, value: FailOn(_string(where, key, value, FAIL_ON))),
    "allowlist": ("allowlist", _allowlist),
    "micro-batch": ("micro_batch", lambda where, key, value: _micro_batch(where, value)),
    "set": ("set", lambda where, key, value: _settings(where, value)),
    "timeout": ("timeout", _timeout),
    "jobs": ("jobs", _jobs),
    "format": ("format", _format),
}


def parse(table: Mapping[str, object], where: str) -> Settings:
    """Validate one settings table (dashed or underscored keys) read from ``where``."""
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = str(raw_key).replace("_", "-")
        rule = RULES.get(key)
        if rule is None:
            raise _fail(where, str(raw_key)[:80], f"unknown key; {TABLE} takes {', '.join(KEYS)}")
        field, validate = rule
        values[field] = validate(where, key, value)
    return Settings(origin=where, **values)


# NOTE [A config file is bounded]
# ``tomllib`` parses arrays and inline tables recursively: a pyproject.toml of
# ``a = [[[[...]]]]`` a thousand deep is a RecursionError deep in the parser.
# Before parsing, :func:`nesting_depth` measures how deep brackets go (outside
# strings and comments, in one loop, no recursion) and a file deeper than
# MAX_NESTING is one line and exit 2. Error messages show values through
# ``_shown`` (bounded depth and length), so no value makes them recurse or run long.
MAX_NESTING = 64
#: the largest config file leakscope reads
MAX_CONFIG_BYTES = 16 * 2**20


def nesting_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest in TOML ``text``, outside strings and comments (iterative)."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c in "\"'":
            triple = text.startswith(c * 3, i)
            quote = c * 3 if triple else c
            j = i + len(quote)
            while j < n:
                if c == '"' and text[j] == "\\":
                    j += 2
                    continue
                if text.startswith(quote, j):
                    break
                if not triple and text[j] == "\n":
                    break
                j += 1
            i = j + len(quote)
            continue
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def read(path: Path, *, required: bool = True) -> Settings:
    """The ``[tool.leakscope]`` table of ``path`` (empty settings when absent and not ``required``)."""
    if not path.is_file():
        if path.exists():  # a directory, a FIFO (reading it would wait for a writer), a device
            raise ConfigError(
                f"{path}: not a regular file; pass a pyproject.toml (a file) to --config"
            )
        raise ConfigError(
            f"{path}: config file not found; pass an existing pyproject.toml to --config"
        )
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; is this a pyproject.toml?"
            )
        text = raw.decode("utf-8")
        depth = nesting_depth(text)
        if depth > MAX_NESTING:
            raise ConfigError(
                f"{path}: arrays or inline tables nested {depth} deep; leakscope reads at most "
                f"{MAX_NESTING} (a [tool.leakscope] table needs 3)"
            )
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {_shown(str(exc))}") from None
    except RecursionError:  # not reached past nesting_depth; one line all the same
        raise ConfigError(f"{path}: nested too deep to read") from None
    tool = doc.get("tool", {})
    table = tool.get("leakscope") if isinstance(tool, dict) else None
    if table is None:
        if required:
            raise ConfigError(f"{path}: no {TABLE} table; add one or drop --config")
        return Settings()
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: tool.leakscope: expected a table, got {_shown(table)}")
    return parse(table, f"{path} {TABLE}")


def discover(config: Path | None = None, cwd: Path | None = None) -> Settings:
    """``--config FILE`` when given, else ``pyproject.toml`` in ``cwd`` if it exists, else nothing."""
    if config is not None:
        return read(config, required=True)
    candidate = cwd / "pyproject.toml" if cwd is not None else Path("pyproject.toml")
    if candidate.is_file():
        return read(candidate, required=False)
    return Settings()


__all__ = ["KEYS", "MODES", "Settings", "discover", "modes_of", "parse", "read"]
