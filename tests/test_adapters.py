"""Third-party adapters, installed for real and discovered through the ``leakscope.adapters`` entry point.

Each package under ``tests/data/`` is installed with ``pip install --target``
into a temporary directory (a real ``.dist-info`` with ``entry_points.txt``),
and leakscope runs in a subprocess with that directory on ``PYTHONPATH``: the
test venv itself is never changed, so no other test sees these adapters.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

DATA = ROOT / "tests" / "data"
LEAKY = "leakscope_demo_adapter.engines:LeakyConfiguredEngine"
CLEAN = "leakscope_demo_adapter.engines:CleanConfiguredEngine"


def _pip_install(package: str, target: Path, scratch: Path) -> None:
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = scratch / package
    shutil.copytree(DATA / package, source)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    try:
        import setuptools  # noqa: F401

        cmd.append("--no-build-isolation")  # no download: build with the venv's setuptools
    except ImportError:
        pass
    subprocess.run([*cmd, str(source)], check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{package: install dir}`` for the demo and the broken adapter packages."""
    out = {}
    for package in ("leakscope-demo-adapter", "leakscope-broken-adapter"):
        target = tmp_path_factory.mktemp(package)
        _pip_install(package, target, tmp_path_factory.mktemp("src"))
        out[package] = target
    return out


def run_cli(pythonpath: list[Path], *args: str) -> tuple[int, str, str]:
    env = dict(
        os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(str(p) for p in pythonpath)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "leakscope", "check", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _summary(stdout: str) -> dict[tuple[str, str], tuple[str, list[str], Any]]:
    doc = json.loads(stdout)
    return {
        (r["target"], r["mode"]): (r["verdict"], [f["path"] for f in r["findings"]], r["error"])
        for r in doc["results"]
    }


def test_installed_package_has_a_real_entry_point(site: dict[str, Path]) -> None:
    (dist,) = site["leakscope-demo-adapter"].glob("leakscope_demo_adapter-*.dist-info")
    text = (dist / "entry_points.txt").read_text()
    assert "[leakscope.adapters]" in text
    assert "configured = leakscope_demo_adapter:ADAPTER" in text


def test_entry_point_adapter_builds_and_drives_its_engines(site: dict[str, Path]) -> None:
    code, out, err = run_cli([site["leakscope-demo-adapter"]], LEAKY, CLEAN, "--format", "json")
    assert code == 1, err
    assert _summary(out) == {
        (LEAKY, "train"): ("leak", ["output.model_output.log_probs"], None),
        # The engine ignores forward_only; the adapter declares that its caller
        # runs forward-only steps under no_grad, and leakscope does the same.
        (LEAKY, "forward-only"): ("clean", [], None),
        (CLEAN, "train"): ("clean", [], None),
        (CLEAN, "forward-only"): ("clean", [], None),
    }


def test_without_the_entry_point_the_engine_cannot_be_built(tmp_path: Path) -> None:
    """The same code importable without its dist-info: no adapter, so Engine(model) is tried and fails."""
    package = "leakscope_demo_adapter"
    shutil.copytree(DATA / "leakscope-demo-adapter" / package, tmp_path / package)
    code, out, err = run_cli([tmp_path], LEAKY, "--mode", "train", "--format", "json")
    assert code == 3
    (error,) = [r["error"] for r in json.loads(out)["results"]]
    assert error.startswith(f"building the engine {LEAKY}(model) raised ")
    assert "pass --factory" in error


def test_broken_entry_point_is_one_line_naming_it(site: dict[str, Path]) -> None:
    code, out, err = run_cli(
        [site["leakscope-broken-adapter"]],
        "fixtures.verl_fix:Engine",
        "--mode",
        "train",
        "--format",
        "json",
    )
    assert code == 3
    (error,) = [r["error"] for r in json.loads(out)["results"]]
    assert error == (
        "adapter entry point 'broken' (leakscope_broken_adapter:ADAPTER, group leakscope.adapters) failed to load: "
        "ImportError: leakscope_broken_adapter needs a framework that is not installed; "
        "fix or uninstall leakscope-broken-adapter"
    )
    assert "Traceback" not in err


def test_factory_overrides_an_adapter(site: dict[str, Path]) -> None:
    code, out, _ = run_cli(
        [site["leakscope-demo-adapter"], ROOT],
        LEAKY,
        "--factory",
        "fixtures.step_function:make_engine",
        "--mode",
        "train",
        "--format",
        "json",
    )
    assert code == 0
    assert _summary(out) == {(LEAKY, "train"): ("clean", [], None)}


def test_builtin_adapters_load_without_importing_torch() -> None:
    code = (
        "import sys; from leakscope.adapters.registry import installed_adapters; "
        "names = [a.name for a in installed_adapters()]; "
        "assert 'verl-fsdp' in names, names; "
        "assert 'torch' not in sys.modules and 'verl' not in sys.modules; print('ok')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == "ok", proc.stderr
