"""The built-in adapter for verl's FSDP engines (``FSDPEngineWithLMHead``, ``FSDPEngineWithValueHead``).

verl's engines cannot be built as ``Engine(model)``: ``__init__`` wants model,
engine, optimizer and checkpoint configs, a device mesh and GPUs. This adapter
builds them the way verl's own CPU regression test for issue 6698 does: skip
``__init__`` and set the attributes ``forward_step`` reads. Everything that runs
is then verl's real code: ``forward_step``, ``prepare_model_inputs`` and
``prepare_model_outputs`` on the padded, no-sequence-parallel path (verl's
``use_remove_padding=False``), the value head's ``prepare_model_outputs`` for
the critic, and ``forward_backward_batch`` for ``--micro-batches``.

What is stubbed, and why (docs/adapters.md keeps the same list):

- ``__init__`` is skipped (``object.__new__``): it needs HF model/engine/
  optimizer/checkpoint configs, a device mesh and GPUs. The attributes it
  would set and ``forward_step``/``forward_backward_batch`` read are set by
  :func:`_set_engine_attributes`, with verl's own default
  ``FSDPEngineConfig()`` as ``engine_config``.
- No FSDP wrapping: ``engine.module`` is leakscope's tiny model itself. The
  retention does not depend on sharding (the leaky tensors are the engine's
  outputs), and verl's FSDP setup needs its configs and checkpoint loading.
- ``_autocast_dtype = float32``: ``forward_step`` then skips
  ``torch.autocast(device_type=...)``, as verl does for fp32 params.
- verl >= 0.9 resolves its device helpers through a platform singleton that
  falls back to CUDA on a CPU-only machine (``get_device_id()`` then raises).
  :func:`use_cpu_platform` installs a CPU platform through verl's public
  ``set_platform`` (a subclass of its CUDA platform that answers ``"cpu"``).
  verl 0.8 already answers ``"cpu"`` and needs nothing.
- The critic's model: verl's critic is a token-classification model with one
  label. :class:`ValueHeadModel` puts a ``Linear(vocab, 1)`` score layer on
  top of the tiny LM so that ``output.logits`` is ``[B, S, 1]``.
- The loss function is leakscope's (:meth:`VerlFSDPAdapter.loss_function`),
  called exactly as verl's policy and value losses are; with ``entropy_coeff``
  it subtracts ``entropy_coeff * mean(entropy)`` as verl's policy loss does.

# NOTE [verl's real configuration]
# The step runs with verl 0.8.0's defaults for the actor update
# (``trainer/config/actor/actor.yaml``): ``calculate_entropy: false`` and
# ``entropy_coeff: 0``, and the trainer passes ``calculate_entropy or
# entropy_coeff != 0`` to ``update_actor``. So by default no entropy branch
# is built: the 6698 leak keeps exactly the input leaf and its grad, as in the
# real job (0.27 GiB per micro-batch upstream). The knobs that change what is
# retained are settings (``--set key=value``, ``[tool.leakscope] set``):
# ``calculate_entropy``, ``entropy_coeff``, ``entropy_checkpointing``
# (``FSDPEngineConfig``). ``use_fused_kernels`` needs verl's fused model
# forward (a patched HF model), which the tiny models do not have: it is
# refused with a one-line error. The gate (``check``) also runs the entropy
# branch (``calculate_entropy=true``) when it was not set, because a leak
# that only that branch shows is real for jobs that turn it on; ``estimate``
# runs the default job only.

Recognising a target imports nothing: it compares the names in the class's MRO.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from leakscope.harness.target import ResolvedTarget
from leakscope.probe import safe

VERL_MODULE = "verl.workers.engine.fsdp.transformer_impl"
ACTOR = "FSDPEngineWithLMHead"
CRITIC = "FSDPEngineWithValueHead"


def _family(obj: Any) -> set[str]:
    """Which verl engine classes ``obj`` is or derives from (by name: no import of verl; read from the
    classes themselves, never through a metaclass)."""
    if not safe.is_instance(obj, type):
        return set()
    names = {(safe.type_module(k), safe.type_name(k)) for k in safe.mro(obj)}
    return {name for module, name in names if module == VERL_MODULE and name in (ACTOR, CRITIC)}


def use_cpu_platform() -> str:
    """Make verl's device helpers answer ``"cpu"``; returns what was done (for docs and tests).

    verl 0.9 added ``verl.plugin.platform``: ``get_device_name()`` and
    ``get_device_id()`` ask a process-wide platform object, which on a machine
    without accelerators falls back to CUDA. This installs, once per process, a
    platform that reports the CPU. verl 0.8 has no platform layer and already
    reports ``"cpu"``.
    """
    try:
        from verl.plugin.platform import platform_manager
        from verl.plugin.platform.platform_cuda import PlatformCUDA
    except ImportError:
        return "no platform layer (verl < 0.9): nothing to do"
    import torch

    current = platform_manager._current_platform
    if current is not None and current.device_name == "cpu":
        return "CPU platform already installed"

    class PlatformCPU(PlatformCUDA):  # type: ignore[misc]
        """verl's CUDA platform, answering for the CPU (what leakscope's tiny models run on)."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> object:
            return torch.cpu

        def is_available(self) -> bool:
            return True

        def current_device(self) -> object:
            return "cpu"

    # Set the singleton directly when none exists yet: set_platform() would log
    # a "replacing" warning only when one was already resolved.
    platform_manager.set_platform(PlatformCPU())
    return "installed a CPU platform with verl.plugin.platform.platform_manager.set_platform"


def _value_head_model(model: Any) -> object:
    import torch
    from torch import nn

    from leakscope.models.tiny import TinyOutput

    class ValueHeadModel(nn.Module):
        """The tiny LM with a one-label score layer: ``output.logits`` is ``[B, S, 1]``.

        verl's critic is a token-classification model (``num_labels=1``); its
        value head's ``prepare_model_outputs`` squeezes the last dimension. The
        layer is called ``score``, not ``v_head`` (which verl reads as TRL's
        ``AutoModelForCausalLMWithValueHead``).
        """

        def __init__(self, lm: nn.Module, vocab: int) -> None:
            super().__init__()
            self.lm = lm
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.score = nn.Linear(vocab, 1)

        def forward(self, **kwargs: object) -> TinyOutput:
            return TinyOutput(logits=self.score(self.lm(**kwargs).logits))

    vocab = int(model.size.vocab)
    wrapped = ValueHeadModel(model, vocab)
    wrapped.train(model.training)
    return wrapped


def _set_engine_attributes(engine: Any, module: Any, settings: VerlSettings) -> None:
    """What ``__init__`` and ``_build_fsdp_module`` would set, for the padded single-process path."""
    import torch
    import verl.utils.torch_functional as verl_F
    from verl.workers.config import FSDPEngineConfig

    engine.module = module
    engine.engine_config = FSDPEngineConfig(entropy_checkpointing=settings.entropy_checkpointing)
    engine._autocast_dtype = torch.float32  # forward_step: no torch.autocast
    engine.use_ulysses_sp = False  # no sequence parallelism
    engine.ulysses_sequence_parallel_size = 1
    engine.ulysses_device_mesh = None  # data-parallel group: the default (gloo) group
    engine.use_remove_padding = False
    engine.pad_to_length = False  # verl >= 0.9 prepare_model_inputs
    engine.pad_to_length_bucket = 1
    engine.pass_packed_cu_seqlens = False
    # __init__ wraps this in torch.compile when engine_config.use_torch_compile;
    # compiling costs seconds and changes nothing about what is retained.
    engine.compute_entropy_from_logits = verl_F.entropy_from_logits
    engine.scaler = None
    engine.mode = "train"
    engine.rank = 0


@dataclasses.dataclass(frozen=True)
class VerlSettings:
    """The verl knobs that change what a step retains; defaults are verl 0.8.0's actor.yaml."""

    calculate_entropy: bool = False
    entropy_coeff: float = 0.0
    entropy_checkpointing: bool = False

    @property
    def entropy(self) -> bool:
        """What the trainer passes to the actor update: ``calculate_entropy or entropy_coeff != 0``."""
        return self.calculate_entropy or self.entropy_coeff != 0

    def labels(self) -> tuple[str, ...]:
        """``key=value`` for the report, every knob."""
        return (
            f"calculate_entropy={str(self.calculate_entropy).lower()}",
            f"entropy_coeff={self.entropy_coeff:g}",
            f"entropy_checkpointing={str(self.entropy_checkpointing).lower()}",
        )


def parse_settings(given: Mapping[str, str]) -> tuple[VerlSettings, set[str]]:
    """``--set`` values as :class:`VerlSettings` and the keys that were given (a bad one is a usage error)."""
    from leakscope.errors import UsageError

    values: dict[str, Any] = {}
    for key, raw in given.items():
        name = key.replace("-", "_")
        text = str(raw).strip().lower()
        if name in ("calculate_entropy", "entropy_checkpointing"):
            if text not in ("true", "false", "1", "0"):
                raise UsageError(f"--set {key}={raw}: expected true or false")
            values[name] = text in ("true", "1")
        elif name == "entropy_coeff":
            try:
                values[name] = float(text)
            except ValueError:
                raise UsageError(
                    f"--set {key}={raw}: expected a number (verl's default is 0)"
                ) from None
        elif name == "use_fused_kernels":
            if text in ("true", "1"):
                raise UsageError(
                    "--set use_fused_kernels=true: verl's fused kernels need its patched model forward, "
                    "which leakscope's tiny models do not have on CPU; drop it"
                )
        else:
            raise UsageError(
                f"--set {key}: the verl adapter knows calculate_entropy, entropy_coeff, entropy_checkpointing "
                "and use_fused_kernels"
            )
    return VerlSettings(**values), {k.replace("-", "_") for k in given}


class VerlFSDPAdapter:
    """Builds and drives verl's ``FSDPEngineWithLMHead`` (actor) and ``FSDPEngineWithValueHead`` (critic)."""

    name = "verl-fsdp"
    #: verl's forward_backward_batch runs forward-only batches under torch.no_grad()
    caller_no_grad_forward_only = True

    def __init__(self, settings: VerlSettings = VerlSettings()) -> None:
        self.settings = settings

    def variants(self, given: Mapping[str, str], every: bool) -> list[tuple[Any, tuple[str, ...]]]:
        """The settings to check; see NOTE [verl's real configuration]."""
        settings, pinned = parse_settings(given)
        out = [settings]
        entropy_pinned = bool(pinned & {"calculate_entropy", "entropy_coeff"})
        if every and not entropy_pinned and not settings.entropy:
            out.append(dataclasses.replace(settings, calculate_entropy=True))
        return [(VerlFSDPAdapter(s), s.labels()) for s in out]

    def recognises(self, resolved: ResolvedTarget) -> bool:
        """True for verl's FSDP engine classes and user subclasses of them."""
        return bool(_family(resolved.obj))

    def build_engine(self, resolved: ResolvedTarget, model: object) -> object:
        """An engine instance without ``__init__``, around ``model`` (see the module docstring)."""
        use_cpu_platform()
        cls = resolved.obj
        engine = object.__new__(cls)
        module = _value_head_model(model) if CRITIC in _family(cls) else model
        _set_engine_attributes(engine, module, self.settings)
        return engine

    def micro_batch(self, size: Any, index: int) -> object:
        """leakscope's micro-batch in verl's format: jagged nested tensors plus verl's metadata."""
        from leakscope.models.tiny import build_micro_batch

        padded = build_micro_batch(size, index)
        lengths = padded["attention_mask"].sum(-1).tolist()
        rows = [padded["input_ids"][i, : int(n)] for i, n in enumerate(lengths)]
        return _verl_batch(rows, self.settings.entropy)

    def loss_function(
        self, model_output: Any, data: object, dp_group: object = None, **_: object
    ) -> tuple[Any, dict[str, float]]:
        """Mean negative log-prob (actor) or mean squared value (critic), as verl calls its losses.

        ``model_output`` values are jagged nested tensors; ``.values()`` is the
        packed ``[total_tokens]`` buffer verl's own losses reduce over.
        """
        if "values" in model_output:
            loss = (model_output["values"].values() ** 2).mean()
            return loss, {"vf_loss": float(loss.detach())}
        loss = -model_output["log_probs"].values().mean()
        if self.settings.entropy_coeff != 0 and "entropy" in model_output:
            # verl's policy loss: policy_loss -= entropy_coeff * entropy_loss
            loss = loss - self.settings.entropy_coeff * model_output["entropy"].values().mean()
        return loss, {"pg_loss": float(loss.detach())}

    def run_micro_batches(
        self, engine: Any, micro_batches: Sequence[Any], loss_function: object, forward_only: bool
    ) -> object:
        """One mini-batch made of ``micro_batches``, through verl's real ``forward_backward_batch``.

        Needs a process group (leakscope creates a single-process gloo group):
        verl all-reduces the token count over the data-parallel group.
        """
        from verl.utils import tensordict_utils as tu

        rows = [row for mb in micro_batches for row in mb["input_ids"].unbind()]
        data = _verl_batch(rows, self.settings.entropy)
        per_micro = micro_batches[0].batch_size[0] if micro_batches else 1
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=int(per_micro))
        return engine.forward_backward_batch(
            data, loss_function=loss_function, forward_only=forward_only
        )


def _verl_batch(rows: Sequence[Any], calculate_entropy: bool) -> object:
    """A verl micro-batch of token rows: ``input_ids``/``position_ids``/``loss_mask`` as jagged tensors."""
    import torch
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.dataset_utils import DatasetPadMode

    def jagged(ts: list[Any]) -> object:
        return torch.nested.as_nested_tensor(ts, layout=torch.jagged)

    lengths = [int(r.shape[0]) for r in rows]
    data = TensorDict(
        {
            "input_ids": jagged([r.to(torch.int64) for r in rows]),
            "position_ids": jagged([torch.arange(n, dtype=torch.int64) for n in lengths]),
            "loss_mask": jagged([torch.ones(n, dtype=torch.int64) for n in lengths]),
        },
        batch_size=[len(rows)],
    )
    tu.assign_non_tensor(
        data,
        temperature=1.0,
        use_remove_padding=False,  # the padded path: the model sees [B, S] like leakscope's others
        pad_mode=DatasetPadMode.NO_PADDING,  # the only mode verl's FSDP engine accepts
        calculate_entropy=calculate_entropy,
        pad_token_id=0,
    )
    return data


ADAPTER = VerlFSDPAdapter()

__all__ = ["ADAPTER", "VerlFSDPAdapter", "VerlSettings", "parse_settings", "use_cpu_platform"]
