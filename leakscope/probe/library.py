"""What is library machinery and what is the user's: one policy for the walk, the trial and source lines.

A holder is named from the user's objects. Library packages (torch, the
standard library's machinery, leakscope itself) are not entered by the typed
walk and their frames are never "the line to change". Two exceptions keep the
policy honest:

- leakscope's built-in engines (``leakscope.models.engines``) are engines like
  any user's: their objects are walked and their lines are user lines;
- the generic fallback of the walk (see :func:`leakscope.probe.walk.walk`,
  ``generic=True``) enters objects of library types a user owns (a logging
  handler, a ``torch.distributions`` object, a ``threading.local``), and skips
  only leakscope's machinery and :func:`is_interpreter_internal` objects.

Matching is by the whole first component of a module name: a user module
``reward_model`` or ``replay`` is not ``re``, and ``iox`` is not ``io``. A type's
module is read from the type itself (:func:`leakscope.probe.safe.type_module`),
never through its metaclass.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from leakscope.probe.safe import type_module

#: Top-level packages whose objects are library machinery, not engine state.
LIBRARY_PACKAGES = frozenset(
    {
        "torch",
        "tensordict",
        "leakscope",
        "logging",
        "threading",
        "_thread",
        "socket",
        "io",
        "_io",
        "ssl",
        "asyncio",
        "multiprocessing",
        "concurrent",
        "subprocess",
        "re",
        "typing",
        "inspect",
        "ast",
        "weakref",
        "_weakref",
        "numpy",
        "enum",
        "typer",
        "click",
        "rich",
        "_pytest",
        "pytest",
        "pluggy",
        "builtins",
        "importlib",
        "tempfile",
        "contextlib",
        "transformers",
        "peft",
        "accelerate",
    }
)
#: leakscope modules that are engines, checked like user code
USER_MODULES_IN_LEAKSCOPE = frozenset({"leakscope.models.engines"})
#: torch sub-packages whose objects a user creates and keeps (``self.dist = Categorical(logits=x)``):
#: the generic walk enters them; every other torch object is torch's own machinery
TORCH_USER_PACKAGES = ("torch.distributions", "torch.optim", "torch.nn.modules", "torch.utils.data")

_LEAKSCOPE_DIR = str(Path(__file__).resolve().parent.parent)
_USER_FILES_IN_LEAKSCOPE = {str(Path(_LEAKSCOPE_DIR, "models", "engines.py"))}
_STDLIB = {
    str(Path(p).resolve())
    for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")}
    if p
}
#: site-packages directories of library packages (frames there are not the user's)
_LIBRARY_DIRS = tuple(f"{os.sep}{name}{os.sep}" for name in sorted(LIBRARY_PACKAGES))


def is_library_module(name: str) -> bool:
    """A module of a library package (by its whole top-level name); leakscope's engines are not."""
    if name in USER_MODULES_IN_LEAKSCOPE:
        return False
    return name.partition(".")[0] in LIBRARY_PACKAGES


#: packages whose module state never holds a user's graph (tools and the heavy machinery the
#: walk would only spend its object budget on)
_STATELESS_PACKAGES = frozenset(
    {
        "torch",
        "tensordict",
        "leakscope",
        "_pytest",
        "pytest",
        "pluggy",
        "typer",
        "click",
        "rich",
        "numpy",
        "sympy",
        "setuptools",
        "pkg_resources",
        "_distutils_hack",
        "pip",
        "mpmath",
        "jinja2",
        "markupsafe",
        "filelock",
        "fsspec",
        "networkx",
        "hypothesis",
        "typing_extensions",
        "__main__",
        "__mp_main__",
    }
)


def is_state_module(name: str) -> bool:
    """A loaded module whose globals the last-resort search walks (NOTE [Every loaded module]):
    any package but the standard library, torch and the tools above; libraries included (a
    logging library's current run and its history rows, ``library.run.history``)."""

    top = name.partition(".")[0]
    if top in _STATELESS_PACKAGES or top in sys.stdlib_module_names or top.startswith("_"):
        return False
    return True


def is_job_frame_module(name: str) -> bool:
    """Whether a running frame of module ``name`` can hold the job's loop variables: the script,
    the user's modules and installed frameworks that run the loop (a Trainer's ``tr_loss``); not
    the standard library, torch, leakscope's machinery or the tools of :data:`_STATELESS_PACKAGES`."""

    if name in USER_MODULES_IN_LEAKSCOPE or name in ("__main__", "__mp_main__"):
        return True
    top = name.partition(".")[0]
    return bool(top) and top not in _STATELESS_PACKAGES and top not in sys.stdlib_module_names


@functools.lru_cache(maxsize=8192)  # asked of every loaded module at every look
def is_project_module(name: str, file: str | None) -> bool:
    """A module of the job's own project (imported from a file that is neither the standard
    library's nor an installed package's, nor leakscope's machinery): its globals are walked at
    every look, as the script's are (``helpers.REGISTRY``, ``metrics.HISTORY``)."""
    if file is None or not is_job_frame_module(name) or name in ("__main__", "__mp_main__"):
        return False
    return not is_installed_file(file) and not is_library_file(file)


#: an installed package's file (site-packages or dist-packages)
_INSTALLED = re.compile(r"[/\\](site|dist)-packages[/\\]")


def is_installed_file(filename: str) -> bool:
    """A file of an installed package (not the user's project, not the standard library)."""
    try:
        resolved = os.path.realpath(filename)
    except OSError:
        resolved = filename
    return bool(_INSTALLED.search(resolved))


def is_user_file_of(filename: str, owners: Iterable[object]) -> bool:
    """Whether a line of ``filename`` can be the one to change for a holder of ``owners`` (modules,
    or None): never a library's; an installed package's only when it is one of the owners' files
    (a framework trainer the user subclasses), else the user's own code."""
    if is_library_file(filename):
        return False
    if not is_installed_file(filename):
        return True
    resolved = os.path.realpath(filename)
    files = {
        os.path.realpath(f)
        for f in (getattr(m, "__file__", None) for m in owners)
        if isinstance(f, str)
    }
    return resolved in files


def is_library_type(tp: type) -> bool:
    """Objects of this type are library machinery for the typed walk.

    ``torch.nn`` modules are walked by their own rule (parameters, buffers, hooks).
    """
    module = type_module(tp)
    if module.startswith("torch.nn.modules"):
        return False
    return is_library_module(module)


def is_leakscope_machinery(tp: type) -> bool:
    """leakscope's own objects (its trial, probes, evidence), never a holder; its engines are."""
    module = type_module(tp)
    return (
        module == "leakscope" or module.startswith("leakscope.")
    ) and module not in USER_MODULES_IN_LEAKSCOPE


def is_interpreter_internal(tp: type) -> bool:
    """Objects a user cannot touch: torch's C++-backed machinery and leakscope's own.

    The generic walk enters everything else, library types included.
    """
    if is_leakscope_machinery(tp):
        return True
    module = type_module(tp)
    if module == "torch" or module.startswith("torch."):
        return not module.startswith(TORCH_USER_PACKAGES)
    return False


def is_leakscope_machinery_file(filename: str) -> bool:
    """A file of leakscope's own machinery (not its built-in engines)."""
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        resolved = filename
    return resolved.startswith(_LEAKSCOPE_DIR + os.sep) and resolved not in _USER_FILES_IN_LEAKSCOPE


def is_library_file(filename: str) -> bool:
    """True for frames the user cannot change: stdlib, library packages, leakscope itself."""
    if not filename or filename.startswith("<"):
        return True
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        resolved = filename
    if resolved in _USER_FILES_IN_LEAKSCOPE:
        return False
    if resolved.startswith(_LEAKSCOPE_DIR + os.sep):
        return True
    if "site-packages" not in resolved and any(resolved.startswith(s + os.sep) for s in _STDLIB):
        return True
    return "site-packages" in resolved and any(part in resolved for part in _LIBRARY_DIRS)


__all__ = [
    "LIBRARY_PACKAGES",
    "is_installed_file",
    "is_job_frame_module",
    "is_project_module",
    "is_state_module",
    "is_user_file_of",
    "TORCH_USER_PACKAGES",
    "is_interpreter_internal",
    "is_leakscope_machinery",
    "is_leakscope_machinery_file",
    "is_library_file",
    "is_library_module",
    "is_library_type",
]
