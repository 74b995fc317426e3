"""``leakscope check`` on the real-bug suite's cases whose framework the built-in adapters claim
(realbugs/bugs.toml, docs/real-bugs.md): a ``LightningModule`` or a TRL/transformers trainer.

Each runs as a user would, on the repository's interpreter with the release's overlay
(``PYTHONPATH=realbugs/.envs/<bug>-<version>:<root>``, from .ci/setup-realbugs.sh), in the bug's
folder:

- pytorch-forecasting's ``NBeats`` (a LightningModule of lightning 2.5.2, built for a data set by
  ``NBeats.from_dataset``): out of the box, the growing leak at the upstream holder on 1.4.0 and
  only torchmetrics' bounded ``_forward_cache`` on 1.5.0; with ``--factory``, the module's own data
  (a loader or a LightningDataModule returned with it, or its own ``train_dataloader()``);
- a pytorch_lightning 1.0 module (below the 1.4 the adapter claims): ``check`` refuses it in one
  line naming the range and the ``watch --method`` command, and ``watch`` with no ``--method``
  names that method, the one the suite watches;
- TRL 0.4's ``PPOTrainer`` (not a transformers.Trainer): one line whose ``watch --method`` is the
  minibatch call the suite watches;
- transformers 3.1's ``Trainer`` (below the 4.x check drives): one line naming the range and a
  ``watch`` command;
- a pytorch_lightning 1.4.5 module with its own data (``--factory``): Lightning's ``_minimize``,
  bounded; on 1.4.6, which drops it before the next step's forward, clean (check judges when
  the next ``training_step`` starts).

Missing overlays (or a .venv without greenlet) skip, and fail under LEAKSCOPE_REQUIRE_FRAMEWORKS=1.
The signature rules these rest on run without any overlay at the end.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from typing import Any

import pytest

from realbugs.suite import Bug, Release, base_packages, load, overlay_problem, run
from tests.conftest import framework_missing

pytestmark = pytest.mark.frameworks

BUGS = {bug.name: bug for bug in load()}
FORECASTING = BUGS["pytorch-forecasting-step-outputs"]
PL10 = BUGS["lightning-metric-forward"]
PPO = BUGS["trl-ppo-minibatch-stats"]
RUNNING_SUM = BUGS["transformers-trainer-running-sum"]
MINIMIZE = BUGS["lightning-results-minimize"]
NBEATS = "pytorch_forecasting.models.nbeats:NBeats"
#: a run past this is a hang (each takes 5 to 25 s on a loaded 2-core machine)
TIMEOUT = 600


def _ready(release: Release, lightning: bool = False) -> None:
    problem = overlay_problem(release, base_packages())
    if not problem and lightning:
        if importlib.util.find_spec("greenlet") is None:
            problem = "greenlet is not installed in .venv; pip install -e '.[test,hf]' installs it"
        elif "'greenlet'" in (release.overlay / "sitecustomize.py").read_text(encoding="utf-8"):
            problem = f"{release.overlay.name} hides greenlet; update it with .ci/setup-realbugs.sh"
    if problem:
        framework_missing(problem, ("LEAKSCOPE_REQUIRE_FRAMEWORKS",))


def _leakscope(bug: Bug, release: Release, command: str, *args: str) -> tuple[int, dict[str, Any]]:
    """``leakscope COMMAND -f json ARGS`` in the bug's folder with the release's overlay: exit code and report."""
    proc = run(
        bug,
        release,
        [sys.executable, "-m", "leakscope", command, "-f", "json", *args],
        timeout=TIMEOUT,
    )
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"leakscope printed no JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
        )
    return proc.returncode, doc


def _check(bug: Bug, release: Release, *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    code, doc = _leakscope(bug, release, "check", *args)
    return code, {result["mode"]: result for result in doc["results"]}


def _leaks(result: dict[str, Any]) -> dict[str, str]:
    """Leak findings: path -> kind (growing / bounded)."""
    return {f["path"]: f["kind"] for f in result["findings"] if f["severity"] == "leak"}


# -- pytorch-forecasting: a LightningModule built for a data set ----------------------------------


def test_nbeats_out_of_the_box_is_caught_at_the_upstream_holder_on_the_buggy_release() -> None:
    """``NBeats.from_dataset`` on leakscope's TimeSeriesDataSet, fed that data set's batches through
    the real Trainer: 1.4.0's ``training_step_outputs.append(log)`` keeps every batch's loss graph."""
    release = FORECASTING.buggy
    _ready(release, lightning=True)
    code, results = _check(FORECASTING, release, NBEATS, "--mode", "both")
    train = results["train"]
    assert (code, train["verdict"], train["error"]) == (1, "leak", None), train
    assert _leaks(train) == {
        FORECASTING.holder: FORECASTING.kind,
        **dict.fromkeys(FORECASTING.fixed.also_bounded, "bounded"),
    }
    finding = next(f for f in train["findings"] if f["path"] == FORECASTING.holder)
    assert finding["confirmed"] and finding["graph_nodes"] > 0 and finding["retained_bytes"] > 0
    assert finding["stored_at"]["file"].endswith("pytorch_forecasting/models/base/_base_model.py")
    assert train["growth"]["slope_bytes"] > 0
    # the real validation loop, under Lightning's no_grad: nothing attached is kept
    assert (results["forward-only"]["verdict"], _leaks(results["forward-only"])) == ("clean", {})


def test_nbeats_out_of_the_box_has_no_growing_leak_on_the_fixed_release() -> None:
    """1.5.0 detaches what it appends: only torchmetrics' cache of the latest loss is left, bounded."""
    release = FORECASTING.fixed
    _ready(release, lightning=True)
    code, results = _check(FORECASTING, release, NBEATS, "--mode", "train")
    train = results["train"]
    assert (code, train["verdict"], train["error"]) == (1, "leak", None), train
    assert _leaks(train) == dict.fromkeys(release.also_bounded, "bounded")
    assert train["growth"]["slope_bytes"] == 0


@pytest.mark.parametrize("factory", ["make_module", "make_with_datamodule", "make_with_data"])
def test_a_factory_built_nbeats_is_fed_its_own_data(factory: str) -> None:
    """The driver's model, as its users build it from their own data set, with that data: returned
    with its loader, with a LightningDataModule, or from the module's own ``train_dataloader()``."""
    release = FORECASTING.buggy
    _ready(release, lightning=True)
    code, results = _check(
        FORECASTING, release, NBEATS, "--factory", f"check_module:{factory}", "--mode", "train"
    )
    train = results["train"]
    assert (code, train["error"]) == (1, None), train
    assert _leaks(train)[FORECASTING.holder] == "growing"


def test_a_factory_built_nbeats_returned_alone_is_fed_a_data_set_remade_from_what_it_recorded() -> (
    None
):
    """The driver's model alone (its data set out of leakscope's sight, no data hooks): fed a
    TimeSeriesDataSet remade with ``from_parameters`` from the ``dataset_parameters`` that
    ``from_dataset`` recorded on it, and caught at the upstream holder."""
    release = FORECASTING.buggy
    _ready(release, lightning=True)
    code, results = _check(
        FORECASTING,
        release,
        NBEATS,
        "--factory",
        "check_module:make_without_data",
        "--mode",
        "train",
    )
    train = results["train"]
    assert (code, train["error"]) == (1, None), train
    assert _leaks(train)[FORECASTING.holder] == "growing"
    assert train["growth"]["slope_bytes"] > 0


# -- pytorch_lightning 1.0: below the range the adapter claims ------------------------------------


def _pl10_line(release: Release) -> str:
    return (
        f"driver:LitRegressor cannot be driven by leakscope check: pytorch_lightning {release.version} has no "
        "loop API (pytorch_lightning.loops, which check pauses between batches); check drives pytorch_lightning "
        f"from 1.4 and lightning 2; watch the job's own step instead: leakscope watch --method {PL10.method} "
        "your_train.py"
    )


@pytest.mark.parametrize("side", ["buggy", "fixed"])
def test_a_pytorch_lightning_1_0_module_is_refused_in_one_line_naming_the_watch_command(
    side: str,
) -> None:
    release = PL10.release(side)
    _ready(release, lightning=True)
    code, results = _check(PL10, release, "driver:LitRegressor")
    assert code == 3
    # one error, one row (the same refusal in every mode is reported once)
    assert {mode: (r["verdict"], r["error"]) for mode, r in results.items()} == {
        "train": ("error", _pl10_line(release))
    }
    assert not any(r.get("traceback") for r in results.values())


def test_watch_with_no_method_finds_the_pytorch_lightning_1_0_steps_from_autograd() -> None:
    """1.0 calls ``training_step`` through its accelerator, which no built-in method covers; with no
    ``--method`` the steps come from its backward calls (NOTE [Steps from autograd]) instead of the
    exit-3 line that named the module's own step."""
    release = PL10.buggy
    _ready(release)
    code, doc = _leakscope(PL10, release, "watch", "driver.py", "--steps", "6")
    assert code in (0, 1), doc
    assert doc["watch"]["boundary"] == "backward"
    assert [r["verdict"] for r in doc["results"]] in (["leak"], ["clean"])
    assert all(r["target"].startswith("backward() at ") for r in doc["results"])


# -- pytorch_lightning 1.4.5 / 1.4.6: the previous step's loss in the loop's results -----------------

_MINIMIZE_FACTORY = (
    "driver:LitRegressor",
    "--factory",
    "check_module:make_module",
    "--mode",
    "train",
)


def test_pytorch_lightning_1_4_5_keeps_the_previous_loss_into_the_next_forward_bounded() -> None:
    """1.4.5 keeps the loss ``training_step`` returned in ``ResultCollection._minimize`` until the next
    step's ``training_step`` overwrites it: one step's graph, bounded, at the upstream holder."""
    release = MINIMIZE.buggy
    _ready(release, lightning=True)
    code, results = _check(MINIMIZE, release, *_MINIMIZE_FACTORY)
    train = results["train"]
    assert (code, train["verdict"], train["error"]) == (1, "leak", None), train
    assert _leaks(train) == {MINIMIZE.holder: MINIMIZE.kind}
    finding = next(f for f in train["findings"] if f["path"] == MINIMIZE.holder)
    assert finding["graph_nodes"] > 0 and finding["retained_bytes"] > 0


def test_pytorch_lightning_1_4_6_drops_the_previous_loss_before_the_next_forward() -> None:
    """1.4.6 sets ``_minimize = None`` in ``on_train_split_start``, before the next ``training_step``:
    the graph is dead when the next forward begins (confirm.py), so check reads clean (NOTE [Judged
    when the next step starts]; at the pause between batches it is alive on both releases)."""
    release = MINIMIZE.fixed
    _ready(release, lightning=True)
    code, results = _check(MINIMIZE, release, *_MINIMIZE_FACTORY)
    train = results["train"]
    assert (code, train["verdict"], _leaks(train)) == (0, "clean", {}), train


# -- transformers 3.1: below the 4.x the Trainer adapter drives --------------------------------------


def test_a_transformers_3_trainer_is_refused_in_one_line_naming_the_range_and_watch() -> None:
    release = RUNNING_SUM.buggy
    _ready(release)
    code, results = _check(RUNNING_SUM, release, "transformers.trainer:Trainer")
    assert code == 3
    for result in results.values():
        error = result["error"]
        assert error.startswith(
            "transformers.trainer:Trainer cannot be driven by leakscope check: transformers 3.1.0 lacks "
        ), error
        assert (
            "check drives transformers.Trainer from 4.x" in error and "leakscope watch" in error
        ), error
        assert "\n" not in error and not result.get("traceback")


# -- TRL 0.4's PPOTrainer: not a transformers.Trainer ---------------------------------------------


def test_an_old_ppo_trainer_is_refused_with_the_minibatch_method_to_watch() -> None:
    """Before 0.12 a PPOTrainer is not a Trainer; the graph is kept between the minibatches of one
    ``step()``, so the line names ``train_minibatch``, the method the suite watches."""
    release = PPO.buggy
    _ready(release)
    code, results = _check(PPO, release, "trl.trainer.ppo_trainer:PPOTrainer", "--mode", "train")
    assert code == 3
    assert results["train"]["error"] == (
        "trl.trainer.ppo_trainer:PPOTrainer cannot be driven by leakscope check: trl 0.4.0 lacks a PPOTrainer "
        "built on transformers.Trainer (before TRL 0.12 its step is PPOTrainer.step); check drives "
        "transformers.Trainer from 4.x and every TRL trainer built on it; "
        f"watch the job's own step instead: leakscope watch --method {PPO.method} your_train.py"
    )


def test_these_are_all_the_suite_cases_the_adapters_claim() -> None:
    """A new bug whose target is a LightningModule or a trainer needs a check test here."""
    claimed = {
        bug.name
        for bug in BUGS.values()
        if bug.method.startswith(("pytorch_forecasting.", "trl.", "transformers."))
    }
    claimed |= {
        bug.name for bug in BUGS.values() if bug.package in ("pytorch-lightning", "lightning")
    }
    assert claimed == {FORECASTING.name, PL10.name, PPO.name, RUNNING_SUM.name, MINIMIZE.name}


# -- the rules, on plain classes (no overlay) ----------------------------------------------------


class _Series:
    """A data set class leakscope has no recipe for."""


class _BuiltForData:
    def __init__(self, data: Any = None) -> None:
        self.data = data

    @classmethod
    def from_dataset(cls, dataset: _Series, **kwargs: Any) -> _BuiltForData:
        return cls(dataset)


def test_a_module_built_for_a_data_set_leakscope_cannot_make_asks_for_a_factory() -> None:
    """The annotation (postponed: a string here) names the data set class; with no recipe for it, one line."""
    from leakscope.adapters.lightning_build import build_from_dataset, dataset_parameter
    from leakscope.errors import EngineError

    assert dataset_parameter(_BuiltForData) == ("dataset", _Series)
    assert dataset_parameter(_Series) is None
    with pytest.raises(EngineError) as raised:
        build_from_dataset(_BuiltForData)
    assert str(raised.value) == (
        "_BuiltForData is built for a data set (_BuiltForData.from_dataset(dataset: _Series)), which leakscope "
        "cannot make; build it with --factory pkg.mod:make_module, a function make_module(net) that returns "
        "(_BuiltForData.from_dataset(your_dataset), your_dataloader)"
    )


def test_a_data_set_recipe_builds_the_module_and_its_failure_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from leakscope.adapters import lightning_build as lightning
    from leakscope.errors import EngineError

    key = (__name__.partition(".")[0], "_Series")
    monkeypatch.setitem(lightning.DATASETS, key, (lambda cls: cls(), "an empty series"))
    module, dataset = lightning.build_from_dataset(_BuiltForData)  # type: ignore[misc]
    assert isinstance(dataset, _Series) and module.data is dataset

    def broken(cls: Any) -> Any:
        raise ValueError("no such column\nsecond line")

    monkeypatch.setitem(lightning.DATASETS, key, (broken, "an empty series"))
    with pytest.raises(
        EngineError,
        match=r"^_BuiltForData.from_dataset on leakscope's _Series \(an empty series\) "
        r"raised ValueError: no such column; build it with --factory pkg.mod:make_module, ",
    ):
        lightning.build_from_dataset(_BuiltForData)


def test_a_data_loader_set_on_the_instance_is_the_module_s_own_data() -> None:
    from leakscope.adapters.lightning_build import own_data

    class Module:
        example_input_array = None

    module = Module()
    assert own_data(module, "fit") is None
    module.train_dataloader = lambda: [1, 2]  # type: ignore[attr-defined]  # what a factory may set
    assert own_data(module, "fit")() == [1, 2]
    assert own_data(module, "validate") is None


def _lightning_1_0(main_class: bool) -> dict[str, types.ModuleType]:
    """A job's ``sys.modules`` as pytorch_lightning 1.0 leaves it: its LightningModule (in
    ``core.lightning``) and the job's module subclassing it (also under ``__main__`` when asked)."""
    package = types.ModuleType("pytorch_lightning")
    package.__version__ = "1.0.4"  # type: ignore[attr-defined]
    base = type(
        "LightningModule",
        (),
        {"__module__": "pytorch_lightning.core.lightning", "training_step": lambda s: None},
    )
    package.LightningModule = base  # type: ignore[attr-defined]
    job = types.ModuleType("job")
    job.Lit = type(
        "Lit",
        (base,),
        {"__module__": "__main__" if main_class else "job", "training_step": lambda s: None},
    )  # type: ignore[attr-defined]
    job.Plain = type("Plain", (base,), {"__module__": "job"})  # no step of its own: not named  # type: ignore[attr-defined]
    return {"pytorch_lightning": package, "job": job}


def test_uncovered_step_names_the_job_s_own_lightning_step() -> None:
    from leakscope.live.methods import uncovered_step

    head = (
        "the job runs pytorch_lightning 1.0.4, whose step is not among the built-in methods (they cover "
        "pytorch_lightning from 1.4 and lightning 2); watch its LightningModule's own step"
    )
    assert (
        uncovered_step(_lightning_1_0(main_class=False))
        == f"{head}: --method job:Lit.training_step"
    )
    assert uncovered_step(_lightning_1_0(main_class=True)) == (
        f"{head}, Lit.training_step, defined in the script itself: move the class to a module the script imports and give "
        "--method that_module:Lit.training_step"
    )
    assert uncovered_step({"json": sys.modules["json"]}) is None


def test_the_watch_command_of_an_old_ppo_trainer_follows_its_methods() -> None:
    from leakscope.adapters.trainer import watch_command

    with_minibatch = type(
        "PPOTrainer", (), {"step": lambda s: None, "train_minibatch": lambda s: None}
    )
    without = type("PPOTrainer", (), {"step": lambda s: None})
    assert (
        watch_command("ppo", with_minibatch).split()[3]
        == "trl.trainer.ppo_trainer:PPOTrainer.train_minibatch"
    )
    assert watch_command("ppo", without).split()[3] == "trl.trainer.ppo_trainer:PPOTrainer.step"
