"""Which methods ``watch`` patches: ``pkg.mod:Class.method`` and ``pkg.mod:function`` specs, and the
built-in defaults.

Torch-free: the CLI parses ``--method`` before anything heavy is imported.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import sys
import types
from collections.abc import Mapping
from typing import Any

from leakscope.errors import UsageError

#: The step methods of the frameworks leakscope knows, watched when the job imports
#: them and no ``--method`` is given; a name that no installed release has is simply never
#: imported. Lightning's ``training_step`` is the user's own override, so the framework's
#: call site (the strategy's ``training_step``) is watched: ``Strategy`` from pytorch_lightning
#: 1.6 on, ``TrainingTypePlugin`` before. ``transformers.Trainer.training_step`` covers every
#: transformers 4.x and 5.x release and TRL's trainers built on it; TRL's PPOTrainer before
#: 0.12 is not a Trainer: one ``PPOTrainer.step`` runs every minibatch of a batch through
#: ``train_minibatch`` (0.4 to 0.11), and what a step keeps between minibatches is a leak inside
#: one ``step()``, so the minibatch is the call watched.
DEFAULT_METHODS = (
    "verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithLMHead.forward_step",
    "verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithValueHead.forward_step",
    "verl.workers.engine.megatron.transformer_impl:MegatronEngineWithLMHead.forward_step",
    "transformers.trainer:Trainer.training_step",
    "trl.trainer.ppo_trainer:PPOTrainer.train_minibatch",
    "lightning.pytorch.strategies.strategy:Strategy.training_step",
    "pytorch_lightning.strategies.strategy:Strategy.training_step",
    "pytorch_lightning.plugins.training_type.training_type_plugin:TrainingTypePlugin.training_step",
)

#: Methods whose ``self`` is not the object a user knows as the engine, and the attribute of
#: ``self`` that is (NOTE [The engine of a framework's step]).
ENGINE_ATTRIBUTES = {
    "lightning.pytorch.strategies.strategy:Strategy.training_step": "lightning_module",
    "pytorch_lightning.strategies.strategy:Strategy.training_step": "lightning_module",
    "pytorch_lightning.plugins.training_type.training_type_plugin:TrainingTypePlugin.training_step": "lightning_module",
}


#: the packages whose ``LightningModule`` subclasses :func:`uncovered_step` looks for
LIGHTNING_PACKAGES = ("pytorch_lightning", "lightning.pytorch")


def uncovered_step(modules: Mapping[str, types.ModuleType] | None = None) -> str | None:
    """When a job imported none of :data:`DEFAULT_METHODS` but runs a framework release whose call
    site of the step is not among them (pytorch_lightning before 1.4, whose loop calls the
    module's ``training_step`` through an accelerator): one line naming the release and the exact
    ``--method`` to give, the module's own step; else None. ``modules``: the job's ``sys.modules``.

    Reads only what the job loaded: the ``LightningModule`` subclasses that exist, and where
    their ``training_step`` is defined (a class of the script itself, ``__main__``, cannot be
    named by module, so one defined in an imported module comes first).
    """
    from leakscope.adapters.lightning import SUPPORTED, lightning_package, own_step, release

    loaded = sys.modules if modules is None else modules
    for package in LIGHTNING_PACKAGES:
        base = getattr(loaded.get(package), "LightningModule", None)
        if not isinstance(base, type):
            continue
        steps: list[str] = []
        for cls in _subclasses(base):
            method = own_step(cls)
            if method is not None and method not in steps and lightning_package(cls) == package:
                steps.append(method)
        head = f"the job runs {release(package, loaded)}, whose step is not among the built-in methods (they cover {SUPPORTED})"
        named = [method for method in steps if not method.startswith("__main__:")]
        if named:
            others = f" (or {', '.join(named[1:3])})" if len(named) > 1 else ""
            return f"{head}; watch its LightningModule's own step: --method {named[0]}{others}"
        if steps:
            name = steps[0].partition(":")[2]
            return (
                f"{head}; watch its LightningModule's own step, {name}, defined in the script itself: move the "
                f"class to a module the script imports and give --method that_module:{name}"
            )
        return f"{head}; watch its LightningModule's own step: --method pkg.mod:YourModule.training_step"
    return None


def _subclasses(base: type) -> list[type]:
    """Every subclass of ``base``, breadth first, each once (by identity)."""
    seen: list[type] = []
    ids: set[int] = set()
    stack: list[type] = list(type.__subclasses__(base))
    while stack:
        cls = stack.pop(0)
        if id(cls) not in ids:
            ids.add(id(cls))
            seen.append(cls)
            stack.extend(type.__subclasses__(cls))
    return seen


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """``pkg.mod:Class.method``: a method to watch, by where it is defined; ``cls`` is empty for a
    module-level function (``pkg.mod:function``)."""

    module: str
    cls: tuple[str, ...]
    name: str

    @property
    def is_function(self) -> bool:
        """A module-level function, not a method."""
        return not self.cls

    def __str__(self) -> str:
        return f"{self.module}:{'.'.join((*self.cls, self.name))}"


def parse_method(text: str) -> MethodSpec:
    """Parse ``pkg.mod:Class.method`` or ``pkg.mod:function``; a usage error names the expected shape."""
    module, sep, qualname = text.partition(":")
    parts = qualname.split(".") if qualname else []
    if (
        not sep
        or not module
        or not parts
        or not all(p.isidentifier() for p in parts)
        or not all(p.isidentifier() for p in module.split("."))
    ):
        raise UsageError(
            f"--method {text!r} is not 'pkg.module:Class.method' or 'pkg.module:function'; name the step by "
            "its module and name, e.g. --method my_pkg.engine:Engine.forward_step or --method my_pkg.loop:train_step"
        )
    return MethodSpec(module, tuple(parts[:-1]), parts[-1])


def unknown_in_source(spec: MethodSpec, search: list[str]) -> str | None:
    """Why ``spec`` cannot exist, read from its module's source without importing it, or None.

    NOTE [A typo in --method fails before the job]: importing the user's module to check its names
    would run its top-level code (and a real job's imports take minutes), so the module's file is
    found as the import system would and parsed: a class or function that the module never binds
    (no ``class``, ``def``, assignment or import of that name, no ``import *``, no module
    ``__getattr__``) cannot be there at import time either, and is refused before the job starts,
    with the names it does bind that come close. Anything the source cannot settle (a name bound
    by an import, a method a class may inherit, a module not found on the path the job starts
    with) is left to the job: the patcher reports it when the module is imported.
    """
    from leakscope.harness.target import module_file

    path = module_file(spec.module, search)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    body: list[ast.stmt] = tree.body
    owner = spec.module
    for depth, wanted in enumerate((*spec.cls, spec.name)):
        names, dynamic = _bound(body)
        if dynamic:
            return None
        if wanted not in names:
            kind = (
                "class" if depth < len(spec.cls) else ("function" if spec.is_function else "method")
            )
            return _no_such(owner, kind, wanted, names)
        node = names[wanted]
        if depth == len(spec.cls):
            return None
        if not isinstance(node, ast.ClassDef):
            return None  # bound another way (an import, an assignment): the job will tell
        if (
            node.decorator_list
            or node.keywords
            or any(not (isinstance(b, ast.Name) and b.id == "object") for b in node.bases)
        ):
            return None  # its methods may be inherited or added: only a plain class is settled here
        owner = f"{owner}:{'.'.join(spec.cls[: depth + 1])}"
        body = node.body
    return None


def _no_such(owner: str, kind: str, name: str, names: Mapping[str, object]) -> str:
    close = difflib.get_close_matches(name, [n for n in names if not n.startswith("__")], n=3)
    hint = (
        f"did you mean {', '.join(repr(c) for c in close)}?"
        if close
        else f"it defines: {', '.join(sorted(n for n in names if not n.startswith('_'))[:8]) or 'nothing public'}"
    )
    return f"--method: {owner} has no {kind} {name!r}; {hint}"


def _bound(body: list[Any]) -> tuple[dict[str, Any], bool]:
    """The names a module or class body binds (name -> its statement), and whether it may bind
    others the source does not show (``import *``, a module ``__getattr__``, ``globals()``/``setattr``)."""
    names: dict[str, Any] = {}
    dynamic = False
    stack = list(body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.setdefault(node.name, node)
            if node.name == "__getattr__":
                dynamic = True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    dynamic = True
                names.setdefault(alias.asname or alias.name.partition(".")[0], node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.setdefault(leaf.id, node)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, field, []) or [])
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
        elif isinstance(node, ast.Expr):
            text = ast.dump(node)
            if "globals" in text or "setattr" in text or "__dict__" in text:
                dynamic = True
        elif isinstance(node, ast.Match):
            dynamic = True
    return names, dynamic


def engine_of(spec: MethodSpec, self_: object) -> object:
    """The engine of a watched call whose ``self`` is ``self_``: ``self_`` itself, or for a
    framework's call site (:data:`ENGINE_ATTRIBUTES`) the user's object it runs.

    # NOTE [The engine of a framework's step]
    # ``engine.`` names the object a user wrote, as ``check`` does. For most steps that is the
    # ``self`` of the watched method (the verl engine, the ``transformers.Trainer``). Lightning's
    # ``training_step`` is the user's override on their ``LightningModule``, which cannot be
    # patched before the job defines it, so the framework's call site, the strategy's
    # ``training_step``, is watched; its engine is the module it calls (``strategy.lightning_module``),
    # so a finding reads ``engine.training_step_outputs[0]``, as ``check``'s Lightning adapter
    # names it, and its fix names ``self.training_step_outputs`` as the user's ``training_step``
    # spells it. The strategy and the trainer stay reachable through the module (``engine._trainer``).
    """
    attribute = ENGINE_ATTRIBUTES.get(str(spec))
    if attribute is not None:
        engine = getattr(self_, attribute, None)
        if engine is not None:
            return engine
    return self_


__all__ = [
    "DEFAULT_METHODS",
    "ENGINE_ATTRIBUTES",
    "MethodSpec",
    "engine_of",
    "parse_method",
    "uncovered_step",
]
