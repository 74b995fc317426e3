"""Version reach: old framework releases, driven by their own signatures, in their own venvs.

``.ci/setup-trl08.sh`` creates ``.venv-trl08`` (trl 0.8.6, transformers 4.40.2, peft 0.10.0)
and ``.ci/setup-pl1.sh`` ``.venv-pl1`` (pytorch-lightning 1.4.9). Each test runs leakscope
there as a subprocess, as a user would, on ``fixtures/reach/``: ``check`` out of the box on
TRL 0.8-era trainers and pytorch_lightning 1.x modules (hyperparameter-only constructors and
own data loaders included), ``watch`` with no ``--method`` on a transformers 4.x Trainer job
and a pytorch_lightning 1.x fit. Without the venvs those tests skip, unless
``LEAKSCOPE_REQUIRE_FRAMEWORKS=1`` or ``LEAKSCOPE_REQUIRE_VERL=1`` (CI) makes that a failure.
``--method pkg.mod:function`` and the signature rules run in the main venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, framework_python, run_leakscope, run_venv_check

pytestmark = pytest.mark.frameworks

TRL08 = ROOT / ".venv-trl08"
PL1 = ROOT / ".venv-pl1"
TRL = "fixtures.reach.trl08"
PL = "fixtures.reach.pl1"
#: what pytorch_lightning 1.4 itself keeps until the next batch: the loss of the last training
#: step, for its own backward (``ResultCollection._minimize``; gone in 1.5). Every module, fed its
#: own data or leakscope's batches, is judged when the next training_step starts (NOTE [Judged
#: when the next step starts]), after 1.4.6+ dropped it in ``on_train_split_start`` (#9343)
MINIMIZE = "engine._trainer._fit_loop.epoch_loop._results._minimize"
PLUGIN_STEP = (
    "pytorch_lightning.plugins.training_type.training_type_plugin:TrainingTypePlugin.training_step"
)


def trl08() -> Path:
    return framework_python(TRL08, ".ci/setup-trl08.sh")


def pl1() -> Path:
    return framework_python(PL1, ".ci/setup-pl1.sh")


def _results(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["target"].rpartition(":")[2], r["mode"]): r for r in doc["results"]}


def _leaks(result: dict[str, Any]) -> dict[str, str]:
    """Leak findings: path -> kind (growing / bounded)."""
    return {f["path"]: f["kind"] for f in result["findings"] if f["severity"] == "leak"}


def _watch(
    python: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = run_leakscope(python, "watch", "-f", "json", *args, env=env, timeout=600)
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"no JSON on stdout (rc {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}"
        ) from None
    return done, doc


# -- TRL 0.8 and transformers 4.x ----------------------------------------------------------------


@pytest.fixture(scope="session")
def trl_doc() -> tuple[int, dict[str, Any]]:
    return run_venv_check(
        trl08(),
        "trl.trainer.dpo_trainer:DPOTrainer",
        "trl.trainer.sft_trainer:SFTTrainer",
        *(
            f"{TRL}:{name}"
            for name in (
                "MarginDPO",
                "CleanMarginDPO",
                "LossHistoryTrainer",
                "CleanLossHistoryTrainer",
            )
        ),
        timeout=900,
    )


def test_trl08_trainers_are_built_with_tokenizer_and_their_stock_steps_are_clean(
    trl_doc: tuple[int, dict[str, Any]],
) -> None:
    """TRL 0.8 has no DPOConfig/SFTConfig and its trainers take ``tokenizer=``: built and driven
    by their signatures, the stock trainers run their real steps and keep no graph."""
    _, doc = trl_doc
    results = _results(doc)
    for name in ("DPOTrainer", "SFTTrainer"):
        for mode in ("train", "forward-only"):
            result = results[(name, mode)]
            assert (result["verdict"], result["error"], _leaks(result)) == ("clean", None, {}), (
                result
            )
            assert result["growth"]["retained_bytes"] == [0, 0, 0]


def test_trl08_dpo_subclass_keeping_a_metric_tensor_is_caught_at_the_metric_store(
    trl_doc: tuple[int, dict[str, Any]],
) -> None:
    code, doc = trl_doc
    assert code == 1
    results = _results(doc)
    train = results[("MarginDPO", "train")]
    assert _leaks(train) == {"engine._stored_metrics.train['logps/margin'][0]": "growing"}
    (finding,) = [f for f in train["findings"] if f["severity"] == "leak"]
    assert (finding["holder"], finding["grad_fn"], finding["confirmed"]) == (
        "engine attribute",
        "MeanBackward0",
        True,
    )
    assert finding["source"]["file"] == "fixtures/reach/trl08.py"
    assert train["growth"]["slope_bytes"] > 0
    assert (
        results[("MarginDPO", "forward-only")]["verdict"] == "clean"
    )  # prediction_step runs under no_grad
    for mode in ("train", "forward-only"):
        clean = results[("CleanMarginDPO", mode)]
        assert (clean["verdict"], _leaks(clean)) == ("clean", {}), clean


def test_transformers4_trainer_subclass_is_driven_with_the_two_argument_training_step(
    trl_doc: tuple[int, dict[str, Any]],
) -> None:
    """transformers 4.40's training_step(model, inputs) and compute_loss without num_items_in_batch."""
    _, doc = trl_doc
    results = _results(doc)
    assert _leaks(results[("LossHistoryTrainer", "train")]) == {"engine.loss_history[0]": "growing"}
    for mode in ("train", "forward-only"):
        assert results[("CleanLossHistoryTrainer", mode)]["verdict"] == "clean"


def test_a_trainer_release_that_cannot_be_driven_is_one_line_naming_the_range_and_the_watch_command() -> (
    None
):
    """TRL 0.8's PPOTrainer is not a transformers.Trainer: exit 3, one line, what to run instead."""
    code, doc = run_venv_check(trl08(), "trl.trainer.ppo_trainer:PPOTrainer", timeout=600)
    assert code == 3
    errors = {r["error"] for r in doc["results"]}
    assert errors == {
        "trl.trainer.ppo_trainer:PPOTrainer cannot be driven by leakscope check: trl 0.8.6 lacks a PPOTrainer "
        "built on transformers.Trainer (before TRL 0.12 its step is PPOTrainer.step); check drives "
        "transformers.Trainer from 4.x and every TRL trainer built on it; "
        "watch the job's own step instead: leakscope watch --method trl.trainer.ppo_trainer:PPOTrainer.train_minibatch "
        "your_train.py"
    }
    assert all(r["verdict"] == "error" and not r.get("traceback") for r in doc["results"])


@pytest.mark.parametrize(
    ("leaky", "verdict", "paths"), [("1", "leak", ["engine.last_logits[0]"]), ("0", "clean", [])]
)
def test_watch_finds_a_transformers4_trainer_step_with_no_method(
    leaky: str, verdict: str, paths: list[str]
) -> None:
    done, doc = _watch(trl08(), "fixtures/watch/hf_peft_trainer.py", env={"LEAKY": leaky})
    assert [
        (r["target"], r["verdict"], [f["path"] for f in r["findings"]]) for r in doc["results"]
    ] == [("transformers.trainer:Trainer.training_step", verdict, paths)]
    assert doc["watch"]["methods"] == ["transformers.trainer:Trainer.training_step"]
    assert done.returncode == (1 if leaky == "1" else 0)


# -- pytorch_lightning 1.x -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def pl_doc() -> dict[tuple[str, str], dict[str, Any]]:
    python = pl1()
    _, both = run_venv_check(
        python,
        *(
            f"{PL}:{name}"
            for name in ("EpochOutputs", "CleanEpochOutputs", "HyperModel", "CleanHyperModel")
        ),
        "--mode",
        "both",
        timeout=900,
    )
    _, train = run_venv_check(
        python, f"{PL}:AutoEncoder", f"{PL}:CleanAutoEncoder", "--mode", "train", timeout=900
    )
    return {**_results(both), **_results(train)}


@pytest.mark.parametrize(
    ("name", "path", "kind"),
    [
        (
            "EpochOutputs",
            "engine.step_losses[0]",
            "growing",
        ),  # built as EpochOutputs(net), leakscope's batches
        (
            "HyperModel",
            "engine.losses[0]",
            "growing",
        ),  # built as HyperModel(), fed its own train_dataloader()
        (
            "AutoEncoder",
            "engine.last",
            "bounded",
        ),  # built as AutoEncoder(), fed its example_input_array
    ],
)
def test_pl1_leaky_module_is_caught_at_its_holder(
    pl_doc: dict[tuple[str, str], dict[str, Any]], name: str, path: str, kind: str
) -> None:
    result = pl_doc[(name, "train")]
    assert result["error"] is None, result["error"]
    assert _leaks(result) == {path: kind}, result["findings"]  # not MINIMIZE: gone by then
    finding = next(f for f in result["findings"] if f["path"] == path)
    assert (finding["holder"], finding["confirmed"]) == ("engine attribute", True)
    assert finding["source"]["file"] == "fixtures/reach/pl1.py"
    if (name, "forward-only") in pl_doc:  # the real validation loop, one batch per micro-batch
        assert pl_doc[(name, "forward-only")]["verdict"] == "clean"


@pytest.mark.parametrize("name", ["CleanEpochOutputs", "CleanHyperModel", "CleanAutoEncoder"])
def test_pl1_clean_twin_keeps_nothing_of_its_own(
    pl_doc: dict[tuple[str, str], dict[str, Any]], name: str
) -> None:
    """pytorch_lightning 1.4 keeps the last step's loss for its backward (``_minimize``) until the
    next batch's ``on_train_split_start``; 1.4.9 drops it there, before the next training_step
    starts, where every module is judged, fed its own data or leakscope's batches (at the fetch,
    it was a bounded holder of Lightning's own): clean."""
    result = pl_doc[(name, "train")]
    assert result["error"] is None, result["error"]
    assert (result["verdict"], _leaks(result)) == ("clean", {}), result["findings"]
    assert MINIMIZE not in {f["path"] for f in result["findings"]}
    if (name, "forward-only") in pl_doc:
        assert pl_doc[(name, "forward-only")]["verdict"] == "clean"


def test_pl1_module_needing_a_value_without_default_asks_for_a_factory() -> None:
    code, doc = run_venv_check(pl1(), f"{PL}:NeedsConfig", "--mode", "train", timeout=600)
    assert code == 3
    (result,) = doc["results"]
    assert "NeedsConfig.__init__ needs config (no default)" in result["error"]
    assert "--factory pkg.mod:make_module" in result["error"] and "\n" not in result["error"]


def test_watch_finds_the_pl1_step_with_no_method() -> None:
    """pytorch_lightning 1.4 calls training_step through its TrainingTypePlugin, watched by default;
    findings are named on the user's module."""
    done, doc = _watch(pl1(), "fixtures/reach/pl1_fit.py")
    (result,) = doc["results"]
    assert (result["target"], result["verdict"]) == (PLUGIN_STEP, "leak")
    assert _leaks(result) == {"engine.step_losses[0]": "growing"}
    assert doc["watch"]["methods"] == [PLUGIN_STEP]
    assert done.returncode == 1


def test_watch_pl1_clean_twin_has_no_growing_holder() -> None:
    """With ``--detach`` nothing of the module grows; what is left is Lightning 1.4's own
    one-step retention (``_minimize``), which the watch's walk does not reach from the module
    (its trainer is a weakref proxy): bounded, never growing, never on the module."""
    done, doc = _watch(pl1(), "fixtures/reach/pl1_fit.py", "--detach")
    (result,) = doc["results"]
    assert result["target"] == PLUGIN_STEP
    assert all(
        f["kind"] != "growing" and not f["path"].startswith("engine.") for f in result["findings"]
    )
    assert result["growth"]["nodes_by_micro_batch"] == [0, 0, 0]


# -- watch --method pkg.mod:function (main venv) -------------------------------------------------


def _watch_here(
    *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    full_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **(env or {}))
    done = subprocess.run(
        [sys.executable, "-m", "leakscope", "watch", "-f", "json", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, json.loads(done.stdout)


@pytest.mark.parametrize(
    ("detach", "verdict", "paths"),
    [("0", "leak", ["global:plain_steps.HISTORY[0]"]), ("1", "clean", [])],
)
def test_method_names_a_module_level_function(detach: str, verdict: str, paths: list[str]) -> None:
    done, doc = _watch_here(
        "--method",
        "plain_steps:train_step",
        "fixtures/reach/plain_loop.py",
        env={"PLAIN_DETACH": detach},
    )
    assert [
        (r["target"], r["verdict"], [f["path"] for f in r["findings"]]) for r in doc["results"]
    ] == [("plain_steps:train_step", verdict, paths)]
    assert [c["mode"] for c in doc["watch"]["calls"]] == ["train"] * 3
    if paths:
        finding = doc["results"][0]["findings"][0]
        assert (finding["kind"], finding["stored_at"]["file"]) == (
            "growing",
            "fixtures/reach/plain_steps.py",
        )


def test_a_watched_function_is_put_back_in_every_module_that_imported_it() -> None:
    """``--then continue``: the loop's own name ``train_step`` (bound by ``from plain_steps import
    train_step`` once the module was patched on import) holds the original function again."""
    done, doc = _watch_here(
        "--then", "continue", "--method", "plain_steps:train_step", "fixtures/reach/plain_loop.py"
    )
    assert [r["verdict"] for r in doc["results"]] == ["leak"]
    assert "loop done: train_step runs train_step in plain_steps.py" in done.stderr


def test_patcher_replaces_a_function_where_it_was_imported_and_restores_it_exactly() -> None:
    from leakscope.live.methods import parse_method
    from leakscope.live.patcher import Patcher

    source = types.ModuleType("leakscope_reach_source")
    exec("def step(x):\n    return x + 1\n", source.__dict__)
    original = source.step
    user = types.ModuleType("leakscope_reach_user")
    user.run = original  # what `from leakscope_reach_source import step as run` leaves behind
    other = types.ModuleType("leakscope_reach_other")
    other.step = lambda x: x  # same name, another function: never touched
    unrelated = other.step
    calls: list[int] = []

    def wrap(spec: Any, function: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            calls.append(1)
            return function(*args)

        return wrapper

    modules = {m.__name__: m for m in (source, user, other)}
    sys.modules.update(modules)
    try:
        patcher = Patcher([parse_method("leakscope_reach_source:step")], wrap)
        patcher.install()
        assert source.step is not original and user.run is source.step and other.step is unrelated
        assert (source.step(1), user.run(2), len(calls)) == (2, 3, 2)
        late = types.ModuleType("leakscope_reach_late")
        late.step = source.step  # imported by name after the patch
        sys.modules[late.__name__] = late
        patcher.restore()
        assert (source.step, user.run, late.step, other.step) == (
            original,
            original,
            original,
            unrelated,
        )
        assert patcher.found() == ["leakscope_reach_source:step"] and patcher.errors == []
    finally:
        for name in (*modules, "leakscope_reach_late"):
            sys.modules.pop(name, None)


def test_method_spec_shapes() -> None:
    from leakscope.errors import UsageError
    from leakscope.live.methods import DEFAULT_METHODS, ENGINE_ATTRIBUTES, parse_method

    function = parse_method("my_pkg.loop:train_step")
    assert (function.module, function.cls, function.name, function.is_function) == (
        "my_pkg.loop",
        (),
        "train_step",
        True,
    )
    assert not parse_method("my_pkg.engine:Engine.forward_step").is_function
    with pytest.raises(UsageError, match="'pkg.module:Class.method' or 'pkg.module:function'"):
        parse_method("my_pkg.loop")
    assert PLUGIN_STEP in DEFAULT_METHODS and ENGINE_ATTRIBUTES[PLUGIN_STEP] == "lightning_module"
    assert "trl.trainer.ppo_trainer:PPOTrainer.train_minibatch" in DEFAULT_METHODS


# -- the signature rules, on the main venv's real classes -----------------------------------------


def test_lightning_1x_module_path_is_recognised_without_importing_lightning() -> None:
    from leakscope.adapters.registry import find_adapter
    from leakscope.harness.target import ResolvedTarget

    base = type("LightningModule", (), {"__module__": "pytorch_lightning.core.lightning"})
    sub = type("LitModel", (base,), {"__module__": "user"})
    assert (
        find_adapter(ResolvedTarget("x:y", sub, types.ModuleType("user"), "y")).name == "lightning"
    )
    assert "pytorch_lightning" not in sys.modules


def test_lightning_module_is_built_from_its_constructor() -> None:
    """The network goes to a first argument that takes it; hyperparameters take their defaults;
    a value without default cannot be guessed (one line, naming --factory)."""
    import torch

    from leakscope.adapters.lightning_build import build_module
    from leakscope.errors import EngineError

    net = torch.nn.Linear(2, 2)

    class OnNet:
        def __init__(self, net: torch.nn.Module, lr: float = 0.1) -> None:
            self.net, self.lr = net, lr

    class OnModel:
        def __init__(self, model, hidden=4):  # type: ignore[no-untyped-def]  # unannotated: by name
            self.model = model

    class Hyper:
        def __init__(self, hidden: int = 8, lr: float = 0.1) -> None:
            self.hidden = hidden

    class Needs:
        def __init__(self, net: torch.nn.Module, config: dict[str, int]) -> None:
            pass

    built, on_net = build_module(OnNet, net)
    assert (built.net, on_net) == (net, True)
    assert build_module(OnModel, net)[0].model is net
    hyper, on_net = build_module(Hyper, net)
    assert (hyper.hidden, on_net) == (8, False)
    with pytest.raises(
        EngineError,
        match=r"Needs.__init__ needs config \(no default\).*--factory pkg.mod:make_module",
    ):
        build_module(Needs, net)


def test_trainer_adapter_reads_what_the_installed_transformers_has() -> None:
    """The main venv's transformers 5: a Trainer subclass is driven; a class without the Trainer
    API it needs gets the list of what is missing (the one line names the range and watch)."""
    pytest.importorskip("transformers")
    from transformers import Trainer

    from leakscope.adapters.trainer import missing_api, watch_command

    assert missing_api("trainer", Trainer) == []
    stripped = type(
        "Trainer",
        (),
        {"__module__": "transformers.trainer", "__init__": lambda self, model=None: None},
    )
    assert missing_api("trainer", stripped) == [
        "Trainer.training_step",
        "Trainer.prediction_step",
        "Trainer.get_train_dataloader",
        "Trainer.get_eval_dataloader",
        "Trainer(args=..., processing_class= or tokenizer=...)",
    ]
    assert (
        watch_command("trainer")
        == "leakscope watch --method transformers.trainer:Trainer.training_step your_train.py"
    )
