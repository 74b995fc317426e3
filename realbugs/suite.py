"""The real-bug suite's table (bugs.toml) and where each release's overlay lives.

Standard library only: .ci/setup-realbugs.sh, tests/test_realbugs.py and gen_docs.py import it
from the repository's .venv before any overlay exists.

An *overlay* is a folder of packages installed with ``--target`` (no interpreter of its own):
a release runs on the repository's .venv interpreter (torch 2.13.0 and leakscope) with
``PYTHONPATH=<overlay>:<repository root>``, so the overlay's packages (numpy 1.26, an old
transformers, the release under test) shadow .venv's own, and ``realbugs.common.probe`` imports.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import tomllib

SUITE = Path(__file__).resolve().parent
ROOT = SUITE.parent
ENVS = SUITE / ".envs"
SIDES = ("buggy", "fixed")
#: driver.py's ``--steps`` under ``leakscope watch``: its 3 watched calls and the look at the
#: start of the 4th need 4
WATCH_STEPS = 6
#: the overlay's record of the pins installed in it (written last by realbugs/overlays.py)
STAMP = ".pins"
#: what confirm.py must conclude on each side
EXPECT = {"buggy": "leak", "fixed": "clean"}


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares it (``Jinja2`` and ``jinja2`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Release:
    """One side of a bug: a release of the bug's package and everything installed with it."""

    bug: str
    side: str
    version: str
    pins: tuple[str, ...]
    lock: tuple[str, ...]
    #: why ``leakscope watch`` on the current main gets this release wrong (the test expects the
    #: right answer and marks it xfail, strict, until leakscope is fixed); empty when it is right
    watch_xfail: str = ""
    #: holders of one step's graph at a time (bounded) that this release keeps besides the bug,
    #: in both releases (a torchmetrics metric's ``_forward_cache``, ignite's ``state.output``):
    #: real retention leakscope reports, not the upstream bug
    also_bounded: tuple[str, ...] = ()

    @property
    def overlay(self) -> Path:
        """The folder its packages are installed into (``realbugs/.envs/<bug>-<version>``)."""
        return ENVS / f"{self.bug}-{self.version}"

    @property
    def expect(self) -> str:
        return EXPECT[self.side]


@dataclass(frozen=True)
class Bug:
    """One row of bugs.toml."""

    name: str
    project: str
    upstream: tuple[str, ...]
    category: str
    package: str
    method: str
    holder: str
    kind: str
    confirmed: str
    buggy: Release
    fixed: Release
    #: the suite watches with no ``--method`` (``leakscope watch driver.py``): leakscope finds the
    #: steps itself; ``method`` then only names the step for NOTES.md
    no_flag: bool = False
    #: the holder as ``watch`` names it, when that differs from ``check``'s ``holder`` (a 1.x
    #: LightningModule holds its trainer weakly, so a running job's walk reaches the trainer from
    #: the loop's frames, not as ``engine._trainer``)
    watch_holder: str = ""

    @property
    def folder(self) -> Path:
        return SUITE / self.name

    def release(self, side: str) -> Release:
        return self.buggy if side == "buggy" else self.fixed


def _lock(path: Path) -> tuple[str, ...]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return tuple(line for line in lines if line)


def load() -> list[Bug]:
    """Every bug of bugs.toml, in its order."""
    doc = tomllib.loads((SUITE / "bugs.toml").read_text(encoding="utf-8"))
    bugs = []
    for row in doc["bug"]:
        sides = {
            side: Release(
                bug=row["name"], side=side, version=row[side]["version"],
                pins=tuple(row[side]["pins"]), lock=_lock(SUITE / row[side]["lock"]),
                watch_xfail=row[side].get("watch_xfail", ""),
                also_bounded=tuple(row[side].get("also_bounded", ())),
            )
            for side in SIDES
        }
        bugs.append(Bug(
            name=row["name"], project=row["project"], upstream=tuple(row["upstream"]),
            category=row["category"], package=row["package"], method=row["method"],
            holder=row["holder"], kind=row["kind"], confirmed=row["confirmed"], buggy=sides["buggy"], fixed=sides["fixed"],
            no_flag=row.get("no_flag", False), watch_holder=row.get("watch_holder", ""),
        ))
    return bugs


def site_dirs() -> list[str]:
    """The running interpreter's environment's own site-packages folders."""
    return sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def base_packages() -> dict[str, str]:
    """Distribution name -> version of what the running interpreter's environment installed
    itself (its site-packages; PYTHONPATH and the working directory left out)."""
    from importlib.metadata import distributions

    found: dict[str, str] = {}
    for dist in distributions(path=site_dirs()):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def needed(release: Release, base: dict[str, str]) -> list[str]:
    """The lock's pins that ``base`` (the .venv's distributions) does not have at that version."""
    out = []
    for pin in release.lock:
        name, _, version = pin.partition("==")
        if base.get(canonical(name)) != version:
            out.append(f"{canonical(name)}=={version}")
    return sorted(out)


def env(release: Release) -> dict[str, str]:
    """The environment a release's scripts run in: the overlay, then the repository root, on
    PYTHONPATH; one intra-op thread (two-core CI machines); no warnings on stderr; the node cost
    every doc example is made with (docs/gen.py), so that docs/real-bugs.md reads the same on every
    machine and tests/test_realbugs.py can compare its runs with it."""
    from docs.gen import COLUMNS, NODE_BYTES

    out = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", LEAKSCOPE_NODE_BYTES=NODE_BYTES, COLUMNS=COLUMNS)
    out["PYTHONPATH"] = os.pathsep.join([str(release.overlay), str(ROOT)])
    return out


def confirm_command(release: Release) -> list[str]:
    """The bug's leakscope-free confirmation, expecting the release's verdict (run in its folder)."""
    return [sys.executable, "confirm.py", "--expect", release.expect]


def watch_command(bug: Bug, fmt: str = "json", method: bool | None = None) -> list[str]:
    """``leakscope watch --method <the bug's method> driver.py``, report in ``fmt`` (run in its folder);
    for a ``no_flag`` bug (unless ``method`` asks for it) plain ``leakscope watch driver.py``, the
    driver's own default number of steps: no flag but the report's format."""
    report = ["-f", fmt] if fmt != "text" else []
    if bug.no_flag and not method:
        return [sys.executable, "-m", "leakscope", "watch", *report, "driver.py"]
    return [sys.executable, "-m", "leakscope", "watch", "--method", bug.method, *report,
            "driver.py", "--steps", str(WATCH_STEPS)]


def run(bug: Bug, release: Release, command: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in the bug's folder with the release's overlay."""
    return subprocess.run(command, cwd=bug.folder, env=env(release), capture_output=True, text=True,
                          timeout=timeout, check=False)


def overlay_problem(release: Release, base: dict[str, str]) -> str:
    """Why the release's overlay cannot be used now (missing, or installed for other pins), or ''."""
    stamp = release.overlay / STAMP
    if not stamp.is_file():
        return f"{release.overlay.name} is missing; create it with .ci/setup-realbugs.sh"
    if stamp.read_text(encoding="utf-8").split() != needed(release, base):
        return f"{release.overlay.name} was installed for other pins; update it with .ci/setup-realbugs.sh"
    return ""
