"""Patch step methods in place, now or when their module is imported, and put them back.

# NOTE [Patching on import]
# A script imports its framework after ``watch`` starts, so a method whose module
# is not imported yet is patched the moment its module finishes executing: a
# finder at the front of ``sys.meta_path`` answers only for those module names,
# asks the finders behind it for the real spec, and wraps the loader so that
# ``exec_module`` patches right after the module body ran. The module's
# ``__loader__`` and ``__spec__.loader`` are then set back to the real loader,
# so nothing of leakscope stays reachable from the module. The finder removes
# itself from ``sys.meta_path`` in :meth:`Patcher.restore`.
#
# NOTE [Patching a function]
# A module-level function (``--method pkg.mod:train_step``) is looked up by name at each
# call: in its own module by ``pkg.mod.train_step(...)`` and by a module that imported it
# later, and in the namespace of every module that ran ``from pkg.mod import train_step``
# earlier. So the wrapper replaces it in its module and in every loaded module whose global
# of any name is that very function object; each replacement is recorded and put back on
# restore, where the name still holds the wrapper (a job that rebound the name keeps its own);
# a module that imported the name after the patch (``from pkg.mod import train_step`` runs
# once ``pkg.mod`` has executed, and ``pkg.mod`` is patched on import) holds the wrapper, so
# restore looks through every loaded module for it.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from leakscope.live.methods import MethodSpec

#: builds the replacement function from (spec, original function)
WrapperFactory = Callable[[MethodSpec, Callable[..., Any]], Callable[..., Any]]


@dataclasses.dataclass
class _Patched:
    cls: type
    name: str
    #: what ``cls.__dict__`` held before (None: the method was inherited)
    own: Any


@dataclasses.dataclass
class _PatchedGlobal:
    """A function replaced in one module's namespace (NOTE [Patching a function])."""

    namespace: dict[str, Any]
    name: str
    original: Any
    wrapper: Any


def _close(name: str, module: types.ModuleType) -> str:
    """``; did you mean 'HistoryEngine'?`` from the module's own names, or nothing."""
    names = [n for n in vars(module) if isinstance(n, str) and not n.startswith("__")]
    close = difflib.get_close_matches(name, names, n=3)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


class Patcher:
    """Patch each spec's method with the wrapper the factory builds; restore exactly."""

    def __init__(self, specs: Sequence[MethodSpec], wrap: WrapperFactory) -> None:
        self.specs = tuple(specs)
        self.wrap = wrap
        self.pending: dict[str, list[MethodSpec]] = {}
        self.patched: list[_Patched] = []
        self.patched_globals: list[_PatchedGlobal] = []
        #: every method patched so far (``pkg.mod:Class.method``), kept after restore
        self.history: list[str] = []
        #: one line per spec whose module was imported but has no such method
        self.errors: list[str] = []
        #: called with that line when a module imported during the job lacks its method (the watch
        #: may end the job there: NOTE [A typo in --method fails before the job])
        self.on_error: Callable[[str], None] | None = None
        #: run once a module is imported (now, when it already is): module name -> callbacks
        self.callbacks: dict[str, list[Callable[[types.ModuleType], None]]] = {}
        self._finder: _PatchOnImport | None = None

    def when_imported(self, name: str, callback: Callable[[types.ModuleType], None]) -> None:
        """Call ``callback(module)`` once module ``name`` has executed (at :meth:`install` if it has)."""
        self.callbacks.setdefault(name, []).append(callback)

    def install(self) -> None:
        """Patch what is imported; hook the import of the rest."""
        for spec in self.specs:
            module = sys.modules.get(spec.module)
            if module is not None:
                self._patch(spec, module)
            else:
                self.pending.setdefault(spec.module, []).append(spec)
        for name in list(self.callbacks):
            module = sys.modules.get(name)
            if module is not None:
                for callback in self.callbacks.pop(name):
                    callback(module)
        if self.pending or self.callbacks:
            self._finder = _PatchOnImport(self)
            sys.meta_path.insert(0, self._finder)

    def loaded(self, module: types.ModuleType) -> None:
        """A hooked module finished executing: patch its methods."""
        before = len(self.errors)
        for spec in self.pending.pop(module.__name__, []):
            self._patch(spec, module)
        if len(self.errors) > before and self.on_error is not None:
            self.on_error(self.errors[-1])
        for callback in self.callbacks.pop(module.__name__, []):
            callback(module)

    def found(self) -> list[str]:
        """The methods patched so far (as ``pkg.mod:Class.method``), restored or not."""
        return list(self.history)

    def _patch(self, spec: MethodSpec, module: types.ModuleType) -> None:
        if spec.is_function:
            self._patch_function(spec, module)
            return
        owner: object = module
        for part in spec.cls:
            owner = getattr(owner, part, None)
            if owner is None:
                break
        if not isinstance(owner, type):
            self.errors.append(
                f"{spec.module} has no class {'.'.join(spec.cls)}{_close(spec.cls[-1], module)}"
            )
            return
        original = getattr(owner, spec.name, None)
        own = owner.__dict__.get(spec.name)
        if not isinstance(original, types.FunctionType) or isinstance(
            own, (staticmethod, classmethod)
        ):
            self.errors.append(f"{spec} is not a plain method")
            return
        setattr(owner, spec.name, self.wrap(spec, original))
        self.patched.append(_Patched(owner, spec.name, own))
        self.history.append(f"{owner.__module__}:{owner.__qualname__}.{spec.name}")

    def _patch_function(self, spec: MethodSpec, module: types.ModuleType) -> None:
        """NOTE [Patching a function]"""
        original = vars(module).get(spec.name)
        if not isinstance(original, types.FunctionType):
            what = "has no function" if original is None else "has no plain function"
            self.errors.append(f"{spec.module} {what} {spec.name}{_close(spec.name, module)}")
            return
        wrapper = self.wrap(spec, original)
        for other in list(sys.modules.values()):
            namespace = getattr(other, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if value is original:
                    namespace[name] = wrapper
                    self.patched_globals.append(_PatchedGlobal(namespace, name, original, wrapper))
        self.history.append(str(spec))

    def restore(self) -> None:
        """Every patched method back to its original object; the import hook removed."""
        for g in reversed(self.patched_globals):
            if g.namespace.get(g.name) is g.wrapper:
                g.namespace[g.name] = g.original
        # A module that imported the function by name after it was patched holds the wrapper too.
        originals = {id(g.wrapper): g.original for g in self.patched_globals}
        if originals:
            for module in list(sys.modules.values()):
                namespace = getattr(module, "__dict__", None)
                if isinstance(namespace, dict):
                    for name, value in list(namespace.items()):
                        if id(value) in originals and any(
                            value is g.wrapper for g in self.patched_globals
                        ):
                            namespace[name] = originals[id(value)]
        self.patched_globals.clear()
        for p in reversed(self.patched):
            if p.own is None:
                try:
                    delattr(p.cls, p.name)
                except AttributeError:
                    pass
            else:
                setattr(p.cls, p.name, p.own)
        self.patched.clear()
        self.callbacks.clear()
        if self._finder is not None:
            try:
                sys.meta_path.remove(self._finder)
            except ValueError:
                pass
            self._finder.patcher = None
            self._finder = None


class _PatchOnImport:
    """A ``sys.meta_path`` finder for the modules whose methods wait to be patched."""

    def __init__(self, patcher: Patcher) -> None:
        self.patcher: Patcher | None = patcher

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        patcher = self.patcher
        if patcher is None or (
            fullname not in patcher.pending and fullname not in patcher.callbacks
        ):
            return None
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, patcher)
        return spec

    def invalidate_caches(self) -> None:
        """Nothing cached."""


class _PatchingLoader:
    """The real loader, plus a patch once the module body ran (NOTE [Patching on import])."""

    def __init__(self, inner: Any, patcher: Patcher) -> None:
        self.inner = inner
        self.patcher = patcher

    def create_module(self, spec: Any) -> object:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        self.patcher.loaded(module)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


__all__ = ["Patcher", "WrapperFactory"]
