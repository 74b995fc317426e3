"""Process-wide torch state an engine may change and not put back, captured and restored.

An engine's ``__init__`` or step can switch the default dtype, leave anomaly
mode or grad mode changed, or enter a ``saved_tensors_hooks`` context and never
leave it. In one process, the next target would then be checked under that
state (a pack hook that returns its tensor keeps every later graph alive, so a
clean engine would be reported leaking). :func:`torch_state` puts the state
back after each mode and says what the engine had changed, so the in-process
library stays honest too; the isolated CLI additionally runs each target in its
own process (see ``leakscope.runner.isolation``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any


def _hook_stack() -> list[tuple[Any, Any]]:
    """The default saved-tensor hooks, outermost first (read by popping and pushing back)."""
    import torch

    autograd = torch._C._autograd
    stack: list[tuple[Any, Any]] = []
    while autograd._top_saved_tensors_default_hooks(True) is not None:
        stack.append(autograd._top_saved_tensors_default_hooks(True))
        autograd._pop_saved_tensors_default_hooks()
    stack.reverse()
    for pack, unpack in stack:
        autograd._push_saved_tensors_default_hooks(pack, unpack)
    return stack


def _set_hook_stack(stack: list[tuple[Any, Any]]) -> None:
    import torch

    autograd = torch._C._autograd
    while autograd._top_saved_tensors_default_hooks(True) is not None:
        autograd._pop_saved_tensors_default_hooks()
    for pack, unpack in stack:
        autograd._push_saved_tensors_default_hooks(pack, unpack)


@dataclasses.dataclass
class TorchState:
    """A snapshot of the process-wide settings an engine can leave changed."""

    grad_enabled: bool
    anomaly: tuple[bool, bool]
    default_dtype: Any
    default_device: Any
    deterministic: tuple[bool, bool]
    hooks: list[tuple[Any, Any]]

    @classmethod
    def capture(cls) -> TorchState:
        import torch

        return cls(
            grad_enabled=torch.is_grad_enabled(),
            anomaly=(torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            default_dtype=torch.get_default_dtype(),
            default_device=torch.get_default_device(),
            deterministic=(
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            hooks=_hook_stack(),
        )

    def restore(self) -> list[str]:
        """Put this snapshot back; describe each setting that had changed."""
        import torch

        now = TorchState.capture()
        changed = []
        if now.hooks != self.hooks:
            extra = len(now.hooks) - len(self.hooks)
            what = (
                f"{extra} saved_tensors_hooks context(s) entered and never exited"
                if extra > 0
                else "the saved_tensors_hooks stack changed"
            )
            changed.append(what)
            _set_hook_stack(self.hooks)
        if now.default_dtype != self.default_dtype:
            changed.append(f"the default dtype set to {now.default_dtype}")
            torch.set_default_dtype(self.default_dtype)
        if now.default_device != self.default_device:
            changed.append(f"the default device set to {now.default_device}")
            torch.set_default_device(self.default_device)
        if now.anomaly != self.anomaly:
            changed.append(f"anomaly mode {'on' if now.anomaly[0] else 'off'}")
            torch.autograd.set_detect_anomaly(*self.anomaly)
        if now.grad_enabled != self.grad_enabled:
            changed.append(f"grad mode {'on' if now.grad_enabled else 'off'}")
            torch.set_grad_enabled(self.grad_enabled)
        if now.deterministic != self.deterministic:
            changed.append("deterministic algorithms switched")
            torch.use_deterministic_algorithms(
                self.deterministic[0], warn_only=self.deterministic[1]
            )
        return changed


@contextlib.contextmanager
def torch_state(changed: list[str]) -> Iterator[None]:
    """Restore torch's process-wide state on exit; append what had changed to ``changed``."""
    state = TorchState.capture()
    try:
        yield
    finally:
        changed.extend(state.restore())


def warning_for(changed: list[str]) -> str:
    """The one-line warning for a result whose engine left state changed."""
    return (
        "the engine left process-wide torch state changed: "
        + ", ".join(changed)
        + "; leakscope restored it, but the engine's other callers will run under it: "
        "use context managers (with torch.autograd.graph.saved_tensors_hooks(...):) and restore settings"
    )
