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
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leakscope.errors import ConfigError
from leakscope.options import KEY_DTYPES, KEY_SHAPES, CheckOptions, MicroBatchKey
from leakscope.policy import FAIL_ON, AllowEntry
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
)
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
    fail_on: str | None = None
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
    def effective_fail_on(self) -> str:
        """``fail_on`` or its default, ``leak``."""
        return self.fail_on or "leak"

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


def _string(where: str, key: str, value: Any, choices: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, key, f"expected a non-empty string, got {value!r}")
    if choices is not None and value not in choices:
        raise _fail(where, key, f"{value!r} is not one of: {', '.join(choices)}")
    return value


def _target(where: str, key: str, value: Any) -> str:
    from leakscope.errors import UsageError
    from leakscope.harness.target import split_target

    text = _string(where, key, value)
    try:
        split_target(text)
    except UsageError as exc:
        raise _fail(where, key, exc.message) from None
    return text


def _allow_entry(where: str, index: int, value: Any) -> AllowEntry:
    key = f"allowlist[{index}]"
    if not isinstance(value, Mapping):
        raise _fail(
            where,
            key,
            f'expected a table like {{path = "output.x", reason = "why"}}, got {value!r}',
        )
    unknown = sorted(set(value) - set(ALLOW_KEYS))
    if unknown:
        raise _fail(
            where, f"{key}.{unknown[0]}", f"unknown key; an entry takes {', '.join(ALLOW_KEYS)}"
        )
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


def _micro_batch(where: str, value: Any) -> tuple[MicroBatchKey, ...]:
    """``{advantages = {shape = "batch,seq", dtype = "float32", low = -1.0, high = 1.0}, ...}``."""
    if not isinstance(value, Mapping):
        raise _fail(
            where,
            "micro-batch",
            f"expected a table of keys like {{advantages = {{low = -1.0, high = 1.0}}}}, got {value!r}",
        )
    out = []
    for name, entry in value.items():
        key = f"micro-batch.{name}"
        if isinstance(entry, MicroBatchKey):
            out.append(entry)
            continue
        if not isinstance(entry, Mapping):
            raise _fail(
                where,
                key,
                f'expected a table like {{shape = "batch,seq", dtype = "float32", low = 0.0, high = 1.0}}, got {entry!r}',
            )
        unknown = sorted(set(entry) - set(MICRO_BATCH_KEYS))
        if unknown:
            raise _fail(
                where,
                f"{key}.{unknown[0]}",
                f"unknown key; an entry takes {', '.join(MICRO_BATCH_KEYS)}",
            )
        fields: dict[str, Any] = {}
        if "shape" in entry:
            fields["shape"] = _string(where, f"{key}.shape", entry["shape"], KEY_SHAPES)
        if "dtype" in entry:
            fields["dtype"] = _string(where, f"{key}.dtype", entry["dtype"], KEY_DTYPES)
        for bound in ("low", "high"):
            if bound in entry:
                number = entry[bound]
                if isinstance(number, bool) or not isinstance(number, (int, float)):
                    raise _fail(where, f"{key}.{bound}", f"expected a number, got {number!r}")
                fields[bound] = float(number)
        spec = MicroBatchKey(str(name), **fields)
        if not spec.low < spec.high:
            raise _fail(where, key, f"low ({spec.low:g}) must be below high ({spec.high:g})")
        out.append(spec)
    return tuple(out)


def _timeout(where: str, key: str, value: Any) -> float:
    """Seconds: a number of 0 or more (0: no limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise _fail(where, key, f"expected seconds (a number, 0 for no limit), got {value!r}")
    if value == float("inf"):
        raise _fail(where, key, "expected a finite number of seconds; give 0 for no limit")
    return float(value)


def _scalar(where: str, key: str, value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float, str)):
        return str(value)
    raise _fail(where, key, f"expected true/false, a number or a string, got {value!r}")


def _settings(where: str, value: Any) -> tuple[tuple[str, ...], ...]:
    """``set``: a table ``{key = value, "pkg.mod:Engine" = {key = value}}`` or ``["key=value", ...]`` (--set)."""
    out: list[tuple[str, ...]] = []
    if isinstance(value, (list, tuple)):
        for item in value:
            k, sep, v = str(item).partition("=")
            if not sep or not k.strip():
                raise _fail(
                    where, "set", f"{item!r} is not key=value (e.g. calculate_entropy=true)"
                )
            out.append((k.strip(), v.strip()))
        return tuple(out)
    if not isinstance(value, Mapping):
        raise _fail(where, "set", f"expected a table of adapter settings, got {value!r}")
    for k, v in value.items():
        if isinstance(v, Mapping):  # per target
            _target(where, f"set.{k}", k)
            out.extend(
                (str(k), str(k2), _scalar(where, f"set.{k}.{k2}", v2)) for k2, v2 in v.items()
            )
        else:
            out.append((str(k), _scalar(where, f"set.{k}", v)))
    return tuple(out)


def parse(table: Mapping[str, Any], where: str) -> Settings:
    """Validate one settings table (dashed or underscored keys) read from ``where``."""
    from leakscope.models.names import MODELS

    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = str(raw_key).replace("_", "-")
        if key not in KEYS:
            raise _fail(where, str(raw_key), f"unknown key; {TABLE} takes {', '.join(KEYS)}")
        if key == "targets":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not value:
                raise _fail(
                    where, key, f"expected a list of 'pkg.module:Name' strings, got {value!r}"
                )
            values["targets"] = tuple(
                _target(where, f"targets[{i}]", v) for i, v in enumerate(value)
            )
        elif key == "mode":
            values["mode"] = _string(where, key, value, MODES)
        elif key == "model":
            values["model"] = _string(where, key, value, MODELS)
        elif key == "factory":
            values["factory"] = _target(where, key, value)
        elif key == "micro-batches":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _fail(where, key, f"expected a positive integer, got {value!r}")
            values["micro_batches"] = value
        elif key == "confirm":
            if not isinstance(value, bool):
                raise _fail(where, key, f"expected true or false, got {value!r}")
            values["confirm"] = value
        elif key == "fail-on":
            values["fail_on"] = _string(where, key, value, FAIL_ON)
        elif key == "micro-batch":
            values["micro_batch"] = _micro_batch(where, value)
        elif key == "set":
            values["set"] = _settings(where, value)
        elif key == "timeout":
            values["timeout"] = _timeout(where, key, value)
        elif key == "jobs":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _fail(where, key, f"expected a positive integer, got {value!r}")
            values["jobs"] = value
        elif key == "format":
            from leakscope.render import FORMATS

            values["format"] = _string(where, key, value, FORMATS)
        else:  # allowlist
            if isinstance(value, (Mapping, AllowEntry)):
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise _fail(
                    where, key, f"expected a list of {{path, reason}} tables, got {value!r}"
                )
            values["allowlist"] = tuple(
                v if isinstance(v, AllowEntry) else _allow_entry(where, i, v)
                for i, v in enumerate(value)
            )
    return Settings(origin=where, **values)


def read(path: Path, *, required: bool = True) -> Settings:
    """The ``[tool.leakscope]`` table of ``path`` (empty settings when absent and not ``required``)."""
    if not path.is_file():
        raise ConfigError(
            f"{path}: config file not found; pass an existing pyproject.toml to --config"
        )
    try:
        with path.open("rb") as handle:
            doc = tomllib.load(handle)
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    tool = doc.get("tool", {})
    table = tool.get("leakscope") if isinstance(tool, dict) else None
    if table is None:
        if required:
            raise ConfigError(f"{path}: no {TABLE} table; add one or drop --config")
        return Settings()
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: tool.leakscope: expected a table, got {table!r}")
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
