"""Read what an engine owns without running its code: the one place each kind of read is written.

leakscope reads objects an engine built (its attributes, its classes, the tensors
it keeps) after the engine's step returned, and promises never to run the
engine's code while it does (docs/security.md). Every read of an object leakscope
did not make goes through a helper here; nothing else spells the rule.

# NOTE [Reads that run no user code]
# Python runs user code on reads that look passive:
# - ``obj.__dict__``, ``vars(obj)`` and even ``object.__getattribute__(obj,
#   "__dict__")`` run a ``__dict__`` property on the class (a data descriptor on
#   the type wins over the interpreter's own ``__dict__`` getter);
# - ``isinstance(obj, C)`` reads ``obj.__class__`` (a property, or
#   ``__getattribute__``) whenever ``type(obj)`` is not a subclass of ``C``, and
#   runs ``C``'s metaclass ``__instancecheck__`` (``nn.Parameter``'s reads
#   ``_is_param`` through a tensor subclass's ``__getattr__``);
# - ``issubclass(tp, C)`` runs ``C``'s metaclass ``__subclasscheck__``: an ABC's
#   hashes ``tp`` (its metaclass's ``__hash__``) and its ``__subclasshook__`` may
#   read ``tp.__name__`` (``torch.autograd.graph.Node``'s does);
# - ``tp.__mro__``, ``tp.__dict__``, ``tp.__module__`` and ``getattr(tp, name)``
#   run ``tp``'s metaclass ``__getattribute__`` (and ``__getattr__`` on a miss),
#   and ``getattr`` runs the ``__get__`` of a descriptor it finds;
# - a dict or set keyed by an object (a type included) runs its ``__hash__``
#   and, on a collision, its ``__eq__``;
# - reading a tensor subclass's ``grad_fn``, ``shape`` or ``untyped_storage()``
#   calls its ``__torch_function__`` (torch's own C getter dispatches there
#   too), a subclass may shadow any of them with a property, and an op on a
#   wrapper subclass calls its ``__torch_dispatch__``.
# The helpers read through the interpreter's own descriptors instead:
# ``type.__dict__["__mro__"]`` and ``type.__dict__["__dict__"]`` for classes; the
# ``__dict__`` getter the class got from the interpreter (or the C API's
# ``PyObject_GenericGetDict`` when a property hides it) for instances; identity
# along the MRO for subclass tests; facts about a type cached by its identity;
# ``torch._C.TensorBase``'s C getters with torch functions and Python dispatch
# off for tensors. What still cannot be read is counted by the caller, never
# retried through the user's code.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from leakscope.holders import shorten

if TYPE_CHECKING:
    from torch import Tensor
    from torch.autograd.graph import Node

T = TypeVar("T")

_MRO = type.__dict__["__mro__"].__get__
_CLASS_DICT = type.__dict__["__dict__"].__get__
_NAME = type.__dict__["__name__"].__get__
_QUALNAME = type.__dict__["__qualname__"].__get__
_MODULE = type.__dict__["__module__"].__get__
_DICT_OFFSET = type.__dict__["__dictoffset__"].__get__

_MISSING: Any = object()


# -- classes ----------------------------------------------------------------------------------


def mro(tp: type) -> tuple[type, ...]:
    """``tp.__mro__`` as the interpreter stored it (no metaclass hook runs)."""
    try:
        found = _MRO(tp)
    except Exception:
        return (tp,)
    return found if type(found) is tuple else (tp,)


def class_dict(cls: type) -> Mapping[str, Any]:
    """``cls.__dict__`` (a read-only view of the class's own namespace), no metaclass hook run."""
    try:
        return _CLASS_DICT(cls)  # type: ignore[no-any-return]
    except Exception:
        return {}


def class_attr(
    tp: type, name: str, default: object = None, *, want: type | tuple[type, ...] | None = None
) -> Any:
    """The raw value ``name`` has on ``tp`` or the first base that defines it, with no descriptor's
    ``__get__`` run; with ``want``, the first such value of exactly one of those types."""
    for klass in mro(tp):
        value = class_dict(klass).get(name, _MISSING)
        if value is _MISSING:
            continue
        if want is None or is_exactly(value, want if type(want) is tuple else (want,)):  # type: ignore[arg-type]
            return value
    return default


def type_name(tp: type) -> str:
    """``tp.__name__``, read from the type itself."""
    try:
        name = _NAME(tp)
    except Exception:
        return "?"
    return name if type(name) is str else "?"


def type_qualname(tp: type) -> str:
    """``tp.__qualname__``, read from the type itself."""
    try:
        name = _QUALNAME(tp)
    except Exception:
        return type_name(tp)
    return name if type(name) is str else type_name(tp)


def type_module(tp: type) -> str:
    """``tp.__module__`` when it is a string (a class may set it to anything), else ``""``."""
    try:
        module = _MODULE(tp)
    except Exception:
        return ""
    return module if type(module) is str else ""


def is_subtype(tp: type, base: type | tuple[type, ...]) -> bool:
    """``issubclass(tp, base)`` with no metaclass hook of either run: real subclasses only
    (an ABC's registered virtual subclasses are not)."""
    bases: tuple[type, ...] = base if type(base) is tuple else (base,)  # type: ignore[assignment]
    for b in bases:
        if type(b) is type:
            # ``type``'s own check compares the stored MRO in C; nothing of ``tp`` runs.
            if issubclass(tp, b):
                return True
        elif any(klass is b for klass in mro(tp)):
            return True
    return False


def is_exactly(obj: object, kinds: tuple[type, ...]) -> bool:
    """``type(obj) in kinds`` by identity (``in`` would compare types with ``==``: a metaclass's
    ``__eq__``)."""
    tp = type(obj)
    return any(tp is kind for kind in kinds)


def is_instance(obj: object, base: type | tuple[type, ...]) -> bool:
    """``isinstance(obj, base)`` decided by ``type(obj)`` alone (never ``obj.__class__``)."""
    return is_subtype(type(obj), base)


class TypeFacts(Generic[T]):
    """Facts about a type, computed once per type by ``compute``.

    Keyed by the type's identity (hashing a type runs its metaclass's ``__hash__``),
    each entry dropped when its type dies, so no class is kept alive.
    """

    def __init__(self, compute: Callable[[type], T]) -> None:
        self.compute = compute
        self.entries: dict[int, tuple[weakref.ref[type], T]] = {}

    def __call__(self, tp: type) -> T:
        key = id(tp)
        entry = self.entries.get(key)
        if entry is not None and entry[0]() is tp:
            return entry[1]
        value = self.compute(tp)
        entries = self.entries

        def forget(_: object, key: int = key) -> None:
            entries.pop(key, None)

        try:
            ref = weakref.ref(tp, forget)
        except TypeError:
            return value  # not weak-referenceable: computed each time
        entries[key] = (ref, value)
        return value


# -- instances --------------------------------------------------------------------------------


def _generic_get_dict() -> Callable[[Any], Any] | None:
    """The C API's ``PyObject_GenericGetDict``: the instance dict from the object's layout."""
    if _GENERIC:
        return _GENERIC[0]
    try:
        import ctypes

        fn = ctypes.pythonapi.PyObject_GenericGetDict
        fn.restype = ctypes.py_object
        fn.argtypes = [ctypes.py_object, ctypes.c_void_p]

        def get(obj: object) -> Any:
            return fn(obj, None)

        found: Callable[[Any], Any] | None = get
    except Exception:  # not CPython: no instance dict behind a property can be read
        found = None
    _GENERIC.append(found)
    return found


_GENERIC: list[Callable[[Any], Any] | None] = []


def _dict_getter(tp: type) -> Callable[[Any], Any] | None:
    """How instances of ``tp`` give their ``__dict__`` without running a class's code."""
    for klass in mro(tp):
        descr = class_dict(klass).get("__dict__", _MISSING)
        if descr is _MISSING:
            continue
        if is_exactly(descr, (types.GetSetDescriptorType, types.MemberDescriptorType)):
            return descr.__get__  # type: ignore[no-any-return]
        break  # a property (or anything else) hides the interpreter's getter
    try:
        has_dict = _DICT_OFFSET(tp) != 0
    except Exception:
        has_dict = False
    return _generic_get_dict() if has_dict else None


_dict_getters: TypeFacts[Callable[[Any], Any] | None] = TypeFacts(_dict_getter)


def instance_dict(obj: object) -> dict[str, Any] | None:
    """The object's own ``__dict__`` (``self.x = v`` lands there), or None; no property,
    ``__getattribute__`` or ``__getattr__`` of its class runs."""
    getter = _dict_getters(type(obj))
    if getter is None:
        return None
    try:
        d = getter(obj)
    except Exception:
        return None
    return d if type(d) is dict else None


def thread_local_dict(obj: object) -> dict[str, Any] | None:
    """This thread's attributes of a ``threading.local()`` (the thread that ran the step): the C
    type's own getter picks the thread's dict, where the generic one sees none. None for any
    other object."""
    if not is_instance(obj, threading.local):
        return None
    try:
        local: Any = obj  # a threading.local, by its type
        d = threading.local.__getattribute__(local, "__dict__")
    except Exception:
        return None
    return d if type(d) is dict else None


def slot_values(obj: object) -> Iterator[tuple[str, Any, Any]]:
    """``(name, value, descriptor)`` for each set ``__slots__`` member of ``obj``, read by the
    slot's own member descriptor. A ``__slots__`` that is not a string, tuple, list or dict (set
    on the class after it was made) raises ``TypeError``: listing it could run its code, and the
    caller counts what it cannot read."""
    tp = type(obj)
    for klass in mro(tp):
        namespace = class_dict(klass)
        slots = namespace.get("__slots__")
        if type(slots) is str:
            names: tuple[object, ...] = (slots,)
        elif is_exactly(slots, (tuple, list)):
            names = tuple(slots)  # type: ignore[arg-type]
        elif type(slots) is dict:
            names = tuple(dict.keys(slots))
        elif slots is None:
            continue
        else:
            raise TypeError(
                f"{type_name(klass)}.__slots__ is a {type_name(type(slots))}, not a list of names"
            )
        for name in names:
            if type(name) is not str or name in ("__dict__", "__weakref__"):
                continue
            stored = name
            if name.startswith("__") and not name.endswith("__"):
                stored = f"_{type_name(klass).lstrip('_')}{name}"  # private names are mangled
            descr = namespace.get(stored)
            if type(descr) is not types.MemberDescriptorType:
                continue
            try:
                value = descr.__get__(obj, klass)
            except AttributeError:  # an unset slot holds nothing
                continue
            yield name, value, descr


def plain_hash(obj: object) -> bool:
    """Whether hashing ``obj`` (to find or set it as a dict key) runs only the interpreter's and
    torch's code: builtin scalars, tuples of them, weak references to such objects, and objects
    whose class keeps ``object``'s (or ``torch.Tensor``'s) identity hash.

    Equality is not asked: a dict compares a key by identity before ``__eq__``, and an
    identity hash is equal only for the same object.
    """
    tp = type(obj)
    if any(tp is scalar for scalar in _SCALARS):
        return True
    if tp is tuple:
        items: tuple[object, ...] = obj  # type: ignore[assignment]
        return all(plain_hash(item) for item in tuple.__iter__(items))
    if tp is weakref.ref:
        referent = obj()  # type: ignore[operator]
        return referent is None or plain_hash(referent)
    hash_fn = class_attr(tp, "__hash__")
    if hash_fn is object.__dict__["__hash__"]:
        return True
    torch = sys.modules.get("torch")  # a tensor key exists only once torch is loaded
    return torch is not None and hash_fn is class_dict(torch.Tensor).get("__hash__")


_SCALARS = (str, int, float, bool, bytes, complex, type(None))


def maxlen(container: object) -> int | None:
    """The ``maxlen`` of a deque (read by ``deque``'s own getter), else None."""
    if not is_instance(container, deque):
        return None
    return _DEQUE_MAXLEN(container)  # type: ignore[no-any-return]


_DEQUE_MAXLEN = deque.__dict__["maxlen"].__get__


# -- modules ----------------------------------------------------------------------------------

_MODULE_DICT: Callable[[Any], Any] = vars(types.ModuleType)["__dict__"].__get__


def module_dict(obj: object) -> dict[str, Any] | None:
    """A module's namespace, read from the module object's own slot; None for anything that is
    not a module (``sys.modules`` holds what a job put there: Cython registers plain objects) or
    whose namespace cannot be read. No ``__getattr__``, ``__getattribute__`` or ``__dict__``
    property of a module subclass runs."""
    if not is_instance(obj, types.ModuleType):
        return None
    try:
        d = _MODULE_DICT(obj)
    except Exception:
        return None
    return d if type(d) is dict else None


def as_module(obj: object) -> types.ModuleType | None:
    """``obj`` when it is a module whose namespace can be read (:func:`module_dict`), else None."""
    return obj if module_dict(obj) is not None else None  # type: ignore[return-value]


def module_name(obj: object) -> str:
    """A module's ``__name__`` from its namespace when it is a string, else ``""`` (not a module,
    or a name it set to something else)."""
    d = module_dict(obj)
    name = d.get("__name__") if d is not None else None
    return name if type(name) is str else ""


def module_file(obj: object) -> str | None:
    """A module's ``__file__`` from its namespace when it is a string, else None."""
    d = module_dict(obj)
    file = d.get("__file__") if d is not None else None
    return file if type(file) is str else None


def loaded_modules() -> list[tuple[str, types.ModuleType]]:
    """``(name, module)`` for every real module in ``sys.modules`` whose namespace can be read:
    a job's plain objects (``sys.modules['x'] = object()``), ``None`` entries and modules whose
    namespace is not a dict are left out. The key is the name; never ``module.__name__``."""
    out: list[tuple[str, types.ModuleType]] = []
    for name, found in list(sys.modules.items()):
        module = as_module(found)
        if type(name) is str and module is not None:
            out.append((name, module))
    return out


# -- tensors ----------------------------------------------------------------------------------


class _Tensors:
    """torch's C getters, resolved once (importing this module stays torch-free)."""

    def __init__(self) -> None:
        import torch

        base = torch._C.TensorBase
        getters = base.__dict__
        self.tensor = torch.Tensor
        self.parameter = torch.nn.Parameter
        self.base = base
        self.off = (
            torch._C.DisableTorchFunction,
            getattr(torch._C, "_DisableTorchDispatch", contextlib.nullcontext),
        )
        self.grad_fn = getters["grad_fn"].__get__
        self.requires_grad = getters["requires_grad"].__get__
        self.grad = getters["grad"].__get__
        self.is_leaf = getters["is_leaf"].__get__
        self.version = getters["_version"].__get__
        self.shape = getters["shape"].__get__
        self.dtype = getters["dtype"].__get__
        self.device = getters["device"].__get__
        self.hooks = tuple(
            (name, getters[name].__get__)
            for name in ("_backward_hooks", "_post_accumulate_grad_hooks")
            if name in getters
        )
        self.function_mode_on = torch._C._is_torch_function_mode_enabled
        self.function_base = torch._C._FunctionBase
        self.cpp_nodes = torch._C._functions.__dict__


_TENSORS: list[_Tensors] = []


def _t() -> _Tensors:
    if not _TENSORS:
        _TENSORS.append(_Tensors())
    return _TENSORS[0]


@contextlib.contextmanager
def torch_code_off() -> Iterator[None]:
    """Tensor reads inside run no subclass or mode code: torch functions (``__torch_function__``,
    function modes) and Python dispatch (``__torch_dispatch__``) are off."""
    functions, dispatch = _t().off
    with functions(), dispatch():
        yield


def _node_type(tp: type) -> bool:
    """Whether ``tp`` is an autograd graph node type: a custom Function's backward (a
    ``torch._C._FunctionBase``) or one of torch's C++ nodes (a type ``torch._C._functions``
    names), as ``torch.autograd.graph.Node``'s subclass hook decides, without running it."""
    t = _t()
    if is_subtype(tp, t.function_base):
        return True
    return t.cpp_nodes.get(type_name(tp)) is tp


is_node_type = TypeFacts(_node_type)


def is_node(obj: object) -> bool:
    """An autograd graph node (``loss.grad_fn``, a GradientEdge's ``.node``), by type alone.

    Never ``isinstance(obj, Node)``: ``Node`` is an ABC, whose check hashes the type and whose
    ``__subclasshook__`` reads ``type(obj).__name__`` through the metaclass. C++ nodes report
    ``__module__ == 'builtins'`` on torch 2.13, so the module name cannot decide it.
    """
    return is_node_type(type(obj))


_NOT_TENSOR, _TENSOR, _PARAMETER, _SUBCLASS = range(4)


def _tensor_kind(tp: type) -> int:
    t = _t()
    if tp is t.tensor:
        return _TENSOR
    if is_subtype(tp, t.parameter):
        return _PARAMETER
    return _SUBCLASS if is_subtype(tp, t.tensor) else _NOT_TENSOR


_tensor_kinds = TypeFacts(_tensor_kind)


def is_tensor(obj: object) -> bool:
    """A ``torch.Tensor`` (subclasses included), by type alone."""
    return _tensor_kinds(type(obj)) != _NOT_TENSOR


def is_parameter(obj: object) -> bool:
    """An ``nn.Parameter``, as ``isinstance`` would say, without its ``__instancecheck__``: a
    Parameter subclass, or a tensor subclass that ``nn.Parameter(t)`` marked ``_is_param``."""
    kind = _tensor_kinds(type(obj))
    if kind == _PARAMETER:
        return True
    if kind != _SUBCLASS:
        return False
    d = instance_dict(obj)
    return d is not None and d.get("_is_param") is True


def is_plain_tensor(obj: object) -> bool:
    """A tensor that is not a Parameter."""
    kind = _tensor_kinds(type(obj))
    return kind == _TENSOR or (kind == _SUBCLASS and not is_parameter(obj))


def tensor_read(obj: object, read: Callable[[Any], T], *, op: bool = False) -> T:
    """``read(obj)`` with torch functions and Python dispatch off (raises what ``read`` raises).

    A getter on an exact ``torch.Tensor`` or ``nn.Parameter`` runs no Python unless a torch-function
    mode is on, so there it is called as is (entering the two guards costs more than the read;
    a 1M-node graph reads a gradient per leaf). ``op``: ``read`` runs an operator (``detach``),
    which a dispatch mode could see: always guarded.
    """
    t = _t()
    tp = type(obj)
    if not op and (tp is t.tensor or tp is t.parameter) and not t.function_mode_on():
        return read(obj)
    functions, dispatch = t.off
    with functions(), dispatch():
        return read(obj)


def grad_fn(t: object) -> Node | None:
    """``t.grad_fn`` (None for a leaf, or when it cannot be read)."""
    try:
        found: Node | None = tensor_read(t, _t().grad_fn)
    except Exception:
        return None
    return found


def requires_grad(t: object) -> bool:
    try:
        return bool(tensor_read(t, _t().requires_grad))
    except Exception:
        return False


def grad(t: object) -> Tensor | None:
    """``t.grad`` (read only on leaves, as torch warns otherwise), or None."""
    try:
        found: Tensor | None = tensor_read(t, _t().grad)
    except Exception:
        return None
    return found


def is_leaf(t: object) -> bool:
    try:
        return bool(tensor_read(t, _t().is_leaf))
    except Exception:
        return True


def version(t: object) -> int:
    """``t._version``, the in-place write counter (0 when it cannot be read)."""
    try:
        return int(tensor_read(t, _t().version))
    except Exception:
        return 0


def shape(t: object) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in tensor_read(t, _t().shape))
    except Exception:
        return ()


def dtype(t: object) -> str:
    """``"float32"``, or ``"?"``."""
    try:
        return str(tensor_read(t, _t().dtype)).replace("torch.", "")
    except Exception:
        return "?"


def device(t: object) -> str:
    """``"cpu"``, ``"cuda:0"``, or ``"?"``."""
    try:
        return str(tensor_read(t, _t().device))
    except Exception:
        return "?"


def storage(t: object) -> tuple[str, int, int] | None:
    """``(device, data pointer, bytes)`` of the whole storage behind ``t`` (views share it), or
    None when it has none to read (a wrapper subclass, a meta tensor)."""
    tensors = _t()

    def read(x: Any) -> tuple[str, int, int]:
        s = tensors.base.untyped_storage(x)
        return str(tensors.device(x)), int(s.data_ptr()), int(s.nbytes())

    try:
        found = tensor_read(t, read)
    except Exception:
        return None
    return found if found[1] != 0 else None


def numel_bytes(t: object) -> int:
    """``t.numel() * t.element_size()``, or 0."""
    base = _t().base
    try:
        return tensor_read(t, lambda x: int(base.numel(x) * base.element_size(x)))
    except Exception:
        return 0


def tensor_hooks(t: object) -> list[tuple[str, dict[Any, Any]]]:
    """``(name, hooks)`` for the Python hook dicts registered on ``t`` (``register_hook``,
    ``register_post_accumulate_grad_hook``)."""
    out = []
    for name, getter in _t().hooks:
        try:
            hooks = tensor_read(t, getter)
        except Exception:
            continue
        if is_instance(hooks, dict) and dict.__len__(hooks):
            out.append((name, hooks))
    return out


def detached(t: object) -> Tensor | None:
    """A detached plain copy of ``t``'s view (``t.detach()`` without the subclass's code), or None."""
    try:
        return tensor_read(t, _t().base.detach, op=True)
    except Exception:
        return None


def detach_in_place(t: object) -> bool:
    """``t.detach_()`` without the subclass's code; whether it worked."""
    try:
        tensor_read(t, _t().base.detach_, op=True)
    except Exception:
        return False
    return True


# -- naming what failed -----------------------------------------------------------------------

#: where the walk first named each live tensor of a subclass: ``{id: (weakref, path)}``
_SUBCLASS_PATHS: dict[int, tuple[weakref.ref[Any], str]] = {}


def remember_path(t: object, path: Callable[[], object]) -> None:
    """Note where the walk named ``t`` when it is a tensor subclass's (the first place only), so an
    error its code raises later can be named (:func:`subclass_failure`). Plain tensors, whose code
    is torch's, are not noted; nothing is kept alive."""
    if _tensor_kinds(type(t)) != _SUBCLASS:
        return
    key = id(t)
    entry = _SUBCLASS_PATHS.get(key)
    if entry is not None and entry[0]() is t:
        return

    def forget(_: object, key: int = key) -> None:
        _SUBCLASS_PATHS.pop(key, None)

    try:
        ref = weakref.ref(t, forget)
    except TypeError:
        return
    _SUBCLASS_PATHS[key] = (ref, str(path()))


def _path_of(obj: object) -> str | None:
    entry = _SUBCLASS_PATHS.get(id(obj))
    return entry[1] if entry is not None and entry[0]() is obj else None


def subclass_failure(exc: BaseException) -> tuple[str, str, str | None] | None:
    """``(subclass name, method, path)`` when ``exc`` was raised inside a method of a tensor subclass
    defined outside torch (its ``__torch_function__``, a property, ``__getattr__``), else None.

    Read from the traceback's frames (their ``self``, ``cls`` and ``args`` locals, by type),
    never by calling anything of the subclass; the path is where the walk named the tensor
    (None when it did not).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tensor = torch.Tensor
    found: tuple[str, str, str | None] | None = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        code = frame.f_code
        params = code.co_varnames[: code.co_argcount]
        local = frame.f_locals
        owner: Any = None
        subjects: list[Any] = []
        if "cls" in params and is_instance(local.get("cls"), type):
            owner = local["cls"]
            args: Any = local.get("args")
            subjects = list(tuple.__iter__(args)) if is_instance(args, tuple) else []
        elif "self" in params:
            owner = type(local.get("self"))
            subjects = [local.get("self")]
        if owner is not None and owner is not tensor and is_subtype(owner, tensor):
            module = type_module(owner)
            if not (module == "torch" or module.startswith("torch.")):
                path = next((p for p in map(_path_of, subjects) if p is not None), None)
                found = (type_qualname(owner), code.co_name, path)
        tb = tb.tb_next
    return found


def error_line(exc: BaseException, where: str, *, short: bool = False) -> str:
    """How a read that failed is reported, once per check (the first of the errors counted):
    ``TypeError: <its first line> at engine.x``; ``short``: that line cut to the length a holder
    path is shown at."""
    text = str(exc).strip().splitlines()
    first = (shorten(text[0]) if short else text[0]) if text else "(no message)"
    return f"{type(exc).__name__}: {first} at {where}"


__all__ = [
    "error_line",
    "TypeFacts",
    "as_module",
    "class_attr",
    "class_dict",
    "detach_in_place",
    "detached",
    "device",
    "dtype",
    "grad",
    "grad_fn",
    "instance_dict",
    "is_exactly",
    "is_instance",
    "is_leaf",
    "is_node",
    "is_node_type",
    "is_parameter",
    "is_plain_tensor",
    "is_subtype",
    "is_tensor",
    "loaded_modules",
    "maxlen",
    "module_dict",
    "module_file",
    "module_name",
    "mro",
    "numel_bytes",
    "remember_path",
    "plain_hash",
    "requires_grad",
    "shape",
    "slot_values",
    "storage",
    "subclass_failure",
    "tensor_hooks",
    "tensor_read",
    "torch_code_off",
    "type_module",
    "type_name",
    "type_qualname",
    "version",
]
