"""Install every release's overlay (``python -m realbugs.overlays [BUG ...]``; .ci/setup-realbugs.sh).

Each release's lock (bugs.toml) lists every package its reference venv had, torch and pip
aside. The overlay ``realbugs/.envs/<bug>-<version>/`` receives the pins that the running
interpreter's own environment (the repository's .venv) lacks at that exact version, with
``uv pip install --target DIR --no-deps``: exact pins, no resolver, so no release's metadata
(``torch<2``, ``torch<1.8``) can pull a torch in, and torch is never installed there.

uv links the files from its cache (hard links, its default): an overlay costs almost no disk and
installs in a second when the cache has the wheels, but a tool that edits a file in an overlay
edits the cached copy too. The overlays are git-ignored, so ruff and mypy never see them; delete
uv's cache (``uv cache clean``) if one was edited.

Each overlay also gets a ``sitecustomize.py`` that hides the .venv packages the reference venv
did not have (realbugs/hide.py says why), rewritten on every run.

Idempotent: an overlay whose ``.pins`` stamp lists exactly the pins it needs now is kept; any
other is removed and installed again, and the stamp is written last.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from importlib.metadata import Distribution, distributions

import tomllib
from packaging.requirements import Requirement

from realbugs.suite import (
    ROOT,
    SIDES,
    STAMP,
    Release,
    base_packages,
    canonical,
    load,
    needed,
    site_dirs,
)


def uv() -> str:
    """The uv binary of the uv package installed in this interpreter's environment (test extra)."""
    try:
        from uv import find_uv_bin
    except ImportError:
        sys.exit("realbugs: uv is not installed in this environment; pip install -e '.[test]' installs it")
    return str(find_uv_bin())


def install(release: Release, pins: list[str]) -> bool:
    """Install ``pins`` into the release's overlay unless its stamp already lists them.
    True when it installed."""
    stamp = release.overlay / STAMP
    want = "".join(f"{pin}\n" for pin in pins)
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == want:
        return False
    shutil.rmtree(release.overlay, ignore_errors=True)
    release.overlay.mkdir(parents=True)
    subprocess.run(
        [uv(), "pip", "install", "--quiet", "--python", sys.executable, "--target", str(release.overlay),
         "--no-deps", *pins],
        check=True,
    )
    stamp.write_text(want, encoding="utf-8")
    return True


#: this repository's extras an overlay process keeps too: ``lightning`` (greenlet), without which
#: ``leakscope check`` cannot drive a LightningModule (tests/test_adapters_realbugs.py checks the
#: suite's Lightning modules); a user who checks one installs it with leakscope
KEPT_EXTRAS = ("lightning",)


def kept() -> set[str]:
    """Distributions every overlay process keeps from .venv: torch and this repository's package
    with everything they require (extras aside but :data:`KEPT_EXTRAS`), and pip."""
    project = canonical(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])
    by_name = {canonical(dist.metadata["Name"]): dist for dist in _base_distributions()}
    seen = {"pip"}
    stack = ["torch", project]
    while stack:
        name = stack.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        extras = ("", *KEPT_EXTRAS) if name == project else ("",)
        for line in by_name[name].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": e}) for e in extras):
                stack.append(canonical(requirement.name))
    return seen


def _base_distributions() -> list[Distribution]:
    return [dist for dist in distributions(path=site_dirs()) if dist.metadata["Name"]]


def top_level(dist: Distribution) -> set[str]:
    """The import names a distribution installs (top_level.txt, else its RECORD)."""
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip()}
    names = set()
    for file in dist.files or ():
        first = file.parts[0]
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".data", ".pth")):
            continue
        names.add(first.removesuffix(".py") if len(file.parts) == 1 else first)
    return {name for name in names if name.isidentifier()}


def hidden(release: Release, keep: set[str]) -> tuple[list[str], list[str]]:
    """(import names, distribution names) of .venv to hide from the release's processes."""
    wanted = {canonical(pin.partition("==")[0]) for pin in release.lock} | keep
    dists = _base_distributions()
    hide = [dist for dist in dists if canonical(dist.metadata["Name"]) not in wanted]
    shown = set().union(*(top_level(dist) for dist in dists if dist not in hide))
    modules = set().union(*(top_level(dist) for dist in hide)) - shown
    return sorted(modules), sorted(canonical(dist.metadata["Name"]) for dist in hide)


def write_hiding(release: Release, keep: set[str]) -> None:
    modules, dists = hidden(release, keep)
    (release.overlay / "sitecustomize.py").write_text(
        "# Written by realbugs/overlays.py: hides the .venv packages this release's reference venv\n"
        "# did not have (realbugs/hide.py).\n"
        "from realbugs.hide import install\n\n"
        f"install(\n    {modules!r},\n    {dists!r},\n)\n",
        encoding="utf-8",
    )


def main(names: list[str]) -> int:
    bugs = load()
    unknown = sorted(set(names) - {bug.name for bug in bugs})
    if unknown:
        print(f"realbugs: no bug named {', '.join(unknown)} in realbugs/bugs.toml", file=sys.stderr)
        return 2
    base = base_packages()
    keep = kept()
    started = time.monotonic()
    for bug in bugs:
        if names and bug.name not in names:
            continue
        for side in SIDES:
            release = bug.release(side)
            pins = needed(release, base)
            t0 = time.monotonic()
            made = install(release, pins)
            write_hiding(release, keep)
            what = f"installed {len(pins)} packages in {time.monotonic() - t0:.1f} s" if made else "up to date"
            print(f"setup-realbugs: {release.overlay.name} ({side}): {what}")
    print(f"setup-realbugs: {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
