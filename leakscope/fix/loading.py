"""The edited text of a user's file, imported under the module's own name (NOTE [A fix is proven, not
worded] in ``leakscope/fix/__init__.py``), and which files are the user's to edit."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import sys
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from leakscope.errors import TargetError
from leakscope.fix.files import source_lines


class _EditedLoader(importlib.machinery.SourceFileLoader):
    """Loads ``path`` from the edited text in memory: the module keeps its name and ``__file__``."""

    def __init__(self, fullname: str, path: str, text: str) -> None:
        super().__init__(fullname, path)
        self._text = text

    def get_data(self, path: str) -> bytes:
        if path == self.path:  # in the file's own encoding, which its coding cookie still declares
            from leakscope.fix.files import source_encoding

            return self._text.encode(source_encoding(super().get_data(path)))
        return super().get_data(path)

    def path_stats(self, path: str) -> Mapping[str, Any]:
        # No stats: the bytecode cache of the unedited file is never read, nor a new one written.
        raise OSError("edited in memory")


class _EditedFinder(importlib.abc.MetaPathFinder):
    """Finds modules as the other finders do; for an edited file, serves the edited text."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = dict(texts)
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        # Another finder that asks the finders after it (a watch's import hook) asks this one again:
        # the inner call answers None, so each finder is asked once per lookup.
        if getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            return self._find(fullname, path, target)
        finally:
            self._busy.on = False

    def _find(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            origin = _resolved(spec.origin) if spec.has_location and spec.origin else None
            text = self.texts.get(origin) if origin is not None else None
            if text is None or spec.origin is None:
                return None  # the next finder (the one that found it) loads it as usual
            return importlib.util.spec_from_file_location(
                fullname,
                spec.origin,
                loader=_EditedLoader(fullname, spec.origin, text),
                submodule_search_locations=spec.submodule_search_locations,
            )
        return None


def _resolved(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return str(Path(path).resolve())
    except OSError:
        return None


def in_project(file: str) -> bool:
    """Whether ``file`` is the user's project: not the standard library, not leakscope's own code,
    not an installed package. Only such a file is edited by a fix, and only its modules are imported
    again between a proof's variants (a library that loads lazily, as transformers and TRL do,
    breaks when half of it is imported again)."""
    from leakscope.probe.library import is_library_file

    if is_library_file(file):
        return False
    return not ({"site-packages", "dist-packages"} & set(Path(file).parts))


def outside(file: str, root: str | None) -> bool:
    """Whether ``file`` lies outside the project directory ``root`` (None: no bound, ``--allow-outside``):
    a fix edits only files under the project being checked (NOTE [Files are the user's])."""
    if root is None:
        return False
    try:
        Path(file).resolve().relative_to(Path(root).resolve())
    except (OSError, ValueError):
        return True
    return False


def user_modules(since: set[str]) -> list[str]:
    """Modules loaded after ``since`` whose file is in the user's project (:func:`in_project`)."""
    names = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name not in since and isinstance(file, str) and in_project(file):
            names.append(name)
    return names


def forget(names: Sequence[str]) -> None:
    """Drop modules from ``sys.modules`` (and from their parent package), so the next import runs
    their code again."""
    for name in names:
        sys.modules.pop(name, None)
        parent, _, child = name.rpartition(".")
        package = sys.modules.get(parent) if parent else None
        if package is not None and getattr(package, child, None) is not None:
            with contextlib.suppress(AttributeError):
                delattr(package, child)


def _edited_names(texts: Mapping[str, str]) -> list[str]:
    return [
        name
        for name, module in list(sys.modules.items())
        if _resolved(getattr(module, "__file__", None)) in texts
    ]


@contextlib.contextmanager
def edited_modules(
    texts: Mapping[Path, str], *, since: set[str], target: str | None = None
) -> Iterator[None]:
    """Within the block, importing a module whose file is a key of ``texts`` runs the edited text
    instead (NOTE [A fix is proven, not worded]). User modules loaded since ``since``, and the edited
    ones, are forgotten before and after, so each variant imports afresh. ``target``: a
    ``path/to/file.py:Name`` target whose file is edited is loaded here, under the name the target
    resolver gives it (the resolver loads a file by path, past every finder)."""
    by_path = {str(path.resolve()): text for path, text in texts.items()}
    forget([*user_modules(since), *_edited_names(by_path)])
    finder = _EditedFinder(by_path)
    sys.meta_path.insert(0, finder)
    for path, text in by_path.items():  # tracebacks and stored-at lines read the edited lines
        linecache.cache[path] = (len(text), None, source_lines(text), path)
    try:
        if target is not None:
            _load_file_target(target, by_path)
        yield
    finally:
        sys.meta_path.remove(finder)
        for path in by_path:
            linecache.cache.pop(path, None)
        forget([*user_modules(since), *_edited_names(by_path)])


def _load_file_target(target: str, texts: Mapping[str, str]) -> None:
    from leakscope.harness.target import load_file, split_target

    module_part, _ = split_target(target)
    if not (module_part.endswith(".py") or "/" in module_part):
        return
    path = Path(module_part).resolve()
    text = texts.get(str(path))
    if text is None:
        return
    name = (
        path.stem if path.stem.isidentifier() else "leakscope_target"
    )  # as leakscope.harness.target names it
    try:
        load_file(path, name, _EditedLoader(name, str(path), text))
    except BaseException as exc:
        raise TargetError(
            f"the edited {module_part} does not import: {type(exc).__name__}: {exc}"
        ) from None


__all__ = ["edited_modules", "forget", "in_project", "outside", "user_modules"]
