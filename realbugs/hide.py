"""Hide, in an overlay's process, the .venv packages its release's reference venv did not have.

An overlay adds and replaces packages but cannot remove one: the repository's .venv also holds
peft 0.21, transformers 5 and the test tools, and libraries probe for optional packages
(``trl.import_utils.is_peft_available`` is ``importlib.util.find_spec("peft") is not None``;
TRL 0.4 then imports peft 0.21, which needs an accelerate newer than the release's 0.17). So
each overlay gets a ``sitecustomize.py`` (Python imports it at start-up from any ``sys.path``
entry, PYTHONPATH included) that calls :func:`install` with the import names of every .venv
distribution that is neither in the release's lock nor needed by torch or leakscope itself:
the process then sees the reference venv's packages, torch and leakscope's own dependencies,
as the research runs did.

Only .venv's copy is hidden (the running interpreter's own site-packages): another copy further on
``sys.path`` still imports, as it did in the reference venv (setuptools' pkg_resources puts its
vendored platformdirs on ``sys.path`` when no platformdirs is installed).
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class HidingPathFinder:
    """``sys.meta_path``'s PathFinder, blind to some top-level modules and distributions of the
    folders ``dirs``."""

    def __init__(self, modules: Iterable[str], distributions: Iterable[str], dirs: Iterable[str]) -> None:
        self.modules = frozenset(modules)
        self.distributions = frozenset(_canonical(name) for name in distributions)
        self.dirs = frozenset(os.path.realpath(path) for path in dirs)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if path is None and fullname in self.modules:
            path = [entry for entry in sys.path if os.path.realpath(entry or ".") not in self.dirs]
        return PathFinder.find_spec(fullname, path, target)

    def invalidate_caches(self) -> None:
        PathFinder.invalidate_caches()

    def find_distributions(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for dist in PathFinder.find_distributions(*args, **kwargs):
            where = getattr(dist, "_path", None)  # PathDistribution: its .dist-info folder
            if (
                where is not None
                and os.path.realpath(os.path.dirname(str(where))) in self.dirs
                and _canonical(dist.metadata["Name"] or "") in self.distributions
            ):
                continue
            yield dist


def install(modules: Iterable[str], distributions: Iterable[str]) -> None:
    """Put a :class:`HidingPathFinder`, blind to ``modules`` and ``distributions`` of the running
    interpreter's site-packages, where ``sys.meta_path`` has PathFinder."""
    paths = sysconfig.get_paths()
    finder = HidingPathFinder(modules, distributions, {paths["purelib"], paths["platlib"]})
    sys.meta_path[:] = [finder if entry is PathFinder else entry for entry in sys.meta_path]
