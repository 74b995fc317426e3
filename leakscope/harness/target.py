"""Resolve ``pkg.module:Name`` or ``path/to/file.py:Name`` to a Python object.

No CLI code and no torch here: this module only imports the user's module and
looks the attribute up, turning every failure into a one-line
:class:`~leakscope.errors.TargetError` that names what was looked for and where.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.abc
import importlib.util
import os
import sys
import traceback
import types
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

from leakscope.errors import TargetError, UsageError
from leakscope.harness.source import display_path


@dataclasses.dataclass(frozen=True)
class ResolvedTarget:
    """A target string and the object it names."""

    spec: str
    obj: Any
    module: types.ModuleType
    attr: str


def split_target(spec: str) -> tuple[str, str]:
    """Split ``module:attr``; a missing ``:attr`` is a usage error."""
    module_part, sep, attr = spec.rpartition(":")
    # "C:\\x.py:Engine" style paths keep their drive colon in module_part.
    if not sep or not module_part or not attr:
        raise UsageError(
            f"target {spec!r} is not of the form 'pkg.module:Name' or 'path/to/file.py:Name'; "
            "add ':Name' naming the engine class, factory or step function"
        )
    return module_part, attr


def _looks_like_path(module_part: str) -> bool:
    return module_part.endswith(".py") or os.sep in module_part or "/" in module_part


def _syntax_error_line(exc: SyntaxError) -> str:

    where = f"{display_path(exc.filename)}:{exc.lineno}" if exc.filename else f"line {exc.lineno}"
    return f"syntax error in {where}: {exc.msg}"


def _import_file(path_text: str) -> types.ModuleType:
    path = Path(path_text)
    if not path.is_file():
        raise TargetError(
            f"target file {path_text!r} does not exist (looked in {Path.cwd()}); "
            "check the path or use 'pkg.module:Name'"
        )
    path = path.resolve()
    name = path.stem if path.stem.isidentifier() else "leakscope_target"
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        return existing
    if existing is not None:
        name = f"leakscope_target_{abs(hash(str(path))):x}"
    try:
        return load_file(path, name)
    except SyntaxError as exc:
        raise TargetError(
            _syntax_error_line(exc) + "; fix the file", detail=traceback.format_exc()
        ) from exc
    except _NotAModule:
        raise TargetError(
            f"cannot load {path_text!r} as a Python module; give a .py file"
        ) from None
    except BaseException as exc:
        raise _import_failure(path_text, exc) from exc


class _NotAModule(Exception):
    """The file cannot be loaded as a Python module (no loader for it)."""


def load_file(
    path: Path, name: str, loader: importlib.abc.Loader | None = None
) -> types.ModuleType:
    """Run the file ``path`` as the module ``name`` (with ``loader``: its text as that loader gives it,
    an edited copy in :mod:`leakscope.fix.loading`), its directory on ``sys.path`` while it runs; the
    one loader of a file by path. A module that fails to run is not left in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None or spec.loader is None:
        raise _NotAModule(str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    added = str(path.parent) not in sys.path
    if added:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added and str(path.parent) in sys.path:
            sys.path.remove(str(path.parent))
    return module


def _import_failure(what: str, exc: BaseException) -> TargetError:
    if isinstance(exc, SystemExit):
        return TargetError(
            f"importing {what!r} called sys.exit({exc.code!r}); "
            "guard the module's script code with `if __name__ == '__main__':`",
            detail=traceback.format_exc(),
        )
    return TargetError(
        f"importing {what!r} raised {type(exc).__name__}: {_first_line(exc)}; "
        "fix the module so that it imports",
        detail=traceback.format_exc(),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else "(no message)"


def _import_module(name: str) -> types.ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        # Like `python -m` and uvicorn: targets in the current project import.
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if missing == name or name.startswith(missing + "."):
            raise TargetError(
                f"module {name!r} not found (searched sys.path from {cwd}); "
                "install it, run from its project root, or give 'path/to/file.py:Name'",
                detail=traceback.format_exc(),
            ) from exc
        raise TargetError(
            f"importing {name!r} failed: it needs module {missing!r}, which is not installed; "
            f"install {missing.split('.')[0]!r}",
            detail=traceback.format_exc(),
        ) from exc
    except SyntaxError as exc:
        raise TargetError(
            _syntax_error_line(exc) + "; fix the file", detail=traceback.format_exc()
        ) from exc
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _import_failure(name, exc) from exc


def resolve(spec: str) -> ResolvedTarget:
    """Import the module of ``spec`` and return the object it names."""
    module_part, attr = split_target(spec)
    module = (
        _import_file(module_part) if _looks_like_path(module_part) else _import_module(module_part)
    )
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            suggestion = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            where = module_part
            raise TargetError(
                f"{where!r} has no attribute {part!r}{suggestion}"
                + ("" if close else f" (it defines: {', '.join(names[:8]) or 'nothing public'})")
            ) from None
    return ResolvedTarget(spec=spec, obj=obj, module=module, attr=attr)


def target_directory(target: object) -> Path | None:
    """The directory of the file that defines ``target``, found without running any code.

    A ``path/to/file.py:Name`` target: that file's directory; a ``pkg.mod:Name``
    target: its module's, located on ``sys.path`` as the import system would, but
    without importing (and so without executing) any package; an object: its
    module's file, if that module is already imported. None when not found.
    """
    file = target_file(target)
    return file.parent if file is not None else None


def target_file(target: object) -> Path | None:
    """The file that defines ``target`` (resolved), found without running any code, as
    :func:`target_directory` finds its directory; None when not found."""
    if not isinstance(target, str):
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        file = getattr(module, "__file__", None)
        return Path(file).resolve() if file else None
    module_part = target.rpartition(":")[0]
    if not module_part:
        return None
    if _looks_like_path(module_part):
        return Path(module_part).resolve()
    return module_file(module_part, [str(Path.cwd()), *sys.path])


def module_file(name: str, search: list[str]) -> Path | None:
    """The file of module ``name`` (a package: its ``__init__.py``), located on ``search`` as the
    import system would, without importing (and so without executing) any package. None when it is
    not found there, or is built in."""

    path: list[str] | None = search
    spec = None
    for part in name.split("."):
        if path is None or not part.isidentifier():
            return None
        spec = PathFinder.find_spec(part, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or []) or None
    origin = spec.origin if spec is not None else None
    if not origin or origin in ("built-in", "frozen") or not origin.endswith(".py"):
        return None
    return Path(origin).resolve()
