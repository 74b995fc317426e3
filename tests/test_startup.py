"""`leakscope --help` and `--version` stay cheap: they load neither torch nor tensordict.

The wall time target (< 0.3 s) is measured by ``benchmarks/run.py``, not here:
a timed unit test is flaky on a shared CI machine. What makes it cheap is
asserted here, in a fresh interpreter running the real entry point.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

_PROBE = """
import sys
from leakscope.cli import main
sys.argv = ["leakscope", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = [m for m in ("torch", "tensordict", "rich", "numpy") if m in sys.modules]
print("EXIT", code, "HEAVY", ",".join(heavy) or "-", file=sys.stderr)
"""


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_torch(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, flag], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stderr.strip().splitlines()[-1] == "EXIT 0 HEAVY -"
    assert (
        ("Usage: leakscope" in done.stdout)
        if flag == "--help"
        else done.stdout.startswith("leakscope ")
    )


def test_check_help_imports_no_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "check", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stderr.strip().splitlines()[-1] == "EXIT 0 HEAVY -"
    assert "--format" in done.stdout


def test_the_walk_imports_no_tensordict_the_job_did_not() -> None:
    """``watch`` walks a running job: importing tensordict there cost a job that never uses it about
    a second of its own time (benchmarks/watch_script.py). A TensorDict type exists only once the
    job imported tensordict, and then the walk knows it (tests/test_walk.py)."""
    code = (
        "import sys, torch\n"
        "from leakscope.probe.walk import Root, walk\n"
        "held = {'loss': torch.ones(2, requires_grad=True) * 2}\n"
        "found = [h.path for h in walk([Root('x', held, 'engine')]) if isinstance(h.obj, torch.Tensor)]\n"
        "print(len(found), 'tensordict' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["1", "False"], done.stderr[-2000:]
